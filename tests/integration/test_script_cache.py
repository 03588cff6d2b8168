"""Scripts sent many at a time in one pipeline still run when Redis has lost its script cache
under them (a restart between redis-py's check that the scripts are loaded and the send), and
each still applies once.

Redis is real; the restart is pinned to that moment by emptying the cache (SCRIPT FLUSH) and
letting the pipeline skip its check once, as if it had checked against the server before it
restarted. Without the retry in workers/state/pipelined.py each of these raised NoScriptError and
lost its whole batch (seen with a Redis restarted under load: 8 of 47,155 batches)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.client import Pipeline

from evolution.models import SuccessfulRun
from selection.learner import ExecutionRecord
from selection.models import Severity
from workers.state.evolution import EvolutionState
from workers.state.learning import LearningState
from workers.state.redis import RedisStateStore


@pytest.fixture
def restarted(redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Empty the script cache, and make the next pipeline's script check see the old server."""
    skipped: list[int] = []
    real = Pipeline.load_scripts

    def load_scripts(self: Pipeline) -> None:
        if not skipped:
            skipped.append(1)
            return
        real(self)

    redis_client.script_flush()
    monkeypatch.setattr(Pipeline, "load_scripts", load_scripts)
    yield skipped


def test_learner_records_pushed_after_a_restart_are_stored_once(redis_client, run_prefix, restarted) -> None:
    state = LearningState(redis_client, f"{run_prefix}:", window=100)
    records = [ExecutionRecord(attempt_id=f"c{n}:0", call_id=f"c{n}", tool="t", version="1.0.0", scenario="s",
                               success=True) for n in range(3)]
    assert state.push(records) == 3
    assert restarted == [1]
    assert state.push(records) == 0  # pushed again (a redelivered batch): nothing new
    assert sorted(r.call_id for r in state.recent()) == ["c0", "c1", "c2"]


def test_successes_counted_after_a_restart_are_counted_once(redis_client, run_prefix, restarted) -> None:
    store = RedisStateStore(redis_client, f"{run_prefix}:")
    assert store.record_successes([("t@1.0.0", "c0:0"), ("t@1.0.0", "c1:0")]) == [True, True]
    assert restarted == [1]
    assert store.record_successes([("t@1.0.0", "c0:0")]) == [False]
    assert store.stats(["t@1.0.0"])["t@1.0.0"].successes == 2


def test_recent_runs_pushed_after_a_restart_are_pushed_once(redis_client, run_prefix, restarted) -> None:
    state = EvolutionState(redis_client, f"{run_prefix}:")
    runs = [("t@1.0.0", f"c{n}:0", SuccessfulRun(scenario=f"job {n}")) for n in range(2)]
    assert state.push_successes(runs) == [True, True]
    assert restarted == [1]
    assert state.push_successes(runs) == [False, False]
    assert [r.scenario for r in state.recent_successes("t@1.0.0")] == ["job 1", "job 0"]


def test_a_run_recorded_after_a_restart_feeds_its_breaker_and_durations_once(redis_client, run_prefix, restarted) -> None:
    """The executor's record of an attempt: its duration and its breaker in one MULTI. The script
    failed inside EXEC, after the duration was pushed, and the attempt ended with NoScriptError
    (CI: a call of test_reliability_redis's stream ended so)."""
    store = RedisStateStore(redis_client, f"{run_prefix}:")
    assert store.record_run("t@1.0.0", 12.5, False, threshold=2, cooldown_s=30, attempt_id="c0:0") == "closed"
    assert restarted == [1]
    assert store.record_run("t@1.0.0", 12.5, False, threshold=2, cooldown_s=30, attempt_id="c0:0") == "closed"  # told what its first delivery was
    assert store.stats_and_breakers(["t@1.0.0"])[0]["t@1.0.0"].recent_runs == 2  # a redelivered run is timed again
    assert store.record_run("t@1.0.0", 8.0, False, threshold=2, cooldown_s=30, attempt_id="c1:0") == "open"


@pytest.fixture
def lost_twice(redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Empty the script cache, and empty it again right after redis-py's SCRIPT LOAD of a script
    called on its own, before its second EVALSHA: two flushes (or restarts) in a row, as a SCRIPT
    FLUSH every 0.2 s under a stream of calls made them (QA: 1 call of 300 ended so)."""
    lost: list[int] = []
    real = redis_client.script_load

    def load_then_lose(script: str) -> str:
        sha = real(script)
        redis_client.script_flush()
        lost.append(1)
        return sha

    redis_client.script_flush()
    monkeypatch.setattr(redis_client, "script_load", load_then_lose)
    yield lost


def test_a_script_run_alone_runs_once_when_the_cache_is_lost_again_as_it_is_loaded(redis_client, run_prefix,
                                                                                   lost_twice) -> None:
    """The call's NoScriptError reached the caller: a selection's stats_and_breakers ended the call
    with it. NOSCRIPT says the script did not run, so the script is sent once more with its text."""
    store = RedisStateStore(redis_client, f"{run_prefix}:")
    applied = store.mark_failure("t@1.0.0", "c0:0", Severity.high)
    assert lost_twice == [1]
    assert (applied.applied, applied.failures) == (True, 1)
    stats, breakers = store.stats_and_breakers(["t@1.0.0"])
    assert lost_twice == [1, 1]
    assert (stats["t@1.0.0"].failures, breakers["t@1.0.0"]) == (1, "closed")
    assert store.mark_failure("t@1.0.0", "c0:0", Severity.high).applied is False  # applied once
    assert store.stats(["t@1.0.0"])["t@1.0.0"].failures == 1

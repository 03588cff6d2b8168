"""Bookkeeping that no attempt id keys applies once through a Redis that stalls past the client's
socket timeout (QA T).

The state client sends a command again after a timeout (workers/state/__init__.py), which rides
out a restart; a stalled server, though, runs the first copy when it wakes and then the copy sent
again. Redis here is real and really stopped (SIGSTOP, then SIGCONT), and the client is the
workers' own with a 0.3 s socket timeout instead of 5 s. Before workers/state/once.py each of these
counted twice: a run's duration, a flush of metrics, a changelog entry, a worker process's death,
a promotion, new weights.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis
from redis.client import Pipeline

from evolution.models import ChangelogEntry
from selection.models import Promotion
from selection.ports import SelectionWeights
from tests.conftest import RedisServer
from workers.metrics import MetricsReader, MetricsRecorder
from workers.settings import Settings
from workers.redis_connection import redis_client
from workers.state.evolution import EvolutionState
from workers.state.inflight import InflightCalls
from workers.state.redis import RedisStateStore

STALL_S = 1.2  # four socket timeouts: the command is sent again while the server sleeps
PREFIX = "stall:"


@pytest.fixture
def stalling(private_redis: RedisServer) -> Iterator[tuple[redis.Redis, Callable]]:
    """A private Redis, the workers' client for it, and a way to stall it for STALL_S."""
    proc = private_redis.proc
    client = redis_client(Settings(redis_url=private_redis.url), socket_timeout=0.3)
    client.ping()  # a pooled connection, as a worker's: the command goes out before the stall is noticed

    wakers: list[threading.Timer] = []

    def stall() -> None:
        os.kill(proc.pid, signal.SIGSTOP)
        wakers.append(threading.Timer(STALL_S, os.kill, (proc.pid, signal.SIGCONT)))
        wakers[-1].start()

    @contextmanager
    def stalled() -> Iterator[None]:
        stall()
        try:
            yield
        finally:
            wakers[-1].join()

    stalled.now = stall  # type: ignore[attr-defined]  # for a stall pinned to a moment inside a command

    try:
        yield client, stalled
    finally:
        os.kill(proc.pid, signal.SIGCONT)  # so that it can stop


def test_the_clients_retry_would_count_twice_through_a_stall(stalling) -> None:
    """The hazard itself, so that the tests below cannot pass because no copy was sent."""
    client, stalled = stalling
    with stalled():
        client.rpush(f"{PREFIX}plain", "x")
    assert client.llen(f"{PREFIX}plain") >= 2


def test_a_runs_duration_and_breaker_count_once(stalling, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline with scripts first asks Redis whether it has them (SCRIPT EXISTS), a round trip of
    its own: the stall is pinned to the moment after it, as the pipeline itself goes out."""
    client, stalled = stalling
    store = RedisStateStore(client, PREFIX)
    store.record_run("other@1.0.0", 1.0, True, threshold=2, cooldown_s=30, attempt_id="w0:0")  # scripts loaded, as in a worker
    checked = Pipeline.load_scripts

    def checked_then_stalled(pipe: Pipeline) -> None:
        checked(pipe)
        monkeypatch.setattr(Pipeline, "load_scripts", checked)
        stalled.now()

    monkeypatch.setattr(Pipeline, "load_scripts", checked_then_stalled)
    # the reply may be the copy's, which is told what the first was told
    assert store.record_run("t@1.0.0", 12.5, False, threshold=2, cooldown_s=30, attempt_id="c0:0") == "closed"
    assert store.stats_and_breakers(["t@1.0.0"])[0]["t@1.0.0"].recent_runs == 1  # timed once
    assert store.record_run("t@1.0.0", 8.0, False, threshold=2, cooldown_s=30, attempt_id="c1:0") == "open"  # 2nd failure


def test_a_metrics_flush_counts_once(stalling) -> None:
    client, stalled = stalling
    recorder = MetricsRecorder(client, PREFIX, flush_interval_s=3600)
    recorder.count("warm")
    recorder.flush()  # as in a worker
    recorder.selection("seed", found=True)
    recorder.call("success", 1, 5.0, "word_stats")
    with stalled():
        recorder.flush()
    reader = MetricsReader(client, PREFIX)
    assert reader.counters()["selections"] == [({"outcome": "ranked", "policy": "seed"}, 1)]
    assert [c.status for c in reader.calls()] == ["success"]


def test_a_changelog_entry_is_logged_once(stalling) -> None:
    client, stalled = stalling
    ledger = EvolutionState(client, PREFIX)
    ledger.log(ChangelogEntry(namespace="w", event="rolled_back", version="1.0.1"))  # as in a worker
    with stalled():
        ledger.log(ChangelogEntry(namespace="t", event="rolled_back", version="1.0.1", reason="by hand"))
    assert [e.reason for e in ledger.changelog("t")] == ["by hand"]
    ledger.log_unless_repeated(ChangelogEntry(namespace="w", event="no_fix", parent="1.0.0"))  # its script loaded
    with stalled():  # the copy sent again answers as the first did
        assert ledger.log_unless_repeated(ChangelogEntry(namespace="u", event="no_fix", parent="1.0.0", reason="none"))
    ledger.log(ChangelogEntry(namespace="u", event="verified", version="1.0.1", parent="1.0.0"))
    assert [e.event for e in ledger.changelog("u")] == ["no_fix", "verified"]


def test_a_worker_process_death_counts_once(stalling) -> None:
    client, stalled = stalling
    inflight = InflightCalls(client, PREFIX)
    inflight.died("w0:0", "signal 9 (SIGKILL)", 10.0)  # its script loaded, as in a worker
    with stalled():
        assert inflight.died("c0:0", "signal 9 (SIGKILL)", 40.0) == 1
    assert inflight.died("c0:0", "signal 9 (SIGKILL)", 50.0) == 2


def test_a_promotion_and_new_weights_are_stored_once(stalling) -> None:
    client, stalled = stalling
    store = RedisStateStore(client, PREFIX)
    store.promote(Promotion(namespace="w", evolved_version="1.0.1", original_version="1.0.0"))  # scripts loaded
    store.set_weights(SelectionWeights())
    with stalled():
        store.promote(Promotion(namespace="t", evolved_version="1.0.1", original_version="1.0.0", by="operator"))
    with stalled():
        stored = store.set_weights(SelectionWeights())
    assert [p.evolved_version for p in store.promotion_history("t")] == ["1.0.1"]
    assert stored.version == 2 and [w.version for w in store.weights_history()] == [2, 1]

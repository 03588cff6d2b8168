"""A namespace's changelog on the real Redis: outcomes that repeat while nothing else happens are
kept once (EvolutionState.log_unless_repeated, lua/changelog_unless_repeated.lua)."""

from __future__ import annotations

import threading

import redis

from evolution.models import ChangelogEntry
from workers.state.evolution import EvolutionState

NO_FIX = ChangelogEntry(namespace="mean", event="no_fix", parent="1.0.0", trigger="call",
                        reason="no mutator could propose a version of mean@1.0.0; crash: no mutator answers this failure class")


def test_a_repeated_entry_is_logged_once_until_another_comes_between(redis_client: redis.Redis, run_prefix: str) -> None:
    ledger = EvolutionState(redis_client, run_prefix)
    assert ledger.log_unless_repeated(NO_FIX)
    assert not ledger.log_unless_repeated(NO_FIX.model_copy(update={"job_id": "j2", "elapsed_s": 0.5}))
    ledger.log(ChangelogEntry(namespace="mean", event="verified", version="1.0.1", parent="1.0.0"))
    assert ledger.log_unless_repeated(NO_FIX)  # something else happened since: said again
    assert ledger.log_unless_repeated(NO_FIX.model_copy(update={"parent": "1.0.1"}))  # another version
    assert not ledger.log_unless_repeated(NO_FIX.model_copy(update={"parent": "1.0.1"}))
    assert ledger.log_unless_repeated(NO_FIX.model_copy(update={"namespace": "median"}))  # another namespace's changelog
    assert [(e.event, e.parent) for e in ledger.changelog("mean")] == [
        ("no_fix", "1.0.0"), ("verified", "1.0.0"), ("no_fix", "1.0.0"), ("no_fix", "1.0.1")]
    assert ledger.changelog("mean")[0].reason == NO_FIX.reason


def test_a_skipped_mutation_and_the_no_fix_it_ends_in_are_logged_once_while_calls_fail_alike(
    redis_client: redis.Redis, run_prefix: str
) -> None:
    """QA recheck N5: each failed call added a `skipped` and a `no_fix` line."""
    ledger = EvolutionState(redis_client, run_prefix)
    skipped = ChangelogEntry(namespace="mean", event="skipped", parent="1.0.0", mutator="timeout",
                             mutation="timeout_s 0.3s → 1.2s", reason="failed before for a similar reason: replay: failing input still fails")
    no_fix = NO_FIX.model_copy(update={"reason": "no verified version of mean@1.0.0: 0 candidate(s) failed verification, 1 skipped"})
    for call in range(3):
        assert ledger.log_unless_repeated(skipped) is (call == 0)
        assert ledger.log_unless_repeated(no_fix) is (call == 0)
    other = skipped.model_copy(update={"mutator": "description", "mutation": "a clearer description"})
    assert ledger.log_unless_repeated(other)  # another mutation, skipped for the same reason
    ledger.log(ChangelogEntry(namespace="mean", event="promoted", version="1.0.1", parent="1.0.0", by="operator"))
    assert ledger.log_unless_repeated(skipped) and ledger.log_unless_repeated(no_fix)  # said again after a promotion
    assert [e.event for e in ledger.changelog("mean")] == ["skipped", "no_fix", "skipped", "promoted", "skipped", "no_fix"]


def test_calls_failing_at_the_same_moment_log_the_repeated_entry_once(redis_url: str, run_prefix: str) -> None:
    """Each thread has its own client, as separate worker processes do, and all send at once."""
    threads, rounds = 8, 25
    start = threading.Barrier(threads)
    logged: list[bool] = []

    def fail_calls() -> None:
        ledger = EvolutionState(redis.Redis.from_url(redis_url), run_prefix)
        start.wait()
        for _ in range(rounds):
            logged.append(ledger.log_unless_repeated(NO_FIX))

    workers = [threading.Thread(target=fail_calls) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(logged) == threads * rounds
    assert logged.count(True) == 1
    assert len(EvolutionState(redis.Redis.from_url(redis_url), run_prefix).changelog("mean")) == 1

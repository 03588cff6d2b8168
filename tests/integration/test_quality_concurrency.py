"""N worker processes demoting ONE tool version at once lose no update and apply no attempt twice.

8 OS processes (spawn, each with its own Redis client) x 250 `mark_failure` calls with distinct
attempt ids and mixed severities (deterministic per process), then all 2,000 again.

What is exact here, and why:
- The extra penalty (past 5 / past 10 failures) depends on the failure's position in the global
  order, which the processes race for, so the quality after a given call is not known in advance.
  But the script returns each call's position (its failure count) and the quality right after it.
  The positions must be exactly 1..2000, each once (every update serialised, none lost), and
  replaying the failures in that order with selection/quality.py must give the quality each call
  reported, step by step (each update applied the rule to the state left by the one before).
- The final quality is order-independent: penalties are all positive and quality only floors at 0,
  so it is max(0, 10000 - sum of base penalties - sum over positions 1..2000 of the extra). With
  2,000 failures that is 0 (quality floors within the first ~20 failures), so the step-by-step check
  above is what tests the arithmetic; the final failure count (2000) is what tests lost updates.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import random
import time
import traceback
import uuid

from selection.models import Severity
from selection.quality import FULL_QUALITY_BP, SEVERITY_PENALTY_BP, apply_failure_bp, failure_penalty_bp

PROCESSES = 8
CALLS = 250
KEY = "translate_text@1.0.0"
SEVERITIES = list(Severity)


def plan(worker: int, run: str) -> list[tuple[str, Severity]]:
    """The (attempt id, severity) calls of one worker: the same on every run of the worker."""
    rng = random.Random(worker)
    return [(f"{run}-p{worker}-a{j}", rng.choice(SEVERITIES)) for j in range(CALLS)]


def worker_main(worker: int, run: str, url: str, prefix: str, barrier, results) -> None:
    try:
        from workers.settings import Settings
        from workers.state import open_state_store

        store = open_state_store(Settings(redis_url=url, key_prefix=prefix))
        store.client.ping()
        barrier.wait(timeout=60)  # all start hammering at once
        out = []
        for attempt_id, severity in plan(worker, run):
            r = store.mark_failure(KEY, attempt_id, severity)
            out.append((attempt_id, severity.value, r.applied, round(r.quality * FULL_QUALITY_BP), r.failures))
        store.client.close()
        results.put((worker, out, None))
    except BaseException:  # report, so the parent fails with the reason instead of waiting
        results.put((worker, None, traceback.format_exc()))


def run_workers(url: str, prefix: str, run: str) -> list[tuple[str, str, bool, int, int]]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker_main, args=(w, run, url, prefix, barrier, results), daemon=True)
        for w in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    calls, errors, reported = [], [], 0
    deadline = time.monotonic() + 120
    try:
        while reported < PROCESSES:
            try:
                worker, out, error = results.get(timeout=0.5)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                assert not dead, f"a worker process died before reporting (exit codes {dead})"
                assert time.monotonic() < deadline, "workers did not report within 120 s"
                continue
            reported += 1
            if error:
                errors.append(f"worker {worker}:\n{error}")
            else:
                calls.extend(out)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert not errors, "\n".join(errors)
    assert len(calls) == PROCESSES * CALLS
    return calls


def test_concurrent_mark_failure_is_exact_and_idempotent(redis_url: str, run_prefix: str):
    from workers.settings import Settings
    from workers.state import open_state_store

    store = open_state_store(Settings(redis_url=redis_url, key_prefix=run_prefix))
    run = uuid.uuid4().hex[:8]
    try:
        version_before = store.versions().state
        calls = run_workers(redis_url, run_prefix, run)

        # Every call applied, each at its own position 1..2000.
        assert all(applied for _, _, applied, _, _ in calls)
        by_position = sorted(calls, key=lambda c: c[4])
        assert [c[4] for c in by_position] == list(range(1, PROCESSES * CALLS + 1))
        assert sorted(c[0] for c in calls) == sorted(a for w in range(PROCESSES) for a, _ in plan(w, run))

        # They did race: the global order switches between processes (typically ~1,800 times).
        order = [attempt_id.split("-")[1] for attempt_id, *_ in by_position]
        switches = sum(a != b for a, b in zip(order, order[1:]))
        assert switches >= PROCESSES, f"processes barely interleaved ({switches} switches)"

        # Replaying in the order Redis serialised them gives the quality each call reported.
        q, f = FULL_QUALITY_BP, 0
        for attempt_id, severity, _, reported_q, reported_f in by_position:
            q, f = apply_failure_bp(q, f, Severity(severity))
            assert (reported_q, reported_f) == (q, f), f"{attempt_id} at position {reported_f}"

        # The final value, computed without any order.
        n = PROCESSES * CALLS
        base = sum(SEVERITY_PENALTY_BP[Severity(s)] for _, s, _, _, _ in calls)
        extras = sum(failure_penalty_bp(Severity.low, k) - SEVERITY_PENALTY_BP[Severity.low] for k in range(1, n + 1))
        expected_bp = max(0, FULL_QUALITY_BP - base - extras)
        assert q == expected_bp
        stats = store.stats([KEY])[KEY]
        assert (round(stats.quality * FULL_QUALITY_BP), stats.failures, stats.successes) == (expected_bp, n, 0)
        assert store.versions().state == version_before + n

        # Redelivery of all 2,000 attempts, again from 8 processes: nothing changes.
        replay = run_workers(redis_url, run_prefix, run)
        assert not any(applied for _, _, applied, _, _ in replay)
        assert {(q_, f_) for _, _, _, q_, f_ in replay} == {(expected_bp, n)}
        assert store.stats([KEY])[KEY] == stats
        assert store.versions().state == version_before + n
    finally:
        store.clear()

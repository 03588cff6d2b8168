"""An execution worker stopped, warm or cold, by a signal to it or to its whole process group, or
by a tool it runs: the attempts it ran finish or run again, and no tool is charged for a stop.

Each test stops the worker of a stack serving `nap` (tests/integration/delivery.py) in the middle
of an attempt, and checks what a user would: the call still ends with its result, the tool ran
again only because a run was cut short, and its counters are what one delivery gives.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Pipeline
from tests.integration.delivery import (NAP, VISIBILITY_S, assert_one_delivery, breaker_opened_then_closed,
                                        foreign_sender, nap_call, nap_pipeline, nap_then_brittle, restart_executor,
                                        runs, wait_runs)
from workers.attempt_deaths import CRASH_AFTER_DEATHS
from workers.redis_connection import redis_client
from workers.state.inflight import InflightCalls

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    with nap_pipeline(tmp_path_factory.mktemp("shutdown"), redis_url, model_path) as p:
        yield p


def test_a_tool_that_sends_sigterm_to_its_executors_group_stops_it_warm_and_the_call_beside_it_succeeds(
        pipeline: Pipeline, tmp_path: Path) -> None:
    """QA 49: a tool that SIGTERMs its executor's process group killed the pool processes as well as
    starting the executor's warm shutdown; the call running beside it, and its own, ended a `crash`
    after two such deaths, and an innocent tool's breaker opened. The pool processes outlive a
    SIGTERM that came to the whole group: the warm shutdown lets both tasks finish."""
    p, nap_log, term_log = pipeline, tmp_path / "nap.log", tmp_path / "term.log"
    p.settled()
    before = p.state().stats([NAP])[NAP]
    beside = nap_call(p, nap_log, 4000)
    wait_runs(p, nap_log, 1)
    term = nap_call(p, term_log, 300, die="group")
    assert p.stack.procs["executor"].wait(timeout=60) == 0  # stopped warm, once its tasks were done
    restart_executor(p)
    for sent, log in ((beside, nap_log), (term, term_log)):
        result = p.client.wait(sent, 60)
        assert result["status"] == "success" and not result["attempts"][0]["isolated"], result
        assert len(runs(log)) == 1  # ran once, to its end
    p.settled()
    after = p.state().stats([NAP])[NAP]
    assert (after.successes, after.failures) == (before.successes + 2, before.failures)
    assert p.state().stats_and_breakers([NAP])[1][NAP] == "closed"
    said = (p.stack.log_dir / "executor.log").read_text()
    assert "SIGTERM came to the whole worker, which stops warm: its task goes on" in said


@pytest.mark.parametrize(("first", "after_s", "then"), [
    # within GROUP_WINDOW_S (review 51: the task ran on to its end; past it, review 50's case, the
    # same note ends it)
    ("group SIGTERM", 0.3, signal.SIGQUIT),
    ("Ctrl-C", 0.3, signal.SIGINT),  # a second Ctrl-C at once, as people force a stop (review 51)
])
def test_a_cold_shutdown_after_a_warm_one_stops_the_task_that_outlived_it(
        pipeline: Pipeline, tmp_path: Path, first: str, after_s: float, then: signal.Signals) -> None:
    """Review 50: once a warm shutdown was noted, a pool process outlived every later SIGTERM, the
    cold shutdown's terminate among them (a second Ctrl-C, or SIGQUIT after SIGTERM): the task ran
    on to its end. Only a SIGTERM within moments of a warm shutdown begun by SIGTERM is the
    group's, and only until a cold shutdown is noted."""
    p, log = pipeline, tmp_path / "runs.log"
    p.settled()
    logged = len((p.stack.log_dir / "executor.log").read_text())
    sent = nap_call(p, log, 7000)
    wait_runs(p, log, 1)
    executor = p.stack.procs["executor"]
    if first == "Ctrl-C":
        os.killpg(executor.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the group: the pool ignores it
    else:
        os.killpg(executor.pid, signal.SIGTERM)  # to the whole group: the pool process outlives it
    time.sleep(after_s)
    assert executor.poll() is None  # stopping warm: its task goes on
    os.kill(executor.pid, then)  # the cold shutdown: its terminate stops the task
    try:
        executor.wait(timeout=3.5)  # the nap had over 4 s to go
    finally:
        executor.wait(timeout=30)
        restart_executor(p)
    said = (p.stack.log_dir / "executor.log").read_text()[logged:]
    outlived = said.count("SIGTERM came to the whole worker, which stops warm: its task goes on")
    # (the cold shutdown is noted before its terminate: ColdNotingConsumer)
    assert outlived == (0 if first == "Ctrl-C" else 1), said
    result = p.client.wait(sent, VISIBILITY_S + 90)
    assert result["status"] == "success", result
    assert len(runs(log)) == 2  # stopped, then run again, in full


def test_a_worker_killed_as_it_stops_charges_no_death_to_the_tool_it_ran(pipeline: Pipeline, tmp_path: Path) -> None:
    """QA 49 recheck R1: `fittest up` stops a role with SIGTERM to its group, then SIGKILL 5 s later;
    a tool still running then (its pool process outlives the group's SIGTERM) had its worker's death
    counted against it, as if it had killed the worker. The stop's kill is nobody's doing: the
    attempt runs again, in its pool, as the first time."""
    p, log = pipeline, tmp_path / "runs.log"
    p.settled()
    before = p.state().stats([NAP])[NAP]
    sent = nap_call(p, log, 6500)  # within its timeout, and running 5 s after the stop began
    wait_runs(p, log, 1)
    executor = p.stack.procs["executor"]
    os.killpg(executor.pid, signal.SIGTERM)  # as honcho stops a role
    time.sleep(5)
    os.killpg(executor.pid, signal.SIGKILL)  # as honcho does to one still running 5 s later
    assert executor.wait(timeout=30) == -signal.SIGKILL
    restart_executor(p)
    result = p.client.wait(sent, VISIBILITY_S + 90)
    assert result["status"] == "success" and not result["attempts"][0]["isolated"], result
    assert len(runs(log)) == 2  # killed, then run again, in full
    client = redis_client(p.settings)
    try:
        assert InflightCalls(client, p.settings.key_prefix).deaths(f"{result['call_id']}:0").count == 0
    finally:
        client.close()
    p.settled()
    after = p.state().stats([NAP])[NAP]
    assert (after.successes, after.failures) == (before.successes + 1, before.failures)
    assert "ran in a worker killed as it stopped: not counted" in (p.stack.log_dir / "executor.log").read_text()


def test_a_tool_that_stops_its_worker_and_then_kills_it_ends_a_crash(pipeline: Pipeline, tmp_path: Path) -> None:
    """QA 49 recheck 2: a tool that SIGTERMs its executor's group (its worker begins to stop) and
    then kills the worker was never charged a death, each kill taken for a stop's: it killed the
    executor every 10 s, for ever. A stop's kill is let go once per attempt."""
    p, log = pipeline, tmp_path / "runs.log"
    plan = nap_then_brittle("a nap that stops its worker, then kills it", log, die="group, then parent", ms=200)
    sender = foreign_sender(p)
    try:
        pending = sender.send_task("fittest.execute", args=[plan, 0], queue="execution")
        deadline = time.monotonic() + 4 * VISIBILITY_S + 120
        while not pending.ready():
            assert time.monotonic() < deadline, f"still running after {len(runs(log))} runs"
            if p.stack.procs["executor"].poll() is not None:
                restart_executor(p)  # as `fittest up` does
            time.sleep(0.5)
        result = pending.get(timeout=10)
    finally:
        sender.close()
    first = result["attempts"][0]
    assert first["error_class"] == "crash" and result["tool"] == "brittle", result
    assert len(runs(log)) <= 1 + 1 + CRASH_AFTER_DEATHS, runs(log)  # the stop let go once, then its deaths
    breaker_opened_then_closed(p, NAP)
    client = redis_client(p.settings)
    try:
        client.delete(f"{p.settings.key_prefix}inflight:killer:{NAP}")
    finally:
        client.close()


def test_sigterm_lets_running_attempts_finish_and_returns_the_rest(pipeline: Pipeline, tmp_path: Path) -> None:
    p, log = pipeline, tmp_path / "runs.log"
    p.settled()  # the bookkeeping of earlier calls is applied before the counters are read
    before = p.state().stats([NAP])[NAP]
    sent = [nap_call(p, log, 3000, n=i) for i in range(4)]
    wait_runs(p, log, 2)  # both pool processes busy; two calls wait in the queue
    proc = p.stack.procs["executor"]
    started = time.monotonic()
    p.stack.stop("executor", signal.SIGTERM, timeout=30)
    stopped_in = time.monotonic() - started
    assert proc.returncode == 0  # a warm shutdown, not the kill after the timeout
    assert stopped_in < 3 + 8  # the running naps' rest, well within their 8 s hard timeout
    assert len(runs(log)) == 2  # nothing else was started
    restart_executor(p)
    results = [p.client.wait(s, 60) for s in sent]
    assert [r["status"] for r in results] == ["success"] * 4
    assert len(runs(log)) == 4  # each call ran exactly once
    assert_one_delivery(p, NAP, before.successes + 4, before.failures, before.quality)

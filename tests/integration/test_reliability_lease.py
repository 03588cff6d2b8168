"""A dead worker's calls go on after its lease, not after the visibility timeout.

Real workers on a real broker: an execution worker is killed with SIGKILL in the middle of an
attempt of `nap` (a tool that logs each run, then sleeps) while the visibility timeout is 300 s,
and the call must end well within it; one stopped warmly while an attempt outlasts the lease must
not have that attempt given to another worker.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Pipeline, pipeline_running
from tests.integration.test_reliability_delivery import TOOLS, assert_one_delivery, nap_call, restart_executor, runs, wait_runs
from workers.state.holders import MessageHolders
from workers.redis_connection import redis_client

pytestmark = pytest.mark.slow

NAP = "nap@1.0.0"
VISIBILITY_S = 300
LEASE_S = 10


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    with pipeline_running(
        tmp_path_factory.mktemp("lease"), redis_url, model_path, TOOLS, roles=("memory", "executor"),
        FITTEST_EVOLUTION_ENABLED="false", FITTEST_MIN_TIMEOUT_S="40", FITTEST_MAX_TIMEOUT_S="40",
        FITTEST_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S), FITTEST_WORKER_LEASE_S=str(LEASE_S),
    ) as p:  # a first call loads the model and the store, and the memory worker beats for a lease
        assert p.call(scenario="take a nap", namespace="nap", input={}, timeout=180)["status"] == "success"
        yield p


def leases_of(p: Pipeline, pid: int) -> list[str]:
    """The beats recorded for the worker whose main process is `pid` (holder: name:pid:token)."""
    holders = MessageHolders(redis_client(p.settings), p.settings.key_prefix, keep_s=VISIBILITY_S)
    return [h for h in holders.silent(0.0) if f":{pid}:" in h]


def test_a_killed_workers_attempt_is_given_back_after_its_lease(pipeline: Pipeline, tmp_path: Path) -> None:
    p, log = pipeline, tmp_path / "runs.log"
    p.settled()
    before = p.state().stats([NAP])[NAP]
    sent = nap_call(p, log, 2000)
    wait_runs(p, log, 1)
    pid = p.stack.procs["executor"].pid
    assert leases_of(p, pid)  # it beats
    p.stack.stop("executor", signal.SIGKILL)
    killed_at = time.monotonic()
    restart_executor(p)
    result = p.client.wait(sent, 120)
    took = time.monotonic() - killed_at
    assert result["status"] == "success", result
    assert took < LEASE_S + 45 < VISIBILITY_S, took  # the lease, a sweep, the nap; not the visibility timeout
    assert len(runs(log)) == 2  # cut short once, run again once
    assert_one_delivery(p, NAP, before.successes + 1, before.failures, before.quality)
    assert not leases_of(p, pid)  # its lease was taken, once


def test_a_worker_stopping_warmly_keeps_an_attempt_that_outlasts_its_lease(pipeline: Pipeline, tmp_path: Path) -> None:
    """A warm shutdown waits for the running attempt; its worker beats on meanwhile, so the attempt
    is not given to another worker, and once it exits cleanly nobody is left to judge."""
    p, log = pipeline, tmp_path / "runs.log"
    p.settled()
    sent = nap_call(p, log, (LEASE_S + 6) * 1000)
    wait_runs(p, log, 1)
    proc = p.stack.procs["executor"]
    stopping = time.monotonic()
    p.stack.stop("executor", signal.SIGTERM, timeout=60)
    assert proc.returncode == 0 and time.monotonic() - stopping > LEASE_S  # it waited for the nap
    restart_executor(p)
    result = p.client.wait(sent, 60)
    assert result["status"] == "success", result
    assert len(runs(log)) == 1  # ran once: its message was never given away
    assert not leases_of(p, proc.pid)  # it forgot its lease as it exited

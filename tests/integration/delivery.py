"""What the delivery and shutdown tests share: a stack serving `nap` (a tool that logs each run's
pid, then sleeps, or dies as its input says) and `brittle`, with an execution worker the tests
kill, stop and restart, and the checks of what one delivery of an attempt leaves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from celery import Celery

from selection.manifest import load_manifest
from selection.models import CallPlan, CallRequest, Candidate
from tests.integration.conftest import Pipeline, pipeline_running
from workers.redis_connection import redis_client

TOOLS = Path(__file__).parent / "reliability_tools"
NAP = "nap@1.0.0"
BRITTLE = "brittle@1.0.0"
VISIBILITY_S = 12  # > FITTEST_MAX_TIMEOUT_S: how long a crashed worker's message stays with it


@contextmanager
def nap_pipeline(workdir: Path, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    """The memory and execution workers of a stack with evolution off and every timeout 8 s."""
    with pipeline_running(
        workdir, redis_url, model_path, TOOLS, roles=("memory", "executor"),
        FITTEST_EVOLUTION_ENABLED="false", FITTEST_MIN_TIMEOUT_S="8", FITTEST_MAX_TIMEOUT_S="8",
        FITTEST_VISIBILITY_TIMEOUT_S=str(VISIBILITY_S),
    ) as p:  # a first call loads the model and the store, so no test waits on that
        assert p.call(scenario="take a nap", namespace="nap", input={}, timeout=180)["status"] == "success"
        yield p


def runs(log: Path) -> list[int]:
    """The pids of every run of `nap` that logged to `log` (one line each, written before it sleeps)."""
    return [int(line) for line in log.read_text().split()] if log.exists() else []


def wait_runs(p: Pipeline, log: Path, n: int, timeout: float = 90) -> list[int]:
    p.wait_for(lambda: len(runs(log)) >= n, timeout=timeout)
    return runs(log)


def assert_one_delivery(p: Pipeline, key: str, successes: int, failures: int, quality: float) -> None:
    """Counters settle (the feedback queue has caught up) at exactly these values and stay there."""
    p.wait_for(lambda: (lambda s: (s.successes, s.failures) == (successes, failures))(p.state().stats([key])[key]), timeout=60)
    p.settled()  # every message taken and acknowledged: a second application, a redelivery's too, has landed
    stats = p.state().stats([key])[key]
    assert (stats.successes, stats.failures, round(stats.quality, 4)) == (successes, failures, quality)


def restart_executor(p: Pipeline) -> None:
    p.stack.start_roles(["executor"])
    p.stack.wait_for_workers(["executor"])


def nap_call(p: Pipeline, log: Path, ms: int, **extra: object):
    return p.client.send("resilient_tool_call", scenario="take a nap and report the process id", namespace="nap",
                         version="1.0.0", max_attempts=1, input={"ms": ms, "log": str(log), **extra})


def nap_then_brittle(scenario: str, log: Path, **input: object) -> dict[str, Any]:
    """A plan whose first candidate is `nap` (told what to do by `input`) and whose second,
    `brittle`, answers any input without "fail"."""
    request = CallRequest(scenario=scenario, namespace="nap", max_attempts=2, input={"log": str(log), **input})
    candidates = [Candidate(key=NAP, manifest=load_manifest(TOOLS / "nap" / "tool.yaml"), score=1.0),
                  Candidate(key=BRITTLE, manifest=load_manifest(TOOLS / "brittle" / "tool.yaml"), score=0.9)]
    return CallPlan(request=request, candidates=candidates).model_dump(mode="json")


def breaker_opened_then_closed(p: Pipeline, key: str) -> None:
    """A version whose tool killed the process running it has its breaker opened at once, whatever
    the threshold (each call of it would cost a process again); closed here for the tests after."""
    _, breakers = p.state().stats_and_breakers([key])
    assert breakers[key] == "open", breakers
    client = redis_client(p.settings)
    try:
        client.delete(f"{p.settings.key_prefix}breaker:{key}")
    finally:
        client.close()


def foreign_sender(p: Pipeline) -> Celery:
    sender = Celery("foreign", broker=p.settings.redis_url, backend=p.settings.redis_url)
    sender.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    return sender

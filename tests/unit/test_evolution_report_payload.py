"""The evolution report that the retry of a call after its evolution carries is part of the payload
of fittest.resilient_tool_call, and is checked like the rest of it (README: "A bad payload ends
with status: "invalid" and every bad field named; the worker stays up")."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import workers.runtime as runtime_module
from selection.models import CallPlan, CallRequest
from workers.runtime import Runtime
from workers.settings import Settings
from workers.tasks.selection import resilient_tool_call


class NoTools:
    """A selector that finds nothing: the call ends at once (`no_candidates`), no model or store needed."""

    def plan(self, request: CallRequest) -> CallPlan:
        return CallPlan(request=request, candidates=[])


@pytest.fixture
def rt(redis_url: str, run_prefix: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    rt = Runtime(Settings(redis_url=redis_url, key_prefix=run_prefix))
    rt.__dict__["selector"] = NoTools()
    monkeypatch.setattr(runtime_module, "_runtime", rt)
    yield rt


def call(**kwargs: object) -> object:
    return resilient_tool_call.apply(kwargs={"scenario": "sort these numbers ascending", **kwargs}).result


def test_a_bad_evolution_report_ends_the_call_invalid_naming_it(rt: Runtime) -> None:
    result = call(evolution_report={"status": "evolved", "call_started_at": "yesterday"})
    assert isinstance(result, dict), f"the task raised instead of ending the call: {result!r}"
    assert result["status"] == "invalid"
    assert [e["field"] for e in result["errors"]] == ["evolution_report.call_started_at"]
    not_an_object = call(evolution_report="evolved")
    assert isinstance(not_an_object, dict) and not_an_object["status"] == "invalid"
    assert [e["field"] for e in not_an_object["errors"]] == ["evolution_report"]


def test_the_report_fittest_sends_is_carried_and_times_the_call_from_its_start(rt: Runtime) -> None:
    started = time.time() - 60
    report = {"status": "evolved", "message": "made 1.1.0", "version": "1.1.0", "call_started_at": started,
              "failed_attempts": [{"tool": "t", "version": "1.0.0", "outcome": "failure", "error_class": "crash"}]}
    result = call(evolution_report=report, after_evolution=True)
    assert isinstance(result, dict) and result["status"] == "no_candidates", result
    assert result["evolution"]["version"] == "1.1.0" and result["evolution"]["failed_attempts"][0]["version"] == "1.0.0"
    assert result["elapsed_ms"] >= 60_000

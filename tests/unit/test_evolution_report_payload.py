"""The evolution report that the retry of a call after its evolution carries is part of the payload
of fittest.resilient_tool_call, and is checked like the rest of it (README: "A bad payload ends
with status: "invalid" and every bad field named; the worker stays up"). An invalid call's result
carries the caller's call_id, whichever task it was sent to."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import workers.runtime as runtime_module
from selection.models import CallPlan, CallRequest
from workers.runtime import Runtime
from workers.settings import Settings
from workers.tasks.selection import call_tool, resilient_tool_call


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
    rt.close()  # its keys go with run_prefix's


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


def test_an_invalid_call_by_tool_name_is_answered_under_the_callers_call_id_as_any_call(rt: Runtime) -> None:
    """QA P: fittest.call_tool answered a bad field under its task id, dropping the caller's valid
    call_id (resilient_tool_call keeps it), and a call without a name under a call_id that is none."""
    by_scenario = resilient_tool_call.apply(kwargs={"scenario": "sort", "call_id": "mine-1", "max_attempts": 0},
                                            task_id="task-1").result
    by_name = call_tool.apply(kwargs={"name": "fast_sort", "call_id": "mine-2", "max_attempts": 0}, task_id="task-2").result
    assert isinstance(by_scenario, dict) and isinstance(by_name, dict)
    assert (by_scenario["status"], by_scenario["call_id"]) == ("invalid", "mine-1")
    assert (by_name["status"], by_name["call_id"]) == ("invalid", "mine-2")
    nameless = call_tool.apply(kwargs={"call_id": "not an id"}, task_id="task-3").result
    assert isinstance(nameless, dict) and (nameless["status"], nameless["call_id"]) == ("invalid", "task-3")

"""What a failed call says it tried: the same count the result's table shows."""

from __future__ import annotations

from selection.models import CallPlan, CallRequest, FailureClass, ToolExecutionResult
from workers.tasks.execution import attempts_made


def failure(call: CallRequest, version: str) -> ToolExecutionResult:
    return ToolExecutionResult(attempt_id=f"{call.call_id}:{version}", call_id=call.call_id, tool="t", version=version,
                               success=False, error_class=FailureClass.crash, error_message="boom")


def test_a_call_retried_after_its_evolution_counts_both_rounds() -> None:
    """QA: 'every candidate failed (1 attempt)' under a table of two attempts, 1.0.0 and then the
    evolved 1.2.0: the round before the evolution travels in the report and is shown first."""
    call = CallRequest(scenario="x", namespace="t")
    plan = CallPlan(request=call, candidates=[], attempts=[failure(call, "1.2.0")])
    assert attempts_made(plan) == "1 attempt"
    plan.evolved, plan.evolution_report = True, {"failed_attempts": [failure(call, "1.0.0").model_dump(mode="json")] * 2}
    assert attempts_made(plan) == "2 attempts before the evolution, 1 attempt after it"

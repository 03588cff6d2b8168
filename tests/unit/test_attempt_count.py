"""What a failed call says it tried: the same count the result's table shows."""

from __future__ import annotations

from selection.models import AttemptSummary, CallEvolution, CallPlan, CallRequest, FailureClass, ToolExecutionResult
from workers.tasks.execution import attempts_before_evolution, attempts_made


def failure(call: CallRequest, version: str) -> ToolExecutionResult:
    return ToolExecutionResult(attempt_id=f"{call.call_id}:{version}", call_id=call.call_id, tool="t", version=version,
                               success=False, error_class=FailureClass.crash, error_message="boom")


FIRST_ROUND = AttemptSummary(tool="t", version="1.0.0", outcome="failure", error_class=FailureClass.crash)


def test_a_call_retried_after_its_evolution_counts_both_rounds() -> None:
    """QA: 'every candidate failed (1 attempt)' under a table of two attempts, 1.0.0 and then the
    evolved 1.2.0: the round before the evolution travels in the report and is shown first."""
    call = CallRequest(scenario="x", namespace="t", after_evolution=True)
    plan = CallPlan(request=call, candidates=[], attempts=[failure(call, "1.2.0")])
    assert attempts_made(plan) == "1 attempt"
    plan.evolved, plan.evolution_report = True, CallEvolution(status="evolved", failed_attempts=[FIRST_ROUND] * 2)
    assert attempts_made(plan) == "2 attempts before the evolution, 1 attempt after it"
    assert len(attempts_before_evolution(plan)) == 2  # what the metrics and the report count too (QA: 1)
    plan.evolution_report = CallEvolution(status="reused", version="1.2.0", failed_attempts=[FIRST_ROUND])
    assert attempts_made(plan) == "1 attempt, then 1 attempt retried with 1.2.0"  # no evolution ran (QA evolution L4)


def test_a_call_ended_by_its_evolution_counts_its_one_round_once() -> None:
    call = CallRequest(scenario="x", namespace="t")  # not retried: the report's attempts are the plan's own
    plan = CallPlan(request=call, candidates=[], attempts=[failure(call, "1.0.0")] * 2)
    plan.evolved, plan.evolution_report = True, CallEvolution(status="evolved", failed_attempts=[FIRST_ROUND] * 2)
    assert attempts_before_evolution(plan) == [] and attempts_made(plan) == "2 attempts"

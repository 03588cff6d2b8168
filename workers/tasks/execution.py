"""The `execution` queue: run one candidate of a plan, then hand the call on.

A call never waits on a subtask: success returns the result, a failure reports itself to the
feedback queue (high priority) and replaces this task with the next attempt, or with evolution,
or ends the call with every attempt listed.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from selection.models import CallPlan, CallResult, FailureClass, FailureMark, OutcomeRecord, ToolExecutionResult
from selection.timeouts import adaptive_timeout
from workers.app import PRIORITY_HIGH, PRIORITY_LOW, app
from workers.rescue import CallStep, hand_on
from workers.runners import RunLimits, run_tool
from workers.runtime import runtime

log = logging.getLogger("fittest.attempt")



def attempt_id(plan: CallPlan, index: int) -> str:
    """Stable across redeliveries of the same attempt, so its effects apply once; the retry of a
    call after its evolution numbers its attempts apart (`e0`, `e1`, ...)."""
    round_ = "e" if plan.request.after_evolution else ""
    return f"{plan.request.call_id}:{round_}{index}"


def run_attempt(plan: CallPlan, index: int) -> ToolExecutionResult:
    rt = runtime()
    settings = rt.settings
    candidate = plan.candidates[index]
    manifest = candidate.manifest
    timeout_s = candidate.timeout_s
    if timeout_s is None:  # a plan queued by a worker from before the timeout travelled in the plan
        recent = rt.state.durations([candidate.key]).get(candidate.key, [])
        timeout_s = adaptive_timeout(recent, manifest.timeout_s, settings.min_timeout_s, settings.max_timeout_s)
    outcome = run_tool(manifest, plan.request.input, timeout_s=timeout_s, limits=RunLimits.from_settings(settings))
    result = ToolExecutionResult(
        attempt_id=attempt_id(plan, index),
        call_id=plan.request.call_id,
        tool=manifest.name,
        version=manifest.version,
        success=outcome.success,
        result=outcome.output if outcome.success else None,
        error_class=outcome.error_class,
        error_message=outcome.error_message,
        execution_time_ms=outcome.elapsed_ms,
        complexity=float(plan.features.get("complexity", 0.0) or 0.0),
        metadata={"attempt": index, "timeout_s": round(timeout_s, 3), "policy": plan.policy},
    )
    # The caller's fault is not the tool's; a redelivered attempt feeds the breaker once.
    feeds_breaker = outcome.error_class is not FailureClass.bad_input
    rt.state.record_run(candidate.key, outcome.elapsed_ms, outcome.success if feeds_breaker else None,
                        settings.breaker_threshold, settings.breaker_cooldown_s, attempt_id=result.attempt_id)
    rt.metrics.attempt(result, quality=candidate.breakdown.quality)
    log.info(
        "attempt",
        extra={
            "event": "attempt",
            "call_id": result.call_id,
            "attempt_id": result.attempt_id,
            "tool": result.tool,
            "version": result.version,
            "outcome": "success" if result.success else "failure",
            "error_class": result.error_class.value if result.error_class else None,
            "execution_time_ms": round(result.execution_time_ms, 2),
            "policy": plan.policy,
            "probability": candidate.probability,  # with which the policy put this candidate in this place
        },
    )
    return result


def send_outcome(plan: CallPlan) -> None:
    from workers.tasks.feedback import record_outcome

    record = OutcomeRecord.from_plan(plan)
    record_outcome.apply_async(args=[record.model_dump(mode="json")], priority=PRIORITY_LOW)


def send_failure(plan: CallPlan, result: ToolExecutionResult) -> None:
    from workers.tasks.feedback import mark_failure

    mark = FailureMark(
        attempt_id=result.attempt_id,
        call_id=result.call_id,
        tool=result.tool,
        version=result.version,
        scenario=plan.request.scenario,
        error_class=result.error_class,
        error_message=result.error_message or "",
        input=plan.request.input,
        features=plan.features,
        targeted=plan.request.namespace == result.tool or (not plan.request.namespace and result.metadata.get("attempt") == 0),
    )
    mark_failure.apply_async(args=[mark.model_dump(mode="json")], priority=PRIORITY_HIGH)


def finish(plan: CallPlan, status: str, message: str = "") -> dict[str, Any]:
    send_outcome(plan)
    result = CallResult.from_plan(plan, status, message=message)  # type: ignore[arg-type]
    runtime().metrics.call(result.status, len(result.attempts), result.elapsed_ms, result.tool)
    return result.model_dump(mode="json")


@app.task(bind=True, base=CallStep, name="fittest.execute")
def execute(self: Task, plan_data: dict[str, Any], index: int) -> Any:
    plan = CallPlan.model_validate(plan_data)
    # A redelivered attempt finds its own result already in the plan only if a previous delivery
    # replaced itself; otherwise it runs again under the same attempt id (effects apply once),
    # unless its call has ended meanwhile (CallStep ignores it then).
    plan.attempts = [a for a in plan.attempts if a.metadata.get("attempt", -1) < index]
    result = run_attempt(plan, index)
    plan.attempts.append(result)
    if result.success:
        return finish(plan, "success")

    send_failure(plan, result)
    last = min(len(plan.candidates), plan.request.max_attempts) - 1
    if index < last:
        return hand_on(self, execute.si(plan.model_dump(mode="json"), index + 1))
    settings = runtime().settings
    if settings.evolution_enabled and not plan.request.after_evolution and not plan.evolved:
        from workers.tasks.evolution import prepare_evolution

        return hand_on(self, prepare_evolution.si(plan.model_dump(mode="json")))
    tried = len(plan.attempts)
    return finish(plan, "failed", message=f"every candidate failed ({tried} attempt{'s' if tried != 1 else ''})")

"""The `feedback` queue: apply what one attempt or call teaches, exactly once per attempt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import Task
from celery_batches import SimpleRequest
from evolution.models import EvolutionJob, EvolutionRecord
from pydantic import ValidationError

from selection.models import CallPlan, CallRequest, Candidate, FailureMark, FieldError, OutcomeRecord, field_errors
from workers.app import app
from workers.payloads import FeedbackReply, FeedbackReportRequest, FeedbackRequest, ForgetRequest, InvalidReply
from workers.evolution_jobs import apply_evolution_record, maybe_evolve_for_quality
from workers.outcomes import apply_failure, apply_outcomes, execution_records
from workers.rescue import effects_ended
from workers.feedback_store import (UnknownVersion, feedback_report, feedback_score, judged_as, judged_call,
                                    record_tool_feedback)
from workers.runtime import Runtime, runtime
from workers.store_failures import is_store_failure
from workers.tasks.batches import Batches
from workers.tasks.expiry import drop_if_expired
from workers.tasks.refusals import batch_payloads
from workers.trials import judge_trial

OUTCOME_FLUSH_EVERY = 16
OUTCOME_FLUSH_INTERVAL_S = 0.25


def _send_evolution(job: EvolutionJob) -> None:
    from workers.tasks.evolution import evolve

    evolve.apply_async(args=[job.model_dump(mode="json")])


@app.task(bind=True, name="fittest.mark_failure", ignore_result=True)  # fire and forget: nobody waits on it
def mark_failure(self: Task, mark_data: dict[str, Any]) -> dict[str, Any]:
    """Demote the version that failed and remember the failure (once per attempt); evolve a served
    version whose quality fell below the threshold (at most once per namespace per cool-down).
    Sent recorded as in flight (workers/rescue.py send_recorded), so that a mark lost on its way
    here is sent again; once run it is forgotten, also when it raised (a mark that can never be
    applied would otherwise come back at every sweep past its due time). So are a call's outcome
    and its learner records (`record_outcome`, workers/tasks/learning.py `learn`)."""
    rt = runtime()
    with effects_ended(rt, [self.request]):
        mark = FailureMark.model_validate(mark_data)
        applied = apply_failure(rt, mark)
        maybe_evolve_for_quality(rt, mark, applied, send=_send_evolution)
        return applied.model_dump()


@app.task(base=Batches, name="fittest.record_outcome", flush_every=OUTCOME_FLUSH_EVERY,
          flush_interval=OUTCOME_FLUSH_INTERVAL_S, ignore_result=True)  # fire and forget: nobody waits on it
def record_outcome(requests: list[SimpleRequest]) -> int:
    """Learn from finished calls: successes, feedback and trial counts (once per attempt), then
    hand the calls' execution records to `fittest.learn`, in one message for the whole batch.

    Batched (celery-batches): an outcome is one message per call, and each message as a task of
    its own cost the memory-side worker about as much Celery work (tracing, events) as applying
    it, and a message per call to the learner as much again."""
    from workers.tasks.learning import send_learn

    rt = runtime()
    with effects_ended(rt, requests):
        records = batch_payloads(requests, OutcomeRecord, "fittest.record_outcome")
        apply_outcomes(rt, records)
        send_learn([r for record in records for r in execution_records(record)])
    return len(records)


# A call judged by an id its caller chose is found by the outcome it left, which the feedback queue
# applies in batches within about a second of its end: a judgement sent at once is looked for again
# this often, this far apart, before the call is declared unknown (QA: 5 of 5 such judgements sent
# as the call returned were refused; 1.5 s later they were recorded).
CALL_LOOKUPS = 6
CALL_LOOKUP_INTERVAL_S = 0.5


@app.task(bind=True, name="fittest.record_feedback", track_started=True)  # CallSender.ask_within waits for a started one
def record_feedback(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Store a person's positive or negative feedback on the exact version of a tool."""
    drop_if_expired(self)
    try:
        req = FeedbackRequest.model_validate(kwargs)
    except ValidationError as exc:
        return FeedbackReply(status="invalid", errors=field_errors(exc)).model_dump(mode="json")
    rt = runtime()
    call = None
    if req.call_id is not None:
        try:
            call = judged_call(rt, req.call_id, _stored_result)
        except Exception as exc:
            if not is_store_failure(exc):
                raise
            # not a refusal of what was given: the caller may send it again (`feedback add` exits 1, not 2)
            return FeedbackReply.refused("call_id", (
                f"call {req.call_id}'s result is not stored, and the vector memory that keeps its outcome is "
                "unavailable now: try again later"), "unavailable", status="unavailable").model_dump(mode="json")
        if call is None and self.request.retries < CALL_LOOKUPS - 1:
            raise self.retry(countdown=CALL_LOOKUP_INTERVAL_S, max_retries=CALL_LOOKUPS - 1)
        if call is None:
            return FeedbackReply.refused("call_id", (
                f"no call {req.call_id} is known: no result is stored under that id (results are kept 24 h) and no "
                "outcome of it was recorded; to judge the tool without a call, give a scenario instead"), "no_such_call").model_dump(mode="json")
    try:
        record = record_tool_feedback(rt, req.tool, req.version, req.scenario, req.sentiment, req.reason, req.quality,
                                      call=call)
    except UnknownVersion as exc:
        return FeedbackReply.refused("version", str(exc), "no_such_version").model_dump(mode="json")
    except LookupError as exc:
        return FeedbackReply.refused("tool", str(exc), "no_such_tool").model_dump(mode="json")
    except ValueError as exc:  # a version the call did not run
        return FeedbackReply.refused("call_id", str(exc), "not_in_call").model_dump(mode="json")
    # The trial of a version on trial counts an output judged wrong as a failure (of it, or of its parent).
    trial = judge_trial(rt, record.key, call.call_id, judged_as(record)) if call is not None else None
    first: Candidate | None = None
    try:
        plans = None if record.general else drawn_plans(rt, record.scenario)
        first = likeliest_first(plans) if plans else None
        # The score its ranking uses, where a plan ranked it: its own nearest feedback alone gave
        # -25.4 where the ranking, among the other candidates' feedback, used -28.3 (QA 60b F6).
        ranked = ranked_in(plans, record.key) if plans else None
        points = ranked.breakdown.feedback if ranked else feedback_score(rt, record.tool, record.version, record.scenario)
        # + 0.0: a score a hair below zero rounds to -0.0, which read as a negative score (QA L)
        score: float | None = round(points, 2) + 0.0
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        score = None  # the feedback is kept (workers/pending.py); only its effect cannot be read now
    return FeedbackReply(status="recorded", feedback=record, score_now=score, trial=trial,
                         first_now=first.key if first else None,
                         first_probability=first.probability if first else None).model_dump(mode="json")


# Plans drawn to find the version a call of a judgement's scenario most likely tries first.
FIRST_DRAWS = 16


def drawn_plans(rt: Runtime, scenario: str) -> list[CallPlan] | None:
    """FIRST_DRAWS plans of a call of `scenario` as it would be made now; None when one was made
    without the vector memory, whose evidence the ranking lacks, or ranked nothing."""
    plans = []
    for _ in range(FIRST_DRAWS):
        plan = rt.selector.plan(CallRequest(scenario=scenario))
        if not plan.candidates or plan.degraded:
            return None
        plans.append(plan)
    return plans


def likeliest_first(plans: Sequence[CallPlan]) -> Candidate:
    """The candidate a call most likely tries first, with the probability of that first place. One
    plan is one draw: the policy explores near-ties, and a second opinion or a newcomer goes first
    on a share of the calls, so one draw named a version tried first on 25 %% of such calls while
    the other came first on 12 of the next 20 (QA integrator 9). Each draw logs the exact
    probability of the first place it gave; the likeliest seen in FIRST_DRAWS draws is the answer
    (one of 50 %% or more is missed with a chance of 1 in 65,000)."""
    firsts: dict[str, Candidate] = {}
    for plan in plans:
        firsts.setdefault(plan.candidates[0].key, plan.candidates[0])
    return max(firsts.values(), key=lambda c: c.probability)


def ranked_in(plans: Sequence[CallPlan], key: str) -> Candidate | None:
    """Version `key` as one of `plans` ranked it, or None when none kept it among its candidates."""
    return next((c for plan in plans for c in plan.candidates if c.key == key), None)


def _stored_result(call_id: str) -> dict[str, Any] | None:
    """The result the backend holds for the call whose task id this is (None: none, or not final)."""
    meta = app.backend.get_task_meta(call_id)
    return meta.get("result") if meta.get("status") == "SUCCESS" else None


@app.task(name="fittest.feedback_report")
def feedback_report_task(**kwargs: Any) -> dict[str, Any]:
    """A tool's feedback entries (newest first) and their trend per period; an `InvalidReply` to a
    payload that is not a FeedbackReportRequest."""
    try:
        req = FeedbackReportRequest.model_validate(kwargs)
    except ValidationError as exc:
        return InvalidReply.of(exc).model_dump(mode="json")
    report = feedback_report(runtime(), req.tool, req.limit, req.per)
    if report.total == 0 and not runtime().registry.versions(req.tool):
        # QA 55b L7: an empty report, where `fittest feedback show` says there is no such tool: a
        # service could not tell a tool nobody judged from a name no tool has (a removed tool's
        # entries are still shown).
        error = FieldError(field="tool", message=runtime().registry.no_tool_named(req.tool), type="no_such_tool")
        return InvalidReply(errors=[error], message=error.message).model_dump(mode="json")
    return report.model_dump(mode="json")


@app.task(bind=True, name="fittest.forget", track_started=True)  # CallSender.ask_within waits for a started one
def forget(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Remove every record of the calls that holds what their callers sent (workers/forget.py), and
    send the same once more FORGET_AGAIN_S later for records that were on their way; an
    `InvalidReply` to a payload that is not a ForgetRequest."""
    from workers.forget import FORGET_AGAIN_S, forget_calls

    try:
        req = ForgetRequest.model_validate(kwargs)
    except ValidationError as exc:
        return InvalidReply.of(exc).model_dump(mode="json")
    report = forget_calls(runtime(), req.call_ids, _forget_result)
    if req.again and report.call_ids:
        self.apply_async(kwargs={"call_ids": report.call_ids, "again": False}, countdown=FORGET_AGAIN_S)
        report.again_in_s = FORGET_AGAIN_S
    return report.model_dump(mode="json")


def _forget_result(call_id: str) -> bool:
    """Delete the call's result from the backend; whether it held one."""
    held = app.backend.get_task_meta(call_id, cache=False).get("status") != "PENDING"
    app.backend.forget(call_id)
    return held


@app.task(name="fittest.record_evolution", ignore_result=True)  # fire and forget: nobody waits on it
def record_evolution(record_data: dict[str, Any]) -> None:
    """Serve an evolved version from now on and store the evolution patterns (failed ones included)."""
    apply_evolution_record(runtime(), EvolutionRecord.model_validate(record_data))

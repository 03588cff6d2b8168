"""Evolution's tasks: prepare the job where the memory is, evolve where the sandbox is, and hand the
call back to selection when a verified version is on trial.

    execute (every candidate failed)
      → replace with prepare_evolution(plan)    selection queue: the memory worker gathers evidence
      → replace with evolve(job)                evolution queue: mutate, verify, promote on trial
      → replace with resilient_tool_call(request, after_evolution=True)   the new version first
        or end the call as failed, with the evolution's report

`fittest evolve NAME` sends prepare_evolution with a namespace; quality-triggered evolutions
are sent straight to evolve by the feedback worker (workers/evolution_jobs.py).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from pydantic import ValidationError

from evolution.models import EvolutionJob, EvolutionRecord, EvolutionReport
from selection.call_endings import input_refused_message, kept_to_the_change, named_held_back, refused_for_its_namespace
from selection.manifest import tool_key
from selection.models import CallEvolution, CallPlan, CallResult, field_errors, joined_errors
from workers.app import app
from workers.evolution_jobs import EvolutionUnavailable, build_job
from workers.evolver import Evolver
from workers.payloads import EvolveRequest
from workers.rescue import CallStep, hand_on
from workers.runtime import runtime
from workers.settings import get_settings
from workers.tasks.expiry import drop_if_expired
from workers.tasks.execution import finish, send_outcome

log = logging.getLogger("fittest.evolution")

EVOLVE_TIME_LIMIT_S = int(get_settings().evolution_time_limit_s)

_evolver: Evolver | None = None


def _publish(record: EvolutionRecord) -> None:
    from workers.tasks.feedback import record_evolution

    record_evolution.apply_async(args=[record.model_dump(mode="json")])


def evolver() -> Evolver:
    """This process's evolver (mutators are loaded once)."""
    global _evolver
    if _evolver is None:
        rt = runtime()
        _evolver = Evolver(rt.settings, rt.state, rt.evolution, _publish, registry=lambda: rt.registry)
    return _evolver


def call_evolution(plan: CallPlan, report: EvolutionReport) -> CallEvolution:
    """The report as the call's result carries it: the call's first round travels with it, and a
    retry's result times the whole call from its start."""
    return CallEvolution.model_validate({**report.model_dump(mode="json"), "call_started_at": plan.started_at,
                                         "failed_attempts": CallResult.from_plan(plan, "failed").attempts})


def end_without_evolution(plan: CallPlan) -> dict[str, Any] | None:
    """The call's end when its evolution's is known before one is queued (Evolver.without_evolution),
    else None: also when that cannot be read (Redis away), the evolution's own steps then answering."""
    try:
        report = evolver().without_evolution(plan)
    except Exception:
        log.exception("call %s: whether a mutator answers its failures could not be told", plan.request.call_id)
        return None
    if report is None:
        return None
    # Counted as the evolver counts its runs (QA ops L7: the crashes no mutator answers, which need
    # a person most, were missing from fittest_evolution_runs_total).
    runtime().metrics.evolution_run(report.namespace, report.trigger, report.status)
    return _end_call(plan, call_evolution(plan, report))


def _end_call(plan: CallPlan, report: CallEvolution) -> dict[str, Any]:
    plan.evolved = True
    plan.evolution_report = report
    tried = ("the one attempt" if len(plan.attempts) == 1 else f"all {len(plan.attempts)} attempts") + named_held_back(plan)
    # Why no other tool was tried: a namespace's refusal, or one of the input as suspect (QA: with
    # evolution on, "…which matches such jobs best, refused the input…; not tried with it…" was lost).
    refused = refused_for_its_namespace(plan) or input_refused_message(plan)
    return finish(plan, "failed", message=f"{refused or f'{tried} failed{kept_to_the_change(plan)}'}; evolution: {report.message}")


@app.task(bind=True, base=CallStep, name="fittest.prepare_evolution")
def prepare_evolution(self: Task, plan_data: dict[str, Any] | None = None, **asked: Any) -> Any:
    """Gather what memory knows about the failure and hand the job to the evolution queue: a failed
    call's (`plan_data`), or one asked for by hand (`asked`: an `EvolveRequest`, whose refusal is
    answered as a report that names the fields, QA recheck L-C: an unknown key raised TypeError)."""
    plan = CallPlan.model_validate(plan_data) if plan_data is not None else None
    namespace = str(asked.get("namespace") or "")  # as given, for the report of a refusal
    version = asked.get("version") if isinstance(asked.get("version"), str) else None
    if plan is None:  # before the catch-all below, which took its Ignore for a failure (review 51 M1)
        drop_if_expired(self)
    try:
        if plan is not None:
            job = build_job(runtime(), "call", plan=plan)
        else:
            if self.request.id:  # begun: `fittest evolve` (CallSender.ask_within) tells it from a request
                # that no worker took within its --timeout, which expires, never done (no start is tracked)
                self.update_state(state="STARTED")
            request = EvolveRequest.model_validate(asked)
            job = build_job(runtime(), "manual", namespace=request.namespace, version=request.version, reason=request.reason)
    except Exception as exc:  # a call must end with a result even when memory fails here
        if isinstance(exc, ValidationError):
            message = f"evolution could not be prepared: {joined_errors(field_errors(exc))}"
        else:
            if not isinstance(exc, EvolutionUnavailable):
                log.exception("preparing an evolution failed")
            message = f"evolution could not be prepared: {exc}"
        if plan is not None:
            return _end_call(plan, CallEvolution(status="no_fix", message=message))
        return EvolutionReport(job_id="", namespace=namespace or "", trigger="manual", status="no_fix",
                               parent=tool_key(namespace or "", version) if version else namespace or "",
                               message=message).model_dump(mode="json")
    return hand_on(self, evolve.si(job.model_dump(mode="json")))


@app.task(bind=True, base=CallStep, name="fittest.evolve", time_limit=EVOLVE_TIME_LIMIT_S)
def evolve(self: Task, job_data: dict[str, Any]) -> Any:
    """Make, verify and promote a new version; a call whose job this is is retried or ended."""
    job = EvolutionJob.model_validate(job_data)
    try:
        report = evolver().run(job)
    except Exception as exc:  # the call still gets a result; the worker keeps serving
        log.exception("evolution of %s failed", job.parent_key)
        report = EvolutionReport(job_id=job.job_id, namespace=job.namespace, trigger=job.trigger, status="no_fix",
                                 parent=job.parent_key, message=f"evolution failed: {type(exc).__name__}: {exc}")
    runtime().metrics.evolution_run(job.namespace, job.trigger, report.status)
    plan = job.plan
    if plan is None:
        return report.model_dump(mode="json")
    evolution = call_evolution(plan, report)
    pinned = plan.request.version
    if report.status == "evolved" and pinned is not None:
        # A pinned call runs its version alone: retried, it would run that version again and fail
        # again on the same input, its failure counted twice (QA onboarding M1).
        evolution.message += (f"; this call is pinned to {tool_key(job.namespace, pinned)}, so it was not retried "
                              f"with {report.version}")
    if report.status not in ("evolved", "reused") or pinned is not None:
        return _end_call(plan, evolution)
    send_outcome(plan)  # the first round's attempts are learned from like any others
    from workers.tasks.selection import resilient_tool_call

    request = plan.request.model_copy(update={"after_evolution": True})
    return hand_on(self, resilient_tool_call.si(**request.model_dump(mode="json"),
                                                evolution_report=evolution.model_dump(mode="json")))

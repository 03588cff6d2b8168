"""What the task modules share: payload validation, call-id bookkeeping, and counting a call that
ends before any attempt (the sentences such a call ends with: selection/call_endings.py)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from celery import Task
from celery.exceptions import Ignore
from celery.utils.time import maybe_iso8601, maybe_make_aware
from celery_batches import SimpleRequest
from pydantic import BaseModel, ValidationError

from selection.call_endings import no_candidates_result
from selection.models import (CALL_ID_PATTERN, MAX_SCENARIO_CHARS, CallPlan, CallRequest, CallResult, FieldError, field_errors,
                              invalid_payload_message, size_errors)
from workers.runtime import runtime

CALL_ID = re.compile(CALL_ID_PATTERN)

log = logging.getLogger("fittest.tasks")

M = TypeVar("M", bound=BaseModel)


def batch_payloads(requests: Sequence[SimpleRequest], model: type[M], task: str) -> list[M]:
    """The payloads of a celery-batches batch as `model`s, in order; a message holding a list gives
    each of its items. An invalid payload is logged and dropped: one bad message must not lose the
    batch."""
    out = []
    for request in requests:
        data = request.args[0] if request.args else request.kwargs
        for item in data if isinstance(data, list) else [data]:
            try:
                out.append(model.model_validate(item))
            except ValidationError as exc:
                log.error("%s dropped an invalid payload: %s", task, exc.errors(include_url=False)[:3],
                          extra={"event": "batch_payload_invalid", "task": task, "task_id": request.id})
    return out


def invalid_result(exc: ValidationError | list[FieldError], call_id: str = "", scenario: str = "") -> dict[str, Any]:
    """A bad payload ends the call with a result naming every bad field; the worker stays up."""
    errors = exc if isinstance(exc, list) else field_errors(exc)
    return CallResult(call_id=call_id or "invalid", status="invalid", scenario=scenario, errors=errors,
                      message=invalid_payload_message(errors)).model_dump(mode="json")


def given_scenario(payload: dict[str, Any]) -> str:
    """The scenario a refused payload gave, when a call could have run it, so that the refusal says
    which call it was (QA 49: a refused call's result said `"scenario": ""` of a scenario given)."""
    scenario = payload.get("scenario")
    return scenario if isinstance(scenario, str) and scenario.strip() and len(scenario) <= MAX_SCENARIO_CHARS else ""


def refusal(request: CallRequest, limit_bytes: int, refused: Sequence[FieldError] = ()) -> dict[str, Any] | None:
    """The invalid result of a call whose arguments were `refused` (as Python refuses them), or whose
    input or context is too large; None when neither."""
    errors = [*refused, *size_errors(request, limit_bytes)]
    return invalid_result(errors, request.call_id, request.scenario) if errors else None


def result_call_id(payload: dict[str, Any], task_id: str | None) -> str:
    """The id an invalid call's result carries: the caller's call_id when it is one, else the task id."""
    given = payload.get("call_id")
    if isinstance(given, str) and CALL_ID.fullmatch(given):
        return given
    return task_id or ""


def claim_call_id(task: Task, name: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """Claim the call id of this first step of a call `name` (workers/state/call_ids.py), in one
    round trip, and tell what the claim found:

    - another job under the id, sent within the results' 24 h: its invalid result. Run under that
      id, its attempts' effects would be dropped as applied already (QA onboarding H1: a result's
      call id, given to a second job, ran that job with the first one's effects). A call sent
      without a `call_id` is known by its task id, which it claims too.
    - the same call sent again under its id, while it runs or after it ended: Ignore is raised, and
      the call's result, stored under the id, answers the copy. Before, each copy ran the call
      again, its tools with it (QA 52a M2: four threads sending one call to a tool with side
      effects wrote four lines, each caller handed the first result; the counters showed one run).
      Only of a step whose task id is its call id, as fittest's client sends it (a copy under
      another task id would wait for a result nothing stores), and delivered for the first time:
      a redelivery and the sweep's copy (`delivered_again`) run, as fittest's own retry after an
      evolution (a later hop, not claimed) does.
    - None: run it."""
    from workers.client import has_result
    from workers.rescue import delivered_again
    from workers.state.call_ids import CallIds, another_job_message, job_digest

    call_id = result_call_id(payload, task.request.id)
    if not CALL_ID.fullmatch(call_id):
        return None
    rt = runtime()
    start = task.request.id == call_id and delivered_again(task) is None and not task.request.replaced_task_nesting
    claim, first = CallIds(rt.redis, rt.settings.key_prefix).claim(call_id, job_digest(name, payload), start=start)
    if claim == "another":
        log.warning("call %s: another job under this call_id, sent within 24 h: not run", call_id,
                    extra={"event": "call_id_taken", "call_id": call_id, "task": name})
        return ended_early(invalid_result([FieldError(field="call_id", type="another_job", message=another_job_message(call_id))],
                                          call_id, given_scenario(payload)))
    if start and not first:
        ended = has_result(task.app, call_id)
        if ended:  # what the copy's sender recorded in flight goes with it
            rt.inflight.finished(call_id)
        log.info("call %s: sent again %s; not run again, its result answers the copy", call_id,
                 "after it ended" if ended else "while it runs",
                 extra={"event": "call_sent_again", "call_id": call_id, "task": task.name, "ended": ended})
        raise Ignore()
    return None


def drop_if_expired(task: Task) -> None:
    """End a run of a request sent to be done within its sender's wait (`CallSender.ask_within`)
    that began past its message's expiry, as celery ends one it takes too late: marked revoked
    ("expired"), and nothing done. Celery checks the expiry as a worker takes the message and as it
    hands it to its pool; a thread pool whose threads were all busy ran it later still, after its
    sender had said that nothing was done (review 50: a second `fittest evolve`, sent as told,
    evolved twice)."""
    expires = maybe_iso8601(task.request.expires)  # as celery's Request reads it
    if expires is not None and datetime.now(timezone.utc) > maybe_make_aware(expires):
        log.warning("%s %s began after its message expired: dropped, not done", task.name, task.request.id,
                    extra={"event": "expired_dropped", "task": task.name, "task_id": task.request.id})
        task.backend.mark_as_revoked(task.request.id, reason="expired", request=task.request)
        raise Ignore()


def ended_early(result: dict[str, Any], started_at: float | None = None) -> dict[str, Any]:
    """Count a call that ended before any attempt (its payload refused, or no tool to try) with the
    calls that ran, so that `fittest_calls_total` by status adds up to every call made."""
    elapsed_ms = (time.time() - started_at) * 1000 if started_at is not None else 0.0
    runtime().metrics.call(result["status"], 0, elapsed_ms, None)
    return result


def no_candidates(plan: CallPlan) -> dict[str, Any]:
    """The end of a call that has no candidate to try, saying why."""
    rt = runtime()
    result = no_candidates_result(plan, rt.registry, rt.settings.tools_dir)
    return ended_early(result.model_dump(mode="json"), started_at=plan.started_at)

"""A call's id claimed by its first step: one job per id, and a call sent again is not run again."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.exceptions import Ignore

from selection.models import FieldError
from workers.call_ends import ended_early
from workers.runtime import runtime
from workers.tasks.refusals import CALL_ID, given_scenario, invalid_result, result_call_id

log = logging.getLogger("fittest.tasks")


def claim_call_id(task: Task, name: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """Claim the call id of this first step of a call `name` (workers/state/call_ids.py), in one
    round trip, and tell what the claim found:

    - another job under the id, sent within the results' 24 h: its invalid result. Run under that
      id, its attempts' effects would be dropped as applied already (QA onboarding H1: a result's
      call id, given to a second job, ran that job with the first one's effects). A call sent
      without a `call_id` is known by its task id, which it claims too. One sent under the id as
      its task id is not run either, and Ignore is raised: its result's key is the other job's.
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
    from workers.state.call_ids import CallIds, another_job_message, earlier_job_digest, job_digest

    call_id = result_call_id(payload, task.request.id)
    if not CALL_ID.fullmatch(call_id):
        return None
    rt = runtime()
    start = task.request.id == call_id and delivered_again(task) is None and not task.request.replaced_task_nesting
    claim, first = CallIds(rt.redis, rt.settings.key_prefix).claim(call_id, job_digest(name, payload), start=start,
                                                                   also=(earlier_job_digest(name, payload),))
    if claim == "another":
        log.warning("call %s: another job under this call_id, sent within 24 h: not run", call_id,
                    extra={"event": "call_id_taken", "call_id": call_id, "task": name})
        refused = ended_early(invalid_result([FieldError(field="call_id", type="another_job", message=another_job_message(call_id))],
                                             call_id, given_scenario(payload)))
        if task.request.id == call_id:
            # Its result's key is the other job's: stored there, the refusal answered that job's
            # caller, whose call was running, and its own result was never stored over it (QA 57c
            # H6: send_task(task_id=) of a running call's id). The sender reads that job's result.
            # What its sender recorded in flight goes with it, or the rescue sweep sent it again
            # every 45 s for as long as the record lived (QA 60c F2).
            if (step := rt.inflight.current(call_id)) is not None and step.task == task.name and \
                    job_digest(name, step.kwargs) == job_digest(name, payload):
                rt.inflight.finished(call_id)
            raise Ignore()
        return refused
    if start and not first:
        ended = has_result(task.app, call_id)
        if ended:  # what the copy's sender recorded in flight goes with it
            rt.inflight.finished(call_id)
        log.info("call %s: sent again %s; not run again, its result answers the copy", call_id,
                 "after it ended" if ended else "while it runs",
                 extra={"event": "call_sent_again", "call_id": call_id, "task": task.name, "ended": ended})
        raise Ignore()
    return None

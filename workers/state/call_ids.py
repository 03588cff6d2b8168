"""Which job each call id a caller chose names, so that one id is not used for two jobs.

A call's result is stored under its id (its task id) for RESULT_TTL_S, and every effect of its
attempts is applied once per attempt id (`call_id:index`). So a second job sent under a used id
was handed the first job's result, and what its attempts taught was dropped as applied already
(QA AC B5). The client records a digest of each job it sends under an id of the caller's choosing,
for as long as the result is kept, and refuses another job under that id; the same job sent again
(a retry after a send that seemed to fail) goes through. The call's first step
claims its id too (workers/tasks/call_id_claims.py `claim_call_id`), for the services that send the task
without the client, and ends a second job as invalid rather than run it with its effects dropped.
The same job sent again while its call runs, or after it ended, is not run again: its result,
stored under the id, answers it (`claim`'s start; the client sends nothing when it is there).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import redis
from pydantic import BaseModel

from selection.models import CallRequest, canonical_digest
from workers.payloads import CallToolPayload
from workers.state.base import as_text

RESULT_TTL_S = 24 * 3600  # Celery's result_expires (workers/app.py): how long an id names its call
# What a claim of an id found: the id was free, it names this job already (sent again), or another.
Claim = Literal["new", "again", "another"]


@functools.cache
def _defaults(*models: type[BaseModel]) -> dict[str, Any]:
    """The default of each optional field of these models (the first model's, for a name in several);
    read once, as every call's digest asks it. Compared with, never changed."""
    found: dict[str, Any] = {}
    for model in reversed(models):
        found.update({name: f.get_default(call_default_factory=True) for name, f in model.model_fields.items()
                      if not f.is_required()})
    return found


def job_digest(task: str, kwargs: dict[str, Any]) -> str:
    """What a call asks for, whatever its id: the task and its arguments as sent, an option given
    its default value counted as left out (QA 52a L1: the same job with `max_attempts=5` written
    out, the default, was refused under its id as another job)."""
    defaults = _defaults(CallToolPayload, CallRequest) if task == "call_tool" else _defaults(CallRequest)
    job = {"task": task, **{k: v for k, v in kwargs.items()
                            if k != "call_id" and not (k in defaults and v == defaults[k])}}
    return canonical_digest(job)


def earlier_job_digest(task: str, kwargs: dict[str, Any]) -> str:
    """The digest the releases before QA 52a L1's computed (the arguments as sent, options given
    their defaults counted): their clients' claims, and the calls they sent at an upgrade, are read
    as the jobs they are, not as another job under the id, which no worker ran or answered (QA 60c
    F2). Workers are upgraded before clients: a claim of this release's digest is another job to an
    earlier worker."""
    return canonical_digest({"task": task, **{k: v for k, v in kwargs.items() if k != "call_id"}})


def another_job_message(call_id: str) -> str:
    """What a caller is told of a job sent under an id that names another job."""
    return (f"{call_id!r} names another job sent within the last {RESULT_TTL_S // 3600} h (its result is kept "
            "under it): give each job a new id; sending the same job again under it is fine")


class CallIds:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def named(self, call_id: str) -> bool:
        """Whether a job was sent under `call_id` within RESULT_TTL_S (its task id may be another)."""
        return bool(self.client.exists(f"{self.prefix}call_job:{call_id}"))

    def claim(self, call_id: str, digest: str, start: bool = False, also: tuple[str, ...] = ()) -> tuple[Claim, bool]:
        """Record that `call_id` names the job of `digest`, unless it names another job already
        (a claim of one of `also`, the job's digest as an earlier release computed it, is this job's);
        with `start`, also whether this is the first start of the call (its first step's, once
        per id for as long as its result is kept): a second one is the same call sent again, which
        its result answers (workers/tasks/call_id_claims.py `claim_call_id`). One round trip, and
        one transaction: another job's claim between this one's commands could take the first
        start, and then neither job ran (QA 59b S7)."""
        key = f"{self.prefix}call_job:{call_id}"
        pipe = self.client.pipeline(transaction=True)
        pipe.set(key, digest, nx=True, ex=RESULT_TTL_S)
        pipe.get(key)
        if start:
            pipe.set(f"{self.prefix}call_started:{call_id}", "1", nx=True, ex=RESULT_TTL_S)
        new, named, *started = pipe.execute()
        claim: Claim = "new" if new or named is None else "again" if as_text(named) in (digest, *also) else "another"
        return claim, bool(started and started[0])

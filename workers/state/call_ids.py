"""Which job each call id a caller chose names, so that one id is not used for two jobs.

A call's result is stored under its id (its task id) for RESULT_TTL_S, and every effect of its
attempts is applied once per attempt id (`call_id:index`). So a second job sent under a used id
was handed the first job's result, and what its attempts taught was dropped as applied already
(QA AC B5). The client records a digest of each job it sends under an id of the caller's choosing,
for as long as the result is kept, and refuses another job under that id; the same job sent again
(a retry after a send that seemed to fail) goes through, as it always did. The call's first step
claims its id too (workers/tasks/common.py `another_job_under`), for the services that send the task
without the client, and ends a second job as invalid rather than run it with its effects dropped.
"""

from __future__ import annotations

from typing import Any

import redis

from selection.models import canonical_digest
from workers.state.base import as_text

RESULT_TTL_S = 24 * 3600  # Celery's result_expires (workers/app.py): how long an id names its call


def job_digest(task: str, kwargs: dict[str, Any]) -> str:
    """What a call asks for, whatever its id: the task and its arguments, as sent."""
    job = {"task": task, **{k: v for k, v in kwargs.items() if k != "call_id"}}
    return canonical_digest(job)


def another_job_message(call_id: str) -> str:
    """What a caller is told of a job sent under an id that names another job."""
    return (f"{call_id!r} names another job sent within the last {RESULT_TTL_S // 3600} h (its result is kept "
            "under it): give each job a new id; sending the same job again under it is fine")


class CallIds:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def claim(self, call_id: str, digest: str) -> bool:
        """Record that `call_id` names the job of `digest`; False when it names another job already."""
        key = f"{self.prefix}call_job:{call_id}"
        if self.client.set(key, digest, nx=True, ex=RESULT_TTL_S):
            return True
        named = self.client.get(key)
        return named is None or as_text(named) == digest

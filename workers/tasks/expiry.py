"""A request sent to be done within its sender's wait is dropped when it begins too late."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from celery import Task
from celery.exceptions import Ignore
from celery.utils.time import maybe_iso8601, maybe_make_aware

log = logging.getLogger("fittest.tasks")


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

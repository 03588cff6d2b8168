"""Celery's default queue, where a `send_task` that names no queue puts its message, and which no
fittest worker reads: fittest's tasks go to the queues of their roles (`selection`, `feedback`,
…; workers/app.py TASK_ROUTES), and a foreign service's Celery app knows nothing of those routes.
Such a call waited for ever, and `fittest result` said no call of its id was queued (QA 55b M3).

Not consumed here on purpose: another Celery app may share the Redis database, and its tasks in
that queue are its own.
"""

from __future__ import annotations

import json

from redis import Redis
from redis.exceptions import RedisError

DEFAULT_QUEUE = "celery"
# How many of the queue's messages are read for fittest's: a queue another app fills is not read whole.
READ_LIMIT = 100


def fittest_tasks(client: Redis, limit: int = READ_LIMIT) -> list[str]:
    """The task names of the fittest messages among the first `limit` waiting in the default queue
    (kombu's Redis transport keeps a queue's messages of priority 0 in a list of its name)."""
    found = []
    for raw in client.lrange(DEFAULT_QUEUE, 0, limit - 1):
        try:
            task = str((json.loads(raw).get("headers") or {}).get("task") or "")
        except (ValueError, AttributeError):  # a message not of Celery's protocol: another app's
            continue
        if task.startswith("fittest."):
            found.append(task)
    return found


def misrouted_note(client: Redis) -> str:
    """What `fittest health` says of fittest tasks waiting in the default queue, or "" of none."""
    try:
        found = fittest_tasks(client)
    except RedisError:
        return ""
    if not found:
        return ""
    from workers.app import TASK_ROUTES

    tasks = ", ".join(sorted(set(found)))
    # each task's own queue (QA 57d L1: `queue='selection'` was advised of fittest.record_feedback too)
    queues = ", ".join(f"{task} with queue={TASK_ROUTES.get(task, {}).get('queue', 'selection')!r}" for task in sorted(set(found)))
    return (f"{len(found)} {tasks} message(s) wait in Celery's default queue '{DEFAULT_QUEUE}', which no fittest "
            f"worker reads: send_task without queue= sent them (send {queues})")

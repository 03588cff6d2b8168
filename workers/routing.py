"""Each task runs on the worker of its own queue (workers/app.py TASK_ROUTES), whichever queue its
message was sent to.

A service may name a queue by mistake: `send_task("fittest.resilient_tool_call", queue="execution")`
ran the call's selection in an executor, which has no vector store of its own. It served the call
degraded, loaded the embedding model into each pool process, and its try to open the embedded
store, which the memory worker owns, left that store's index files damaged (QA 59a H1: every tool
indexed after it failed its first write). A message that comes to a queue other than its task's
is now handed on, as it is, to its task's queue, and taken off the one it came to; and a worker
that does not serve MEMORY_QUEUE (the memory worker's `selection`) never opens the embedded store
(`may_open_store`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, Task
from celery.signals import worker_init

from workers.app import MEMORY_QUEUE, TASK_ROUTES
from workers.publishing import PUBLISH_RETRY_POLICY

log = logging.getLogger("fittest.routing")

# The header of a message handed on that had come back from the broker (kombu's `redelivered`),
# which the copy in its own queue would not say otherwise (rescue.py `delivered_again`)
REDELIVERED_HEADER = "fittest_redelivered"
_served: frozenset[str] | None = None  # the queues this worker process consumes; None: no worker


@worker_init.connect
def _note_served_queues(sender: Any = None, **_: Any) -> None:
    """Noted before the pool forks its processes, which inherit it."""
    global _served
    _served = frozenset(sender.app.amqp.queues.consume_from)


def may_open_store() -> bool:
    """Whether this process may open the embedded vector store: any process but a worker that does
    not serve MEMORY_QUEUE (an executor, an evolver), as one process owns the store."""
    return _served is None or MEMORY_QUEUE in _served


def served_queues() -> frozenset[str] | None:
    """The queues this worker process consumes, for a refusal to name them; None outside a worker."""
    return _served


class RoutedTask(Task):
    """A task whose messages sent to another queue than its own are handed on to its own."""

    def start_strategy(self, app: Celery, consumer: Any, **kwargs: Any) -> Callable[..., Any]:
        return handing_on(self, app, super().start_strategy(app, consumer, **kwargs))


def handing_on(task: Task, app: Celery, handle: Callable[..., Any]) -> Callable[..., Any]:
    """Celery's handler of `task`'s messages (its strategy's), which first hands on a message that
    came to another queue than the task's own: published again as it is (its id, headers, body and
    priority), then acknowledged where it came."""
    own = TASK_ROUTES.get(task.name, {}).get("queue")
    if own is None:
        return handle

    def handler(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kwargs: Any) -> Any:
        came = (message.delivery_info or {}).get("routing_key")
        if not came or came == own:
            return handle(message, body, ack, reject, callbacks, **kwargs)
        try:
            hand_on(app, message, own)
        except Exception as exc:  # never the consumer's end: run here, as before (this worker opens no store)
            log.warning("%s %s came to the %s queue and could not be handed on to %s: %s: %s", task.name,
                        message.headers.get("id"), came, own, type(exc).__name__, exc,
                        extra={"event": "misrouted_kept", "task": task.name, "queue": came, "to": own})
            return handle(message, body, ack, reject, callbacks, **kwargs)
        message.ack()
        log.warning("%s %s came to the %s queue: handed on to %s, its task's queue", task.name,
                    message.headers.get("id"), came, own,
                    extra={"event": "misrouted_handed_on", "task": task.name, "task_id": message.headers.get("id"),
                           "queue": came, "to": own})
        return None

    return handler


def hand_on(app: Celery, message: Any, queue: str) -> None:
    """Publish `message` again, unchanged, to `queue` (through the default exchange, which every
    worker knows: a worker knows only the bindings of the queues it consumes). Its body as kombu
    read it, decompressed, is compressed again as it came (QA 59f F1: sent with its `compression`
    header and a plain body, it could not be decoded, and was dropped); one the broker had given
    back says so in REDELIVERED_HEADER (QA 59f F6)."""
    properties = message.properties or {}
    headers = dict(message.headers or {})
    compression = headers.pop("compression", None)
    if (message.delivery_info or {}).get("redelivered"):
        headers[REDELIVERED_HEADER] = True
    with app.producer_or_acquire() as producer:
        producer.publish(
            message.body, exchange="", routing_key=queue, headers=headers, compression=compression,
            content_type=message.content_type, content_encoding=message.content_encoding,
            priority=properties.get("priority", (message.delivery_info or {}).get("priority")),
            correlation_id=properties.get("correlation_id"), reply_to=properties.get("reply_to"),
            retry=True, retry_policy=PUBLISH_RETRY_POLICY,
        )

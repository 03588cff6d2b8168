"""The base of fittest's batched tasks (`fittest.record_outcome`, `fittest.learn`): celery-batches,
with a flush timer that survives a lost broker connection.

celery-batches arms its repeating flush timer when the first message of an empty buffer arrives,
and only while it holds no timer. When the connection to the broker drops, Celery (5.6) clears
every timer of the worker's event loop, so the batches' timer is gone but still marked as held:
the messages buffered at that moment, and those that follow, were applied only once
`flush_every` of them had arrived, and never on a quiet worker (seen in the Redis-restart test:
outcomes of calls that had returned were never counted). The consumer builds each task's strategy
again when it starts after a reconnect; that is where the timer is re-armed here.

Upstream: clokep/celery-batches#107 (the same analysis), fixed the same way by #108, merged after
0.11, the newest release on PyPI; drop this class when a release carries the fix.
"""

from __future__ import annotations

from typing import Any

import celery_batches
from celery import Celery
from celery.worker.consumer import Consumer


class Batches(celery_batches.Batches):
    abstract = True

    def Strategy(self, task: celery_batches.Batches, app: Celery, consumer: Consumer) -> Any:  # noqa: N802 - Celery's name
        handler = super().Strategy(task, app, consumer)
        if self._tref is not None:
            self._tref.cancel()  # a no-op for a timer the event loop cleared
            self._tref = None
        if not (self._buffer.empty() and self._pending.empty()):
            self._tref = consumer.timer.call_repeatedly(self.flush_interval, self._do_flush)
        return handler

"""The base of fittest's batched tasks (`fittest.record_outcome`, `fittest.learn`): celery-batches,
with a flush timer that survives a lost broker connection, and batches that wait out a Redis
restart instead of being lost in it.

celery-batches acknowledges a batch's messages when the batch returns, whether it succeeded or
raised, so a batch that raised lost every outcome it held. Redis restarting is what makes one
raise: a CI run of the Redis-restart test found the learner short of execution records. The
store's client rides out a restart by itself (workers/state: ~30 s of reconnects; pipelined
scripts sent again after NOSCRIPT, workers/state/pipelined.py) and so do messages the batch sends
(workers/publishing.py: PUBLISH_RETRY_POLICY); a batch that still meets an unavailable Redis is run again,
for up to UNAVAILABLE_RETRY_S in all. Every effect of both tasks is keyed by attempt id, so running
a batch again applies nothing twice.

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

import logging
from typing import Any

import celery_batches
import redis
from celery import Celery
from celery.worker.consumer import Consumer
from kombu.exceptions import OperationalError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

from workers.redis_connection import WRITE_REFUSALS
from workers.routing import handing_on

log = logging.getLogger("fittest.tasks")

# Longer than a Redis restart with its append-only file loading (a few seconds here); a batch that
# still fails after it raises, and celery-batches acknowledges its messages as it does any failure.
UNAVAILABLE_RETRY_S = 120.0
# Redis refusing or dropping a connection (BusyLoadingError, while it loads its data, is one), or
# refusing writes (past its maxmemory; a read-only replica), and kombu's error for a publish that
# failed after the transport's own retries. A batch that raised one of these was acknowledged with
# its outcomes unapplied (QA 59d H2's test: calls answered, their successes never counted).
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, *WRITE_REFUSALS, OperationalError)


class Batches(celery_batches.Batches):
    abstract = True
    _tref: Any  # celery-batches' flush timer (untyped there)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        retrying = Retrying(retry=retry_if_exception_type(UNAVAILABLE), stop=stop_after_delay(UNAVAILABLE_RETRY_S),
                            wait=wait_random_exponential(multiplier=0.05, max=1.0), before_sleep=self._log_retry, reraise=True)
        return retrying(super().__call__, *args, **kwargs)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        error = f"{type(exc).__name__}: {exc}"
        log.warning("%s: Redis unavailable (%s); the batch runs again", self.name, error,
                    extra={"event": "batch_retry", "task": self.name, "error": error, "attempt": state.attempt_number + 1})

    def Strategy(self, task: celery_batches.Batches, app: Celery, consumer: Consumer) -> Any:  # noqa: N802 - Celery's name
        handler = super().Strategy(task, app, consumer)
        if self._tref is not None:
            self._tref.cancel()  # a no-op for a timer the event loop cleared
            self._tref = None
        if not (self._buffer.empty() and self._pending.empty()):
            self._tref = consumer.timer.call_repeatedly(self.flush_interval, self._do_flush)
        # a batch's message sent to another queue is handed on, not buffered and flushed by the worker of that queue
        return handing_on(task, app, handler)

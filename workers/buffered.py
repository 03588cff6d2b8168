"""Redis writes that a call's hot path hands to a background thread, sent in one pipeline.

A round trip per call for bookkeeping nobody reads at once (metrics, the calls in flight) showed in
the throughput bench: 2 per call cost the pipeline ~6 % of its calls per second, more than their
~0.15 ms each, as the memory worker's threads then wait on the GIL to come back from every one. So
such writes are buffered in the process and sent at most every `flush_interval_s`, in one batch. A
batch that failed is kept as it was, with its token, and sent again before anything newer (a
writer whose writes are not idempotent sends its batches through workers/state/once.py, so a batch
that did run, its reply lost, runs nothing the second time); a write that must not wait for the
interval (a worker's claim of a message it received) wakes the sending thread at once, still off
the caller's. What a process buffered in its last interval is sent as it ends: at exit, and in a
Celery pool process, which ends with os._exit past atexit, on `worker_process_shutdown` (QA: a
stop under load left 2 of 150 calls out of `fittest report`), its buffers side by side within
END_FLUSH_S. What a process buffered in its last interval before it is killed is lost.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from celery.signals import worker_process_shutdown
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError

from workers.state.once import new_token

log = logging.getLogger("fittest.buffered")

B = TypeVar("B")
FAILING_LOG_S = 30.0  # how often a flusher that keeps failing says so
_started: weakref.WeakSet[BufferedWrites] = weakref.WeakSet()  # the buffers of this process that hold writes


class BufferedWrites(Generic[B]):
    """A buffer of type B per process; subclasses say how to start one and how to write one."""

    name = "buffered"

    def __init__(self, client: Redis, flush_interval_s: float) -> None:
        self.client = client
        self.flush_interval_s = flush_interval_s
        self._lock = threading.Lock()
        self._reset()

    def _new_buffer(self) -> B:
        raise NotImplementedError

    def _write(self, pipe: Pipeline, buffer: B) -> None:
        raise NotImplementedError

    def _send(self, buffer: B, token: str) -> None:
        """One batch in MULTI; `token` names the batch, the same every time it is sent (a writer
        whose writes would count twice sends through workers/state/once.py with it)."""
        pipe = self.client.pipeline(transaction=True)
        self._write(pipe, buffer)
        pipe.execute()

    def _reset(self) -> None:
        """A fresh buffer and no flusher: at construction, and in a forked child (whose copy of the
        parent's buffer is the parent's to send)."""
        self._pid = os.getpid()
        self._data: B = self._new_buffer()
        self._unsent: tuple[B, str] | None = None  # a batch whose send failed, with its token
        self._flusher: threading.Thread | None = None
        self._wake = threading.Event()

    @contextmanager
    def _buffer(self, urgent: bool = False) -> Iterator[B]:
        """The buffer, to change under the lock; starts the flusher on first use. `urgent`: the
        flusher sends it at once, off the caller's thread, instead of within `flush_interval_s`."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            yield self._data
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._run, name=f"fittest-{self.name}", daemon=True)
                self._flusher.start()
                _started.add(self)
        if urgent:
            self._wake.set()

    def _run(self) -> None:
        failing_since: float | None = None  # said once, then every FAILING_LOG_S (QA Q: ~100 lines on a caller's stderr)
        said_at = 0.0
        while True:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            try:
                self.flush()
            except RedisError as exc:  # kept in the buffer; sent when Redis answers again
                now = time.monotonic()
                if failing_since is None or now - said_at >= FAILING_LOG_S:
                    failing_since = failing_since or now
                    said_at = now
                    log.warning("%s not flushed for %.0f s (kept, sent when Redis takes it): %s", self.name,
                                now - failing_since, exc)
                continue
            except Exception:  # a write that can never be sent: dropped, and the flusher goes on (QA P:
                # it ended the thread for good, and every later write waited for the process's exit)
                log.exception("%s: a buffered write failed and was dropped", self.name)
            if failing_since is not None:
                log.warning("%s flushed again after %.0f s", self.name, time.monotonic() - failing_since)
                failing_since = None

    def flush(self) -> None:
        """Send the batch whose send failed, if any, as it was, then what is buffered now. A batch
        Redis did not take is kept for the next flush; newer writes wait behind it in the buffer."""
        for _ in range(2):
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._send(*batch)
            except Exception as exc:
                if not isinstance(exc, RedisError):  # a batch that can never be sent: dropped, not tried at every flush
                    self._sent(batch)
                raise
            self._sent(batch)

    def _next_batch(self) -> tuple[B, str] | None:
        with self._lock:
            if self._pid != os.getpid():
                return None
            if self._unsent is None:
                if not self._data:  # an empty buffer is falsy
                    return None
                self._unsent = (self._data, new_token())
                self._data = self._new_buffer()
            return self._unsent

    def _sent(self, batch: tuple[B, str]) -> None:
        with self._lock:
            if self._unsent is batch:
                self._unsent = None


END_FLUSH_S = 30.0  # how long a process's end waits for its buffers: a client's ride-out of a Redis restart


def flush_side_by_side(buffers: list[BufferedWrites], within_s: float, when: str) -> None:
    """Send what each of `buffers` holds, each on a thread of its own, waiting at most `within_s`
    for them all; a buffer Redis did not take keeps its writes, for its flusher to send when Redis
    answers, and is named in one line (`when`: "as the process ends"), not a traceback (QA AE: a
    client that handled FittestUnavailable and exited printed 30 lines)."""
    def flush(buffered: BufferedWrites) -> None:
        try:
            buffered.flush()
        except RedisError as exc:
            log.warning("%s not flushed %s: %s", buffered.name, when, exc)

    senders = [threading.Thread(target=flush, args=(b,), name=f"fittest-end-{b.name}", daemon=True) for b in buffers]
    try:
        for sender in senders:
            sender.start()
    except RuntimeError:  # no new thread at the interpreter's shutdown (Python 3.12+): one by one, then
        for buffered in buffers:
            flush(buffered)
        return
    deadline = time.monotonic() + within_s
    for sender in senders:
        sender.join(max(0.0, deadline - time.monotonic()))
    for sender in senders:
        if sender.is_alive():
            log.warning("%s not flushed %s: Redis did not answer in %.0f s", sender.name.removeprefix("fittest-end-"),
                        when, within_s)


@worker_process_shutdown.connect
def flush_all(**_: Any) -> None:
    """Send what every buffer of this process holds, as the process ends: at exit, and in a pool
    process, which ends with os._exit that atexit never sees. The buffers are sent side by side, so
    a Redis that is down holds the end for one client's ride-out of a restart, not one per buffer
    (3 buffers took 90 s one by one, in a pool process and at a client's exit)."""
    flush_side_by_side(list(_started), END_FLUSH_S, "as the process ends")


atexit.register(flush_all)

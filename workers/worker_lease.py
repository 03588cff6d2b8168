"""A worker's lease on the broker messages it holds: a dead worker's calls go on after
FITTEST_WORKER_LEASE_S instead of after the visibility timeout.

Why: the Redis transport gives back what a dead worker held only after the visibility timeout,
which must outlast the longest step (an evolution: ~16 min by default), so every call a worker
killed with SIGKILL (the OOM killer, a lost machine) held, running or prefetched, waited that long
(QA: a call in an evolver killed mid-evolution). Each worker process beats every BEAT_INTERVAL_S
with the delivery tags its channel holds, and claims each message as it receives it; the rescue
sweep of a live worker takes the tags of a worker silent for a lease and gives those still
unacknowledged, and claimed by no live worker, back to their queues with kombu's own
`restore_by_tag`, the way the visibility timeout would (workers/state/holders.py).

The beat runs in a thread of the worker's main process, not on the consumer's timer: a warm
shutdown stops the consumer first and then waits for the running tasks (an evolution: minutes),
and a worker that stopped beating then would have them given away while they run. At a clean exit
the worker forgets its lease once the beat has stopped (kombu gave back its remaining messages as
its channel closed). A sweeper judges others only once its own beats have reached Redis for a
whole lease: after Redis was away for everyone, every last beat is old, and nobody is dead for that.
A live worker cut off from Redis for a lease while the others reach it is taken for dead: its steps
run again elsewhere, at least once as a redelivery does, each attempt's effects applied once.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import uuid
from typing import Any

from celery import Celery
from celery.signals import task_received
from redis.exceptions import RedisError

from workers.metrics import UNACKED_INDEX_KEY, UNACKED_KEY
from workers.state.base import as_text
from workers.state.holders import MessageHolders

log = logging.getLogger("fittest.rescue")

BEAT_INTERVAL_S = 5.0
END_WAIT_S = 1.0


class WorkerLease:
    """The beat of one worker process, and whether its own beats let it judge others'."""

    def __init__(self, hostname: str, holders: MessageHolders, lease_s: float) -> None:
        # The pid and a token per start: a worker started again under the same name (and maybe the
        # same pid) must not beat for the dead one before its messages are given back.
        self.holder = f"{hostname}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.holders = holders
        self.lease_s = lease_s
        self.consumer: Any = None  # Celery's consumer, whose task channel holds the messages
        self._beating_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fittest-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()
        atexit.register(self.end)

    def held(self) -> list[str] | None:
        """The delivery tags the consumer's channel holds unacknowledged (None: no channel now,
        e.g. while it reconnects). kombu's virtual QoS keeps them in `_delivered`, acknowledged
        ones until its next flush in `_dirty`."""
        task_consumer = getattr(self.consumer, "task_consumer", None)
        qos = getattr(getattr(task_consumer, "channel", None), "qos", None)
        delivered, dirty = getattr(qos, "_delivered", None), getattr(qos, "_dirty", None)
        if delivered is None or dirty is None:
            return None
        for _ in range(3):  # another thread may acknowledge meanwhile
            try:
                return [str(tag) for tag in list(delivered) if tag not in dirty]
            except RuntimeError:
                continue
        return None

    def beat(self) -> None:
        try:
            self.holders.beat(self.holder, self.held())
        except RedisError as exc:
            if self._beating_since is not None:
                log.warning("worker lease: beat failed: %s", exc, extra={"event": "lease_beat_failed"})
            self._beating_since = None
        else:
            if self._beating_since is None:
                self._beating_since = time.monotonic()

    def _run(self) -> None:
        self.beat()
        while not self._stop.wait(BEAT_INTERVAL_S):
            self.beat()

    def may_judge(self) -> bool:
        """Whether this worker has beaten for a whole lease without a failure: only then is a
        silent worker silent for its own reasons."""
        return self._beating_since is not None and time.monotonic() - self._beating_since >= self.lease_s

    def end(self) -> None:
        """Stop beating, then forget the lease (a beat still in flight would write it again), each
        waited for END_WAIT_S at most: the Redis client retries for ~30 s, and a worker whose Redis
        went first (`fittest up` killed) must not outlive it by that much. Not forgotten, the lease
        is judged silent later, and what kombu could not give back as the channel closed is given
        back then."""
        self._stop.set()
        self._thread.join(timeout=END_WAIT_S)
        if self._thread.is_alive():  # a beat waiting on an unanswering Redis
            return
        forget = threading.Thread(target=self._forget, name="fittest-lease-end", daemon=True)
        forget.start()
        forget.join(timeout=END_WAIT_S)

    def _forget(self) -> None:
        try:
            self.holders.forget(self.holder)
        except RedisError as exc:
            log.warning("worker lease not forgotten at exit: %s", exc)


_lease: WorkerLease | None = None  # this worker process's, once its consumer started


def lease_for(consumer: Any, holders: MessageHolders, lease_s: float) -> WorkerLease:
    """This process's lease, started on the first start of its consumer and following the consumer
    across reconnections."""
    global _lease
    if _lease is None:
        _lease = WorkerLease(consumer.hostname, holders, lease_s)
        _lease.consumer = consumer
        _lease.start()
    _lease.consumer = consumer
    return _lease


@task_received.connect
def _claim(request: Any = None, **_: Any) -> None:
    """A message this worker has just received is its to hold (buffered, sent within 0.1 s)."""
    tag = getattr(getattr(request, "message", None), "delivery_tag", None)
    if _lease is not None and tag is not None:
        _lease.holders.claim(_lease.holder, str(tag))


def give_back_unclaimed(celery: Celery, holders: MessageHolders, lease_s: float) -> int:
    """Give back to their queues the messages of fittest's tasks delivered more than `lease_s` ago
    that no worker claims; returns how many. A live worker claims a message as it receives it and
    names it in every beat, so one nobody claims a lease later was taken by a worker that died
    before its claim reached Redis: only the visibility timeout gave it back (QA 52c: killed under
    load, a memory worker left one call of 30 waiting ~16 min). The delivery time is the delivering
    worker's clock (kombu's `unacked_index`): hosts whose clocks differ by a lease or more would give
    back a message a live worker runs, which then runs again, its effects applied once. Another
    program's tasks on the same broker are left alone: their workers claim nothing here."""
    client = holders.client
    old = [as_text(t) for t in client.zrangebyscore(UNACKED_INDEX_KEY, "-inf", time.time() - lease_s)]
    if not old:
        return 0
    tags = holders.unclaimed([tag for tag, raw in zip(old, client.hmget(UNACKED_KEY, old))
                              if raw is not None and _is_fittest_task(raw)])
    if not tags:
        return 0
    _restore(celery, tags)
    log.warning("%d message(s) taken by a worker that died before claiming them given back to their queues", len(tags),
                extra={"event": "unclaimed_given_back", "messages": len(tags)})
    return len(tags)


def _restore(celery: Celery, tags: list[str]) -> None:
    """Put these unacknowledged messages back on their queues with kombu's own `restore_by_tag`,
    which moves each only while it is still in the `unacked` hash, in a transaction."""
    with celery.connection_for_write() as connection:
        qos = connection.default_channel.qos
        for tag in tags:
            qos.restore_by_tag(tag)


def _is_fittest_task(raw: bytes | str) -> bool:
    """Whether a kombu `unacked` entry ([message, exchange, routing key]) carries a fittest task."""
    try:
        task = json.loads(raw)[0]["headers"]["task"]
    except (ValueError, LookupError, TypeError):
        return False
    return isinstance(task, str) and task.startswith("fittest.")


def give_back_silent(celery: Celery, holders: MessageHolders, lease_s: float) -> int:
    """Give back to their queues the messages of the workers silent for `lease_s`; returns how many.
    A tag a live worker claims is its own now (the broker gave it back some other way, and that
    worker took it), and one no longer unacknowledged was acknowledged or given back already:
    `restore_by_tag` moves a message only while it is in kombu's `unacked` hash, in a transaction."""
    given = 0
    for holder in holders.silent(lease_s):
        tags = holders.take(holder, lease_s)
        if not tags:
            continue
        tags = [tag for tag, raw in zip(tags, holders.client.hmget(UNACKED_KEY, tags)) if raw is not None]
        tags = holders.unclaimed(tags)
        if not tags:
            continue
        _restore(celery, tags)
        given += len(tags)
        held = ("the message it held is given back to its queue" if len(tags) == 1
                else f"the {len(tags)} messages it held are given back to their queues")
        log.warning("worker %s has not beaten for %.0f s: %s", holder, lease_s, held,
                    extra={"event": "silent_worker_given_back", "holder": holder, "messages": len(tags)})
    return given

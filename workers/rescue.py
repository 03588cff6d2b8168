"""Calls whose next step was lost are sent on again: at-least-once delivery of every step.

A call moves through its steps by replacing its task (`Task.replace`: selection -> attempt ->
attempt ... -> evolution). A step held by a worker that dies comes back by itself after the
visibility timeout (late acks), but one that a worker killed with SIGKILL had taken off the queue
and not yet recorded as unacknowledged is gone (workers/state/inflight.py). So each hand-on is
recorded with a due time past the visibility timeout and its hop, so that an older hand-on flushed
late by another process does not replace it (`hand_on`; fittest's client records a call's first
step the same way when it sends it), the call's end clears it (a `CallStep` that returns rather
than hand the call on returns its result), and every worker runs `sweep` every
SWEEP_INTERVAL_S (one at a time across the cluster: a lock in Redis). An overdue step is sent again,
under the call's task id, only when it is nowhere else: the call has no result, and the step is
neither waiting in its queue nor held by a worker. A step sent twice runs its attempt twice at worst
(at-least-once, as a redelivery does); the attempt id keeps its effects applied once. A step the
sweep sends carries the header `fittest_resent`, so that the step checks, as a redelivered one does,
that its call has not ended in the instant between the sweep's look and its sending.

The other way round, a step can come back after its call moved on: its worker handed the call on
(or returned its result) but its acknowledgement was lost with the broker connection ("Couldn't
ack"), and the broker gives the message back after the visibility timeout. Every step of a call is
a `CallStep`, which ignores such a delivery (one the broker marks as given back, `redelivered`, or
one the sweep sent) when the call's result is stored, or its recorded step is another one: its
tool would run again, and its result would replace the one the caller has, or a second copy of the
call would go on beside the first. A first delivery is not checked, so the steps of a call pay
nothing for it.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery import Celery, Task, bootsteps
from celery.canvas import Signature
from celery.exceptions import Ignore, Reject, Retry
from celery.signals import task_revoked
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import Retrying, retry_if_exception_type, retry_if_result, stop_before_delay, wait_fixed

from workers.app import PRIORITY_HIGH, PRIORITY_STEPS, QUEUES, TASK_ROUTES, app
from workers.routing import REDELIVERED_HEADER, RoutedTask
from workers.call_ends import call_ended
from workers.client import has_result
from workers.metrics import CALLS, REDELIVERED_STEPS, RESENT_STEPS, held_task_ids, queue_key
from workers.redis_connection import WRITE_REFUSALS, write_refusal
from workers.runtime import Runtime, runtime
from workers.state.inflight import EFFECTS, HandedOnStep, InflightCalls, step_due_in_s
from workers.worker_lease import WorkerLease, give_back_silent, give_back_unclaimed, lease_for

log = logging.getLogger("fittest.rescue")

SWEEP_INTERVAL_S = 5.0
# A call's step that is nowhere, neither waiting in its queue nor held by a worker, this long after
# it was recorded was lost: a worker took it off its queue and died before recording it as held
# (kombu's Redis transport has no reliable pop), a window of milliseconds that a busy worker's
# threads widen (QA 52a M3: each SIGKILL of a memory worker serving 30 calls lost one, sent again
# only at its due time, the visibility timeout and more later). It is made due one confirmation
# later, when the sweep looks again, and sent again then if it is still nowhere.
NOWHERE_AFTER_S = 30.0
NOWHERE_CONFIRM_S = 2 * SWEEP_INTERVAL_S
# The message header (a task request attribute on the worker) that marks a step the sweep sent.
RESENT_HEADER = "fittest_resent"
CALL_ENDED = "its call has ended"
# How long a step that lost Redis waits for it to answer before it is given back to its queue.
REDIS_AWAY_WAIT_S = 120.0


def due_in_s(rt: Runtime) -> float:
    return step_due_in_s(rt.settings.visibility_timeout)


class CallStep(RoutedTask):
    """The base of every task that is one step of a call (selection, attempt, evolution)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        again = delivered_again(self)
        if again and self.request.id:
            passed = _passed(self, list(args), kwargs)
            runtime().metrics.count(REDELIVERED_STEPS, task=self.name, by=again,
                                    outcome="ignored" if passed else "ran")
            if passed:
                log.warning("call %s: %s delivered again is ignored, %s", self.request.id, self.name, passed,
                            extra={"event": "passed_step_ignored", "task_id": self.request.id, "task": self.name,
                                   "by": again, "reason": passed})
                if passed == CALL_ENDED:  # a copy the sweep recorded as it sent it, after the call ended (QA resilience)
                    _end_passed_call(self)
                raise Ignore()
        try:
            if not again and self.request.id and _revoked(self):
                # Revoked before this worker started: a worker keeps the revokes it heard in memory
                # only (they run without mingle), and ran the step (QA 52c N3). One read of the
                # result backend per first delivery.
                log.warning("call %s: %s is not run, its call was revoked", self.request.id, self.name,
                            extra={"event": "revoked_step_dropped", "task_id": self.request.id, "task": self.name})
                _end_revoked_call(self)
                raise Ignore()
            result = super().__call__(*args, **kwargs)
        except (Ignore, Reject, Retry):
            raise  # handed on (Task.replace raises Ignore), or given back: still in flight
        except (RedisConnectionError, RedisTimeoutError, *WRITE_REFUSALS) as exc:
            # Redis stayed away past the state client's retries, or refused writes (past its
            # maxmemory; a read-only replica after a failover). Raised, Celery would store the error
            # as the call's result, or, that write refused too, none at all, and the call would be
            # over, its outcome lost, and taken for ended by the sweep (QA resilience: a 45 s outage
            # answered two calls with ConnectionError; QA 59d H2: 6 of 40 calls past maxmemory).
            # The step goes back to its queue once Redis takes a write, and runs again (its attempt
            # id keeps its effects applied once); if it cannot be put back, the sweep sends it once overdue.
            what = "Redis refuses writes" if isinstance(exc, WRITE_REFUSALS) else "lost Redis"
            log.warning("call %s: %s: %s (%s); given back to its queue once Redis takes a write", self.request.id,
                        self.name, what, exc, extra={"event": "step_given_back", "task_id": self.request.id, "task": self.name})
            redis_takes_writes_again(runtime().redis, runtime().settings.key_prefix, REDIS_AWAY_WAIT_S)
            raise Reject(exc, requeue=True) from exc
        except Exception as exc:
            if self.request.id:  # its error is the call's result: nothing to watch any more (QA resilience)
                runtime().inflight.finished(self.request.id)
                if not _asked_by_hand(self, self.request):  # counted with the calls that ended (QA 61c-5)
                    call_ended(self.request.id, "error", type(exc).__name__, None, None)
            raise
        # A step that returns has returned the call's result (success, failure, invalid payload...):
        # nothing to watch any more.
        if self.request.id:
            runtime().inflight.finished(self.request.id)
        return result


@task_revoked.connect
def _revoked_call_ends(sender: Task | None = None, request: Any = None, expired: bool = False, **_: Any) -> None:
    """A call's step revoked (Flower, `celery control revoke`: every step of a call carries its id)
    or expired is not run, and no later step of the call comes: it ends here, without a result.
    Left in flight, it was counted by `fittest_calls_in_flight` until the rescue sweep found it
    overdue, the visibility timeout and more later (QA ops L5)."""
    task_id = getattr(request, "id", None)
    if not isinstance(sender, CallStep) or not task_id or _asked_by_hand(sender, request):
        return
    rt = runtime()
    # Buffered, as every end of a call is: no Redis round trip in the consumer's thread (review)
    rt.metrics.count(CALLS, status="expired" if expired else "revoked")
    rt.inflight.finished(task_id)
    log.info("call %s: its step %s was %s; the call ends without a result", task_id, sender.name,
             "expired" if expired else "revoked",
             extra={"event": "call_revoked", "task_id": task_id, "task": sender.name, "expired": expired})


def _asked_by_hand(task: Task, request: Any) -> bool:
    """An evolution asked for by `fittest evolve`, which is no call: its request expires at the
    command's --timeout when no worker took it, and is no call that expired."""
    return (task.name == "fittest.prepare_evolution" and not getattr(request, "args", None)
            and "plan_data" not in (getattr(request, "kwargs", None) or {}))


def _end_passed_call(task: Task) -> None:
    """End in flight the call of a step it has passed. A step given back after its call was revoked,
    to a worker that never heard of the revoke (it started since: the one that held the step died,
    QA live F8), ends the call here, not in `_revoked_call_ends`."""
    if _revoked(task):
        _end_revoked_call(task)
    else:
        runtime().inflight.finished(task.request.id)


def _revoked(task: Task) -> bool:
    """Whether the result backend marks the step's call revoked."""
    return bool(task.app.AsyncResult(task.request.id).state == "REVOKED")


def _end_revoked_call(task: Task) -> None:
    """End a revoked call in flight, counted as revoked by the one delivery that finds it still in
    flight, so copies delivered together count it once."""
    rt = runtime()
    if rt.inflight.end_now(task.request.id):
        rt.metrics.count(CALLS, status="revoked")


def redis_takes_writes_again(client: Redis, prefix: str, within_s: float) -> None:
    """Wait until Redis answers and takes a write (a key of a second, `prefix`write-probe), or about
    `within_s` has passed (a try itself may take the client's own retries): the step is given back
    either way."""
    Retrying(retry=retry_if_exception_type((RedisConnectionError, RedisTimeoutError)) | retry_if_result(lambda r: r is not None),
             stop=stop_before_delay(within_s), wait=wait_fixed(1.0),
             retry_error_callback=lambda _: None)(write_refusal, client, f"{prefix}write-probe")


def delivered_again(task: Task) -> str | None:
    """Who delivered this step again: "broker" (a message given back), "sweep" (sent again), or None
    for a first delivery."""
    if (task.request.delivery_info or {}).get("redelivered", False) or getattr(task.request, REDELIVERED_HEADER, False):
        return "broker"
    if getattr(task.request, RESENT_HEADER, False):
        return "sweep"
    return None


def _passed(task: Task, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    """Why this delivery of a step of its call is one the call has passed, or None when it is not.

    The call has ended when the result backend holds its result. It has moved on when the step it
    was last handed on to is another one: a redelivery comes a visibility timeout after its
    message was taken, long after a hand-on was written. A step nothing is recorded for (the first
    step of a call sent without fittest's client, or one whose record was lost) runs. So does a
    step of a later hop than the one recorded, which it then is: its hand-on, buffered in the pool
    process that took it next, was lost when that process was killed, by the tool it ran (QA
    recheck N1: the step was ignored as "moved on", and the call waited for the sweep to send
    the step before it, 14.5 min later)."""
    if has_result(task.app, task.request.id):
        return CALL_ENDED
    rt = runtime()
    current = rt.inflight.current(task.request.id)
    hop = task.request.replaced_task_nesting or 0
    if current is not None and hop > current.hop:
        rt.inflight.handed_on(HandedOnStep(task_id=task.request.id, task=task.name, args=args, kwargs=kwargs, hop=hop),
                              due_in_s(rt))
        return None
    if current is not None and not current.carries(task.name, args, kwargs):
        return f"its call has moved on to {current.task}"
    return None


def hand_on(task: Task, sig: Signature) -> Any:
    """`task.replace(sig)`, with the step recorded first so that it can be sent again if lost.

    The step is recorded with its hop, the `replaced_task_nesting` that `Task.replace` gives its
    message (one more than this step's): the hop travels with the call in its messages, so the
    record of a later step is never replaced by an earlier one that reached Redis last."""
    if task.request.id:
        rt = runtime()
        step = HandedOnStep(task_id=task.request.id, task=sig.task, args=list(sig.args), kwargs=dict(sig.kwargs),
                            hop=(task.request.replaced_task_nesting or 0) + 1)
        rt.inflight.handed_on(step, due_in_s(rt))
    return task.replace(sig)


def send_recorded(task: Task, args: list[Any], **options: Any) -> str:
    """Send `task` with `args` recorded as in flight, the way a call's step is, so that the sweep
    sends it again when it is lost; returns its task id. For a message that is no step of a call
    but carries an effect nothing else applies: a failure mark (`fittest.mark_failure`), a call's
    outcome (`fittest.record_outcome`), the learner's records (`fittest.learn`).

    Why: the worker that takes such a message off its queue loses it when the broker connection
    drops before kombu records it as unacknowledged (kombu's pop is not reliable). QA: Redis
    stopped in the instant the memory worker popped a call's failure mark; the mark was never
    applied (the nap's failures stayed one short of its failed calls, for good). The task must be
    idempotent (the sweep may send it while it runs late) and end with
    `runtime().effects.finished(its id)`, as a call's last step ends its call's record."""
    rt = runtime()
    step = HandedOnStep(task_id=str(uuid.uuid4()), task=task.name, args=args)
    rt.effects.handed_on(step, due_in_s(rt))
    task.apply_async(args=args, task_id=step.task_id, **options)
    return step.task_id


@contextmanager
def effects_ended(rt: Runtime, requests: Sequence[Any]) -> Iterator[None]:
    """Forget the records of the effect messages `requests` (each with its task `id`, as Celery's
    request and celery-batches' SimpleRequest have) once they ran, also when they raised: a message
    whose effect can never apply would otherwise come back at every sweep past its due time (a
    batch meeting an unavailable Redis is run again first, workers/tasks/batches.py). Not when
    Redis stayed away past the state client's retries, or refused writes: such an effect can apply
    later, and its record has the sweep send it again once overdue (QA resilience: a 45 s outage;
    QA 59d H2: a Redis past its maxmemory)."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, *WRITE_REFUSALS):
        raise
    except BaseException:
        _forget(rt, requests)
        raise
    _forget(rt, requests)


def _forget(rt: Runtime, requests: Sequence[Any]) -> None:
    for request in requests:
        if request.id:
            rt.effects.finished(request.id)


def _queue_of(step: HandedOnStep) -> str:
    return step.queue or TASK_ROUTES.get(step.task, {}).get("queue", QUEUES[0])


def _waiting(rt: Runtime, steps: list[HandedOnStep]) -> dict[str, set[str] | None]:
    """Per queue of `steps`: the task ids of those with a message waiting in it (None: a backlog
    longer than workers/state/inflight.py QUEUE_READ_LIMIT, not read). Only the step's own message counts: a queue that held
    any message put off every lost step of it, and under a steady backlog one was never sent
    again (QA P)."""
    by_queue: dict[str, list[str]] = {}
    for step in steps:
        by_queue.setdefault(_queue_of(step), []).append(step.task_id)
    return {queue: rt.inflight.waiting([queue_key(queue, p) for p in PRIORITY_STEPS], ids)
            for queue, ids in by_queue.items()}


def sweep(celery: Celery, rt: Runtime, judge_silent: bool = False) -> list[str]:
    """Give back what silent workers held (`judge_silent`: this worker's own beats have reached
    Redis for a lease, workers/worker_lease.py), then send again the overdue steps of calls, and
    the overdue messages that carry their effects (`send_recorded`), that are nowhere else; returns
    the task ids sent again."""
    lease_s = rt.settings.worker_lease_s
    # Past the visibility timeout the broker gives the messages back itself. The lock is not the
    # sweep's: a worker that cannot judge yet (it just started) still sweeps, and must not keep
    # the one that can from giving back.
    if (judge_silent and lease_s < rt.settings.visibility_timeout
            and rt.state.acquire_lock("give_back", uuid.uuid4().hex, SWEEP_INTERVAL_S * 0.8)):
        rt.holders.flush()  # this process's own claims first
        give_back_silent(celery, rt.holders, lease_s)
        give_back_unclaimed(celery, rt.holders, lease_s)
    if not rt.state.acquire_lock("rescue", uuid.uuid4().hex, SWEEP_INTERVAL_S * 0.8):
        return []  # another worker swept within this interval
    held = functools.cache(lambda: held_task_ids(rt.redis))  # read once a sweep, and only if a step needs it
    resent = _resend_lost(celery, rt, rt.inflight, held) + _resend_lost(celery, rt, rt.effects, held)
    _look_early(celery, rt, held)
    return resent


def _look_early(celery: Celery, rt: Runtime, held_ids: Callable[[], set[str]]) -> None:
    """Make due soon (NOWHERE_CONFIRM_S) the steps of calls recorded NOWHERE_AFTER_S ago or more,
    not due yet, that are nowhere: neither waiting in their queue nor held by a worker, their call
    not ended; forget those whose call ended. The next sweep that finds one overdue and still nowhere
    sends it again. Not the messages of effects: a batch holds those as long as it fills
    (workers/tasks/learning.py).

    A step due within NOWHERE_CONFIRM_S is left to the overdue pass: one this look made due soon
    was made due soon again by each sweep, five seconds apart, and never came due (CI: a step
    lost as the chaos bench killed its executor was "sent again in 10 s" for minutes, and never
    sent; before this look it was sent at its due time)."""
    now = time.time()
    steps = rt.inflight.due_between(f"({now + NOWHERE_CONFIRM_S}", now + due_in_s(rt) - NOWHERE_AFTER_S)
    if not steps:
        return
    held, waiting = held_ids(), _waiting(rt, steps)
    for step in steps:
        if has_result(celery, step.task_id):
            # Ended, its record not cleared: its worker died right after it stored the result. Cleared
            # now, not at its due time (QA 55b L2: the calls in flight counted two such calls for 16 min).
            rt.inflight.finished(step.task_id)
            continue
        queued = waiting[_queue_of(step)]
        if queued is None or step.task_id in queued or step.task_id in held:
            continue  # a backlog too long to read, waiting, or held
        rt.inflight.postpone(step.task_id, NOWHERE_CONFIRM_S)
        log.info("call %s: its step %s is nowhere %.0f s or more after it was recorded; sent again in %.0f s if it is "
                 "still nowhere then", step.task_id, step.task, NOWHERE_AFTER_S, NOWHERE_CONFIRM_S,
                 extra={"event": "step_nowhere", "task_id": step.task_id, "task": step.task})
    rt.inflight.flush()


def _resend_lost(celery: Celery, rt: Runtime, inflight: InflightCalls, held_ids: Callable[[], set[str]]) -> list[str]:
    """Send again the overdue messages recorded in `inflight` that are nowhere else (`held_ids`: the
    task ids workers hold, `held_task_ids` read once for the sweep)."""
    inflight.flush()  # this process's own hand-ons and ends first
    overdue = inflight.overdue()
    if not overdue:
        return []
    held, waiting = held_ids(), _waiting(rt, overdue)
    resent = []
    for step in overdue:
        queued = waiting[_queue_of(step)]
        if has_result(celery, step.task_id):
            inflight.finished(step.task_id)  # ended without clearing (a worker died right after)
        elif step.task_id in held:
            inflight.postpone(step.task_id, due_in_s(rt))  # the broker gives it back if its worker died
        elif queued is None:
            inflight.postpone(step.task_id, SWEEP_INTERVAL_S)  # may be waiting in a long backlog: look again
        elif step.task_id in queued:
            inflight.postpone(step.task_id, due_in_s(rt))  # waiting: a worker will take it
        else:
            resend(celery, step)
            inflight.handed_on(step, due_in_s(rt))
            inflight.flush()  # at once: a sweep that outlived its lock must not leave the next one this step
            rt.metrics.count(RESENT_STEPS, task=step.task)
            log.warning("%s %s: its message %s was lost; sent again", "effect" if inflight.space == EFFECTS else "call",
                        step.task_id, step.task, extra={"event": "step_resent", "task_id": step.task_id, "task": step.task})
            resent.append(step.task_id)
    inflight.flush()
    return resent


def resend(celery: Celery, step: HandedOnStep) -> None:
    """Send a lost step again, under its call's task id, marked as sent again, at its hop (the
    call's next hand-ons go on counting from there, or their records would be refused)."""
    celery.send_task(step.task, args=step.args, kwargs=step.kwargs, task_id=step.task_id,
                     queue=_queue_of(step), priority=PRIORITY_HIGH, headers={RESENT_HEADER: True},
                     replaced_task_nesting=step.hop)


class RescueSweep(bootsteps.StartStopStep):
    """Runs `sweep` on the worker's timer. A step of the consumer, not of the worker: when the broker
    connection drops, Celery clears every timer of the event loop and starts the consumer's steps
    again once it reconnects, so the sweep is armed again there (as a worker step it stopped for
    good at the first Redis restart)."""

    def __init__(self, consumer: Any, **kwargs: Any) -> None:
        self.tref: Any = None

    def start(self, consumer: Any) -> None:
        self.stop(consumer)
        rt = runtime()
        lease = lease_for(consumer, rt.holders, rt.settings.worker_lease_s)
        self.tref = consumer.timer.call_repeatedly(SWEEP_INTERVAL_S, self._sweep, (consumer.app, lease), priority=10)

    def stop(self, consumer: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    @staticmethod
    def _sweep(celery: Celery, lease: WorkerLease) -> None:
        try:
            sweep(celery, runtime(), judge_silent=lease.may_judge())
        except Exception as exc:  # Redis away: the next sweep tries again; the worker keeps serving
            log.warning("rescue sweep failed: %s: %s", type(exc).__name__, exc)


app.steps["consumer"].add(RescueSweep)

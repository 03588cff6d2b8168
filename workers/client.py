"""The sending side of a call, on Celery and Redis: the transport (`CallSender`) that the service
client (fittest/client.py `FittestClient`), the CLI and the benches build on, and how their
failures read to a caller (`FittestUnavailable`, `CallTimeout`).

It needs only the broker URL and imports no task code: its calls are the messages a foreign
service's `send_task` sends. What it adds is the record of each call's first step in the calls in
flight (workers/state/inflight.py), which lets the workers' rescue sweep send the call again if the
worker that took it off its queue was killed before recording it as taken (Redis has no reliable
pop); a call sent by `send_task` alone is lost then.
"""

from __future__ import annotations

import errno
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.exceptions import TaskRevokedError
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult
from celery.states import READY_STATES
from kombu.exceptions import OperationalError
from pydantic import ValidationError
from redis import Redis
from redis.exceptions import BusyLoadingError, InvalidResponse, OutOfMemoryError, RedisError

from selection.models import CallResult, FieldError, joined_errors
from workers.buffered import flush_side_by_side
from workers.default_queue import DEFAULT_QUEUE
from workers.publishing import PUBLISH_RETRY_POLICY, ReconnectSafeAMQP
from workers.redis_connection import CLOSES, NOT_REDIS, redis_client, redis_refusal
from workers.result_backend import REDIS_AWAY, Outage, waiting_backend_url
from workers.settings import Settings, get_settings, redact_url
from workers.state.call_ids import CallIds, another_job_message, earlier_job_digest, job_digest
from workers.state.inflight import HandedOnStep, InflightCalls, step_due_in_s

log = logging.getLogger("fittest.client")

# A call sent, as `submit` returns it: celery's AsyncResult, named here so that fittest/client.py
# annotates its API without importing celery itself.
PendingCall = AsyncResult

# The tasks that start a call: what their messages carry is the call's first step.
CALL_TASKS = ("resilient_tool_call", "call_tool")
# A task a worker began just before its message expired has marked itself STARTED within this long.
STARTED_SETTLE_S = 0.5
# How much longer `ask_within` waits for a task found running at its timeout.
STARTED_GRACE_S = 30.0
# How often `past_revoke` looks at a revoked call that is still in flight, and how long after it
# left flight it waits for a result its last step may still be storing (the step's end is
# recorded just before Celery stores what it returned).
REVOKED_POLL_S, REVOKED_SETTLE_S = 0.5, 1.0
# A wait longer than this (infinity: "for ever") sends a message that never expires: celery's expiry
# date overflowed past year 9999 with a traceback (review: `--timeout inf`, `1e12`).
NEVER_EXPIRES_S = 365 * 24 * 3600.0
# How long a wait for a call's result goes before it asks whether one can come at all: a call the
# workers take at once has its result by then, and one nobody sent is told in seconds, not after
# the whole timeout.
FIRST_LOOK_S = 3.0
# How often a wait asks again after that: a Redis restarted without its data has lost the call, its
# message and its record, and the wait waited out its whole timeout (QA 54: 24 of 30, 150 s each).
KNOWN_LOOK_S = 10.0
# How long a look that found the call nowhere waits before it looks again to be sure: a worker
# takes a step off its queue a moment before it records the step as in flight.
UNKNOWN_CONFIRM_S = 0.5
# The least timeout handed to Celery's get(), which reads 0 as "no timeout".
MIN_GET_TIMEOUT_S = 0.001
# How long `close` waits for the calls sent to be recorded as in flight: a Redis that answers
# takes them in milliseconds; one that does not has them sent by the buffer's flusher later.
CLOSE_FLUSH_S = 5.0


_IN_FLIGHT: dict[tuple[str, str], InflightCalls] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def _calls_in_flight(settings: Settings) -> InflightCalls:
    """One buffer of sent calls per Redis and key prefix in this process, whatever the number of
    clients: a service with a client per thread sends one write per flush interval, not one each."""
    key = (settings.redis_url, settings.key_prefix)
    with _IN_FLIGHT_LOCK:
        if key not in _IN_FLIGHT:
            _IN_FLIGHT[key] = InflightCalls(redis_client(settings), settings.key_prefix)
        return _IN_FLIGHT[key]


def refusal(exc: BaseException, url: str | None = None, tls: dict[str, Any] | None = None) -> str | None:
    """What a failure to use Redis is when Redis did answer, as the rest of a sentence about it; None
    for a Redis that cannot be reached. A Redis past its maxmemory and a process out of file
    descriptors both read "Redis cannot be reached" (QA Q), and the mends differ. With the `url`
    that failed, a lost connection is asked again there, as `fittest up` asks: a server that takes
    the connection and closes it (PostgreSQL) is no Redis either, not one that is away."""
    text = str(exc)
    if isinstance(exc, OutOfMemoryError) or "maxmemory" in text:
        return "refuses writes (past its maxmemory): raise its maxmemory, under maxmemory-policy noeviction, or free memory"
    if getattr(exc, "errno", None) == errno.EMFILE or "Too many open files" in text:
        return "cannot be opened: this process is out of file descriptors (raise `ulimit -n`)"
    if isinstance(exc, BusyLoadingError):  # QA 59e: told "does not answer... `fittest up` starts one"
        return "answers, but is still loading its data set into memory: try again once it has"
    if "DB index is out of range" in text:  # QA 52a L8: told "cannot be reached", of a Redis that answered
        return "answers, but has no database of the number the URL ends with (`/0` is the first)"
    if "NOAUTH" in text or "WRONGPASS" in text or "invalid password" in text:
        return "answers, but refuses the password the URL gives (or gives none)"
    if isinstance(exc, InvalidResponse):
        return f"is not what answers there: {NOT_REDIS}"
    if url is not None and (said := redis_refusal(url, tls=tls)) in (NOT_REDIS, CLOSES):
        return f"is not what answers there: {NOT_REDIS}" if said == NOT_REDIS else f"does not answer: {CLOSES}"
    return None


class FittestUnavailable(ConnectionError):
    """Redis (the broker, or the result backend), or a store the workers need to take a judgement,
    could not be reached in time. A call already sent is not lost by it: the workers finish it, and `result()` (or `fittest result ID`) gets its
    result once Redis answers again. A send retries first (workers/publishing.py's policy: up to
    40 times, at most 1 s apart), whatever the `timeout` of the result."""


class NotDone(CeleryTimeout, TimeoutError):
    """A task sent by `ask_within` (a judgement, say) that no worker took within its timeout: its
    message expires, so it is not done, ever, and may be sent again. Both celery's TimeoutError
    and the builtin catch it (QA recheck F2: `except TimeoutError` missed celery's own)."""

    def __init__(self, task: str, timeout: float) -> None:
        super().__init__(f"fittest.{task}: no worker took it within {max(timeout, 0.0):g} s; it was not done, "
                         "and may be sent again")


class CallTimeout(CeleryTimeout, TimeoutError):
    """No result came within the `timeout` of `run` or `result`; the call goes on, and
    `result(call_id)` (or `fittest result ID`) gets it later. Both celery's TimeoutError, which
    the client raised before, and the builtin TimeoutError catch it (QA new user: `except
    TimeoutError` did not, and the message named no call to ask for later). `where` says where the
    call was at the timeout, when that could be read (QA 52a L6: nothing told a step waiting for a
    worker that does not run from a slow tool)."""

    def __init__(self, call_id: str, timeout: float, where: str | None = None) -> None:
        at = f"{where}; " if where else ""
        super().__init__(f"no result for call {call_id} within {max(timeout, 0.0):g} s: {at}it goes on, and "
                         f"result({call_id!r}) or `fittest result {call_id}` gets it later")
        self.call_id, self.where = call_id, where


class CallRevoked(TaskRevokedError):
    """The call was revoked (or its running step terminated) before it ended, and has no result.
    Celery's TaskRevokedError, which the client raised before, still catches it; this one names
    the call (QA 52a L4)."""

    def __init__(self, call_id: str, how: str) -> None:
        super().__init__(f"call {call_id} was {how or 'revoked'} before it ended: it has no result")
        self.call_id = call_id


# What a call is doing at each step, as `whereabouts` says it of a step a worker holds.
STEP_DOING = {
    "fittest.resilient_tool_call": "waiting for a selection worker",
    "fittest.call_tool": "waiting for a selection worker",
    "fittest.execute": "running a tool",
    "fittest.prepare_evolution": "preparing an evolution (every candidate failed)",
    "fittest.evolve": "evolving a new version (every candidate failed; up to FITTEST_EVOLUTION_BUDGET_S)",
}

# Why no result can come for a call id: what `UnknownCall` and `fittest result` say.
UNKNOWN_CALL = ("no call with this id is queued or running, and none finished in the last day (a call's result "
                "is kept under its task id, which is its call_id only when the sender made it so: "
                "send_task(..., task_id=call_id))")

# Why no result can be found under a call id a job was sent with in the last day.
UNDER_ANOTHER_TASK_ID = ("a call was sent with this call_id in the last day, and no result is kept under it: it is kept "
                         "under the task id the call was sent with, when that was another (send_task(..., "
                         "task_id=call_id) keeps them one), or `fittest forget` removed it")


class UnknownCall(LookupError):
    """No call with this id is queued or running, and no result of one is kept (results are kept
    for a day): a result that can never come, which a wait would have waited for to its timeout,
    and then said "it goes on" (QA integrator 2)."""

    def __init__(self, call_id: str, why: str = UNKNOWN_CALL) -> None:
        super().__init__(f"no result for call {call_id}: {why}")
        self.call_id = call_id


class MisroutedCall(UnknownCall):
    """The call's message waits in Celery's default queue, which no fittest worker reads: a
    `send_task` that named no queue (workers/default_queue.py). It would never end."""

    def __init__(self, call_id: str) -> None:
        super().__init__(call_id, f"its message waits in Celery's default queue '{DEFAULT_QUEUE}', which no fittest "
                                  "worker reads; send it again with send_task(..., queue='selection')")


def another_tasks_answer(answer: Any) -> bool:
    """Whether what is stored under an id is another task's answer than a call's: no `call_id` and
    `status` (a judgement's), or fields only `fittest.explain` answers with (QA recheck N1: an
    explain's id read as a call that succeeded, output null)."""
    from workers.payloads import ExplainResult

    if not (isinstance(answer, dict) and {"call_id", "status"} <= answer.keys()):
        return True
    return bool(answer.keys() & (ExplainResult.model_fields.keys() - CallResult.model_fields.keys()))


class NotACall(LookupError):
    """The id asked for names another task's answer than a call's (a judgement, an explain), as
    Flower lists them all (QA recheck N2: the client said it was of another release)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"{task_id} is not a call's id: what is stored under it is another task's answer "
                         "(a judgement, an explain, a retrain…)")
        self.call_id = task_id


def unreadable_message(model: str, error: ValidationError) -> str:
    """What a CLI or client of this release says of an answer its model cannot read."""
    fields = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'the answer'}: {e['msg']}" for e in error.errors()[:3])
    return (f"the workers' answer does not read as {model} ({error.error_count()} field(s): {fields}): "
            "are this client and the workers the same release?")


class Refused(ValueError):
    """What the workers refuse of a request, as they name it: `errors`, each a field, why and a
    `type` a program branches on (another_job, no_such_tool, no_such_version, no_such_call,
    not_in_call...). A ValueError, as a bad payload's is (QA 59a L1: a bare ValueError, its fields
    in its message alone)."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__(joined_errors(errors))
        self.errors = errors


class UnreadableAnswer(ValueError):
    """The workers' answer to a call does not read as this release's CallResult: workers of another
    release (a status, failure class or reason this one does not know). `answer` is what they
    stored (QA: pydantic's bare ValidationError, a ValueError as a bad payload's is, named neither
    the call nor the cause)."""

    def __init__(self, call_id: str, answer: Any, error: ValidationError) -> None:
        super().__init__(f"call {call_id}: {unreadable_message('CallResult', error)}")
        self.call_id, self.answer = call_id, answer


def read_call(call_id: str, answer: Any) -> CallResult:
    """What is stored under a call's id, as this release's CallResult: NotACall for another task's
    answer, UnreadableAnswer for one of workers of another release. The client's `result()` and
    `fittest result` read it so."""
    if another_tasks_answer(answer):
        raise NotACall(call_id)
    try:
        return CallResult.model_validate(answer)
    except ValidationError as exc:
        raise UnreadableAnswer(call_id, answer, exc) from None


def has_result(celery: Celery, task_id: str) -> bool:
    """Whether the result backend holds the result of the call with this task id (its steps share
    the call's task id, and only its last step stores a result); without one nothing tells."""
    return celery.conf.result_backend is not None and celery.AsyncResult(task_id).state in READY_STATES


def checked_timeout(timeout: float | None) -> float:
    """A wait's `timeout` in seconds, None waiting for ever as infinity does, and 0 or less asking
    once. A NaN timeout compares false with every time, and a wait on it never ended (QA recheck
    F1); a string or None reached the arithmetic only after the call was sent (QA 52a M1: the
    tool ran, and the caller, told TypeError, had no call id to wait on)."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout: give seconds as a number (or None to wait for ever), not {timeout!r}")
    if math.isnan(timeout):
        raise ValueError("timeout: not a number (NaN); give seconds")
    return float(timeout)


@contextmanager
def timed_out_as(call_id: str, timeout: float, where: Callable[[], str | None] = lambda: None) -> Iterator[None]:
    """Turn celery's TimeoutError of a wait for call `call_id` into a CallTimeout that names it, and
    says `where()` it is."""
    try:
        yield
    except CeleryTimeout as exc:
        if isinstance(exc, CallTimeout):
            raise
        raise CallTimeout(call_id, timeout, where()) from exc


@contextmanager
def reaching(url: str, doing: str) -> Iterator[None]:
    """Turn the ways Celery, kombu and redis-py say "Redis is away" into one FittestUnavailable."""
    try:
        yield
    except (RedisError, OperationalError, ConnectionError) as exc:
        if isinstance(exc, FittestUnavailable):
            raise
        why = refusal(exc, url) or "cannot be reached"
        raise FittestUnavailable(f"{doing}: Redis at {redact_url(url)} {why} ({type(exc).__name__}: {exc})") from exc


class CallSender:
    """The transport of a call, for the CLI and the benches: the message (`send`), its record as in
    flight, and the wait for its result as a plain dict (`wait`, `ask_within`). Services, the demo
    and the tests of the public path use its subclass `fittest.client.FittestClient`, which checks
    the payload first and returns a `CallResult`."""

    def __init__(self, settings: Settings | None = None) -> None:
        settings = settings or get_settings()
        self.settings = settings
        self.celery = Celery("fittest-client", broker=settings.redis_url,
                             backend=waiting_backend_url(settings.backend_url), amqp=ReconnectSafeAMQP)
        # A call sent while Redis restarts waits for it, as the workers' own messages do.
        self.celery.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json",
                                task_publish_retry_policy=PUBLISH_RETRY_POLICY,
                                result_accept_content=["json"], broker_use_ssl=settings.redis_tls() or None,
                                redis_backend_use_ssl=settings.redis_tls(settings.backend_url) or None)
        self._inflight = _calls_in_flight(settings)  # this process's, shared by its clients (no connection yet)
        self._ids: CallIds | None = None

    @property
    def redis(self) -> Redis:
        """This process's Redis client of the calls in flight (the broker's Redis)."""
        return self._inflight.client

    def _call_ids(self) -> CallIds:
        """The record of which job each caller-chosen call id names (workers/state/call_ids.py)."""
        if self._ids is None:
            self._ids = CallIds(self._inflight.client, self.settings.key_prefix)
        return self._ids

    def send(self, task: str, *, queue: str = "selection", **kwargs: Any) -> AsyncResult:
        """Send `fittest.{task}` with `kwargs` to `queue` (workers/app.py TASK_ROUTES names each task's).

        A call (CALL_TASKS) is recorded as in flight once it is sent, in a buffered write (at most
        0.1 s later, or at `close` or exit). A call whose caller chose its `call_id` is sent with
        that id as its task id, so its result is kept, and found (`fittest result ID`), under it.
        Either id, chosen or made here, is claimed for this job before the call is sent: a result's
        `call_id` given to another job later is refused (QA onboarding H1: a made id was never
        claimed, and a second job sent under it was handed the first job's result)."""
        task_id = (kwargs.get("call_id") or str(uuid.uuid4())) if task in CALL_TASKS else None
        claim = (self._call_ids().claim(task_id, job_digest(task, kwargs), also=(earlier_job_digest(task, kwargs),))[0]
                 if task_id is not None else "new")
        if claim == "another" and task_id is not None:
            raise Refused([FieldError(field="call_id", message=another_job_message(task_id), type="another_job")])
        if claim == "again" and task_id is not None and has_result(self.celery, task_id):
            return self.celery.AsyncResult(task_id)  # the same job, ended: its result answers it, nothing is sent
        result = self.celery.send_task(f"fittest.{task}", kwargs=kwargs, queue=queue, task_id=task_id)
        if task in CALL_TASKS:
            step = HandedOnStep(task_id=result.id, task=f"fittest.{task}", kwargs=kwargs, queue=queue)
            self._inflight.sent(step, step_due_in_s(self.settings.visibility_timeout))
        return result

    def ask_within(self, task: str, timeout: float, *, queue: str, **kwargs: Any) -> dict[str, Any]:
        """Send `fittest.{task}` so that it is done within `timeout` or never, and wait for its answer.

        Its message expires at `timeout` (Celery's `expires`: a worker that takes it later drops
        it), so "no answer in time" means "not done", and the caller may send it again without it
        being done twice (QA AC: a judgement `feedback add` said no worker had answered was applied
        once a worker started, and the retry its message asked for counted it twice). A task that a
        worker began in time (the task tracks itself as STARTED) is waited for still, up to
        STARTED_GRACE_S more. Raises NotDone when it was not done."""
        timeout = checked_timeout(timeout)
        expires = timeout if timeout < NEVER_EXPIRES_S else None
        pending = self.celery.send_task(f"fittest.{task}", kwargs=kwargs, queue=queue, expires=expires)
        try:
            return self.wait(pending, timeout)
        except TaskRevokedError as exc:
            # A worker took the message after it expired and dropped it: not done, as documented
            # (QA integrator 4: celery's TaskRevokedError reached a caller written for TimeoutError).
            raise NotDone(task, timeout) from exc
        except CeleryTimeout as exc:
            time.sleep(STARTED_SETTLE_S)
            again = self.celery.AsyncResult(pending.id)
            if again.state in ("PENDING", "RETRY", "REVOKED"):  # not running, and never will: it has expired
                raise NotDone(task, timeout) from exc
            try:
                return self.wait(again, STARTED_GRACE_S)
            except TaskRevokedError as revoked:  # marked started, then dropped as begun too late (review 51 L7)
                raise NotDone(task, timeout) from revoked

    def wait_for_call(self, pending: AsyncResult, timeout: float,
                      first_look: Callable[[], None] | None = None) -> dict[str, Any]:
        """`wait` for a call's result, raising UnknownCall when none can come: no call of its id is
        in flight nor has a result, asked after FIRST_LOOK_S without one, then every KNOWN_LOOK_S,
        and at the timeout. A Redis that does not answer, or loads its data, is waited for across
        those looks, up to UNREACHABLE_GIVE_UP_S (QA 54b: a 3 s restart raised FittestUnavailable
        for 219 of 240 waits, at the look it fell on). `first_look` is asked once, at the first
        look before the deadline that finds the call known, and may raise why no result can come
        (the CLI's "no worker takes the selection queue")."""
        deadline = time.monotonic() + checked_timeout(timeout)
        look, outage = FIRST_LOOK_S, Outage(deadline)
        while True:
            try:
                try:
                    return self.wait(pending, min(look, deadline - time.monotonic()))
                except CeleryTimeout:
                    self.check_known(pending.id)
                    if time.monotonic() >= deadline:
                        raise
                    if first_look is not None:
                        first_look()
                        first_look = None
                look = KNOWN_LOOK_S
                outage.over()
            except REDIS_AWAY:
                if not outage.ride_out():
                    raise

    def wait_past_revoke(self, pending: AsyncResult, timeout: float) -> dict[str, Any]:
        """`wait_for_call`, and for a call marked revoked, what replaces the mark within `timeout`
        (`past_revoke`): the call's result, or the error its running step stored; CallRevoked when
        it ended revoked."""
        deadline = time.monotonic() + timeout
        try:
            return self.wait_for_call(pending, timeout)
        except TaskRevokedError:
            stored = self.past_revoke(pending.id, max(deadline - time.monotonic(), 0.0))
        if stored is not None:
            return stored
        # None: it ended revoked, or with an error its running step stored over the mark. Read
        # again, each raises as a call that ends so does (review 48: both were TaskRevokedError).
        try:
            return self.wait(self.celery.AsyncResult(pending.id), 1.0)
        except TaskRevokedError as revoked:
            raise CallRevoked(pending.id, str(revoked)) from None

    def past_revoke(self, call_id: str, timeout: float) -> dict[str, Any] | None:
        """The result of a call the backend marks revoked, if it has one after all. Celery's revoke
        without terminate marks the id REVOKED at once but stops only the steps not started yet: a
        step a worker runs goes on, and stores its result over the mark when it ends (QA live F2:
        `fittest result` said "revoked, it has no result", and the call then succeeded, its tool's
        effects done). While the call is in flight this waits, up to `timeout`, for what replaces
        the mark: the result it stored, or None for anything else, as for a call that left flight
        without replacing it (it ended revoked). A step whose message still waits in its queue
        will not run (workers/rescue.py: whichever worker takes it drops it), so a call at such a
        step is None at once (QA 52c N3: it waited out the whole timeout when no worker consumed
        the queue). CeleryTimeout while a step still runs."""
        deadline = time.monotonic() + timeout
        left_flight: float | None = None
        while True:
            meta = self.celery.backend.get_task_meta(call_id)
            if meta.get("status") != "REVOKED":
                return dict(meta["result"]) if meta.get("status") == "SUCCESS" else None
            if (step := self.current_step(call_id)) is not None:
                if self.waits_in_queue(call_id, step.task, step.queue):
                    return None
                if time.monotonic() >= deadline:
                    raise CeleryTimeout(f"call {call_id} is revoked and a worker still runs its step")
                left_flight = None
            elif left_flight is None:
                left_flight = time.monotonic()
            elif time.monotonic() - left_flight >= REVOKED_SETTLE_S:  # its step ended, and stored nothing over the mark
                return None
            time.sleep(REVOKED_POLL_S)

    def check_known(self, call_id: str) -> None:
        """UnknownCall unless a call of this id is in flight, its result is stored (it may have come
        just after the wait gave up), its message waits in the selection queue, or a worker holds
        it (a call sent with a countdown waits there): one a foreign
        `send_task` sent is known to the calls in flight only once a worker took it, and a caller
        told it is unknown might send it again (QA recheck F6). Found nowhere, it is looked for again
        UNKNOWN_CONFIRM_S later before it is said unknown; MisroutedCall when it waits in Celery's
        default queue instead."""
        if self._known(call_id):
            return
        time.sleep(UNKNOWN_CONFIRM_S)
        if not self._known(call_id):
            if self.waits_in_queue(call_id, "fittest.resilient_tool_call", DEFAULT_QUEUE):
                raise MisroutedCall(call_id)
            if self._call_ids().named(call_id):  # QA 57a L10: "none finished in the last day" of one that had
                raise UnknownCall(call_id, UNDER_ANOTHER_TASK_ID)
            raise UnknownCall(call_id)

    def _known(self, call_id: str) -> bool:
        from workers.metrics import held_task_ids

        return (self.in_flight(call_id)
                or self.celery.AsyncResult(call_id).state != "PENDING"  # what Celery answers for an id it knows nothing of
                or self.queued(call_id)
                # held by a worker before it starts: a call sent with a countdown or an eta waits there (QA 59a M1)
                or call_id in held_task_ids(self.redis))

    def queued(self, call_id: str, task: str = "fittest.resilient_tool_call") -> bool:
        """Whether a message of this call may wait in the queue of `task` (the selection queue, where
        a call starts): a queue too long to read (workers/state/inflight.py QUEUE_READ_LIMIT) may."""
        return self.waits_in_queue(call_id, task) is not False

    def waits_in_queue(self, call_id: str, task: str, queue: str | None = None) -> bool | None:
        """Whether a message of this call waits in `queue` (by default the queue `task` is routed
        to); None when that queue is too long to read."""
        from workers.app import PRIORITY_STEPS, TASK_ROUTES
        from workers.metrics import queue_key

        queue = queue or TASK_ROUTES.get(task, {}).get("queue", "selection")
        found = self._inflight.waiting([queue_key(queue, p) for p in PRIORITY_STEPS], [call_id])
        return None if found is None else call_id in found

    def whereabouts(self, call_id: str) -> str | None:
        """Where a call that has not ended is, as the rest of a sentence: its step held by a worker,
        or waiting in its queue for one; None when it is not in flight, or Redis cannot tell (QA
        resilience: "it is running a tool" was said with no executor alive, the step queued)."""
        from workers.metrics import held_task_ids

        try:
            step = self.current_step(call_id)
            held = call_id in held_task_ids(self.redis)
            queued = step is not None and not held and self.waits_in_queue(call_id, step.task, step.queue) is not False
        except Exception:  # noqa: BLE001 - Redis away, say: what is told never hides the timeout it explains
            return None
        if step is None:  # a foreign `send_task`'s call is in flight once a worker starts it (QA 63g: said nothing)
            return ("it is held by a worker that has not started it: sent with a countdown or an eta, it waits there for "
                    "its time") if held else None
        doing = STEP_DOING.get(step.task, step.task)
        if not held and not queued:
            # QA 48 recheck: a step taken by an executor that a tool killed at that instant was said to wait
            # in its queue for the 16 min before the sweep sent it again
            doing = ("neither in its queue nor held by a worker: one that died took it before it was recorded, "
                     "and the rescue sweep sends it again once it is overdue (FITTEST_VISIBILITY_TIMEOUT_S after "
                     "it was handed on)")
        elif not held and not doing.startswith("waiting"):
            doing = "waiting in its queue: no worker has taken it yet (`fittest health` says whether one runs)"
        return f"it is {doing} ({step.task})"

    def in_flight(self, call_id: str) -> bool:
        """Whether a call with this id is queued or running: sent by a client, or taken by a worker."""
        return self.step_of(call_id) is not None

    def step_of(self, call_id: str) -> str | None:
        """The task of the step a call in flight was last handed on to (`fittest.execute`,
        `fittest.evolve`...), or None when it is not in flight."""
        step = self.current_step(call_id)
        return None if step is None else step.task

    def current_step(self, call_id: str) -> HandedOnStep | None:
        """The step a call in flight was last handed on to, or None when it is not in flight."""
        self._inflight.flush()  # this process's own sends count
        return self._inflight.current(call_id)

    @staticmethod
    def wait(result: AsyncResult, timeout: float = 120.0) -> dict[str, Any]:
        """The call's final result, wherever the work went (every hop keeps the task id). On Redis
        the wait is workers/result_backend.py's: it reads the result, and listens for it on a
        connection of its own, riding out a Redis that restarts or loads its data."""
        timeout = checked_timeout(timeout)
        if timeout <= 0 and not result.ready():
            # Celery reads a timeout of 0 as none: a timeout of 0 or less waited for ever (QA
            # integrator 1); it reads once.
            raise CeleryTimeout("The operation timed out.")
        return result.get(timeout=max(timeout, MIN_GET_TIMEOUT_S))

    def close(self) -> None:
        """Write the calls sent but not yet recorded as in flight, waiting CLOSE_FLUSH_S at most,
        and release the broker and backend connections. A Redis that does not answer keeps them
        in this process's buffer, sent when it answers or as the process ends (END_FLUSH_S): a
        `with FittestClient(...)` whose wait raised FittestUnavailable held the exception ~30 s
        more on its way out, riding out the restart again here."""
        flush_side_by_side([self._inflight], CLOSE_FLUSH_S, "as the client closes")
        self.celery.close()

"""Calls in flight: the step each call was last handed on to, and when it is overdue.

Why this exists: the Redis transport takes a message off its queue (BRPOP) before it records it as
unacknowledged, so a worker killed in between (SIGKILL, the OOM killer) loses that message for
good, and with it the call (kombu's Redis transport has no reliable pop; seen in `fittest bench
chaos`, one call in 100 lost in one run of five). Every time a call hands itself on to its next
step (`Task.replace`), the step is written here with a due time; the call's end removes it; a
sweep (workers/rescue.py) sends again the steps of calls that are overdue and nowhere else. A
call's first step is written by its sender when that is fittest's client (`sent`): a service that
sends the call with Celery's own `send_task` writes nothing, so that step is not covered.

The processes that hand a call on flush their writes on their own clocks, so an older hand-on can
reach Redis after a newer one (execute -> prepare_evolution written by the executor after
prepare_evolution -> evolve written by the selection worker). Each step carries its hop, how many
times its call had been handed on when it was sent, and a hand-on is recorded only while no later
hop of the call is: a number that travels with the call, where the hosts' clocks could not order
the writes. Without it the call's record said it was at a step it had passed, and its current
step, delivered again after its worker was killed, was ignored as passed.

Keys, under the key prefix: `inflight:due` (sorted set: call task id -> due time, Unix seconds),
`inflight:steps` (hash: call task id -> the step as JSON), `inflight:hops` (hash: call task id ->
the recorded step's hop, compared without decoding the step), `inflight:ended:<task id>` (a marker
for ENDED_TTL_S after a call ended: lua/inflight_hand_on.lua, lua/inflight_end.lua) and
`inflight:died:<attempt id>` (hash: how often the worker process running that attempt died, how the
last one died and after how long; DIED_TTL_S: lua/attempt_died.lua). What a whole worker's death
tells of the attempt it ran is read from workers/state/run_marks.py.

The messages that carry a call's effects rather than its next step (a failed attempt's mark, a
call's outcome, the learner's records) are lost the same way, and their effects with them (QA: a
Redis stopped as the memory worker popped a failure mark; the mark never applied), so they are
recorded too, under `inflight:effects:` (the same keys but `died`: EFFECTS), apart from the calls
that `fittest_calls_in_flight` counts.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from pydantic import BaseModel, Field
from redis.client import Pipeline

from workers.buffered import BufferedWrites
from workers.state.base import as_text, load_scripts
from workers.state.once import ONCE_TTL_S, new_token

FLUSH_INTERVAL_S = 0.1
# A step is overdue this long after the visibility timeout (after which the broker gives back a
# step a dead worker held): the sweep only acts on steps the broker will not bring back.
STEP_MARGIN_S = 30.0
# How long an ended call's marker keeps a late hand-on out: longer than a buffered write can wait
# (a flush that fails is sent again while Redis is away, ~30 s of the client's retries each).
ENDED_TTL_S = 600
# How long the deaths of an attempt's process are remembered: longer than its step can wait in a
# queue before it is delivered again (a day, as long as the call's result is kept).
DIED_TTL_S = 24 * 3600


# A queue with more messages waiting than this is not read for a call's own message (`waiting`):
# the caller takes the call as possibly waiting there. The read holds Redis while it runs: 27 ms
# for 2,000 messages of 1.5 kB, 167 ms for 10,000 (a scratch script).
QUEUE_READ_LIMIT = 2_000

class HandedOnStep(BaseModel):
    """A task message as `Task.replace` sends it: the call's own task id, so that its caller's
    result arrives whichever delivery finishes the call."""

    task_id: str
    task: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    queue: str | None = None  # where its sender sent it; None: where the task is routed
    # The hop of the call this step is: Celery's `replaced_task_nesting` of its message, 0 for a
    # call's first step (and for a step recorded before hops were, which any hop may replace).
    hop: int = 0

    def carries(self, task: str, args: list[Any], kwargs: dict[str, Any]) -> bool:
        """Whether a delivered message (its task name, args and kwargs as the worker decoded them)
        is this step. Both are compared as this record is stored, JSON written by pydantic: the
        record went through it (a tuple came back a list, a datetime as text), and a NaN equals
        nothing, not even itself, so a step whose input held one would never be recognised and,
        redelivered, would be ignored as passed every time the sweep sent it."""
        fields = {"task", "args", "kwargs"}
        delivered = HandedOnStep(task_id=self.task_id, task=task, args=args, kwargs=kwargs)
        return json.loads(self.model_dump_json(include=fields)) == json.loads(delivered.model_dump_json(include=fields))


class AttemptDeaths(BaseModel):
    """How often the worker process running one attempt died (a pool process lost mid-task), how
    the last one died, and how long it had run."""

    count: int = 0
    reason: str = ""
    ms: float = 0.0


CALLS = "inflight"  # the keys of calls' steps
EFFECTS = "inflight:effects"  # the keys of effect messages: failure marks, outcomes, learner records


def due_key(prefix: str, space: str = CALLS) -> str:
    """The sorted set of the messages in flight by due time (the calls' is read by the metrics)."""
    return f"{prefix}{space}:due"


def step_due_in_s(visibility_timeout: float) -> float:
    """How long after a step was sent the sweep may send it again."""
    return visibility_timeout + STEP_MARGIN_S


# A call's step or end, buffered: the step as JSON, its hop, its due time and whether it is the
# call's first step (recorded only while none is), or None once the call ended.
_Pending = dict[str, tuple[str, int, float, bool] | None]


class InflightCalls(BufferedWrites[_Pending]):
    """Hand-ons and ends are buffered and sent every FLUSH_INTERVAL_S (workers/buffered.py): a step
    is due a visibility timeout later, so nothing reads it sooner, and a round trip per hand-on and
    per end cost the throughput bench's pipeline ~6 % of its calls per second (buffered: ~3.5 %).
    The processes that hand a call on and end it flush on their own clocks, so an end may reach
    Redis first; its marker keeps the late hand-on out. A hand-on may reach it after a later one;
    its hop keeps it out."""

    name = "inflight"

    def __init__(self, client: redis.Redis, prefix: str, flush_interval_s: float = FLUSH_INTERVAL_S,
                 space: str = CALLS) -> None:
        """`space`: CALLS for the steps of calls; EFFECTS for the messages that carry a call's
        effects (workers/rescue.py `send_recorded`), kept apart so that they are not counted as calls."""
        self.prefix = prefix
        self.space = space
        self.name = space
        self.due_key = due_key(prefix, space)
        self.steps_key = f"{prefix}{space}:steps"
        self.hops_key = f"{prefix}{space}:hops"
        scripts = load_scripts(client, "inflight_hand_on", "inflight_end", "attempt_died", "queued_calls")
        self._hand_on, self._end = scripts["inflight_hand_on"], scripts["inflight_end"]
        self._died, self._queued = scripts["attempt_died"], scripts["queued_calls"]
        super().__init__(client, flush_interval_s)

    def _new_buffer(self) -> _Pending:
        return {}

    def _keys(self, task_id: str) -> list[str]:
        """The KEYS of the hand-on and end scripts (lua/inflight_hand_on.lua, lua/inflight_end.lua)."""
        return [self.steps_key, self.due_key, f"{self.prefix}{self.space}:ended:{task_id}", self.hops_key]

    def _write(self, pipe: Pipeline, buffer: _Pending) -> None:
        for task_id, pending in buffer.items():
            keys = self._keys(task_id)
            if pending is None:
                self._end(keys=keys, args=[task_id, ENDED_TTL_S], client=pipe)
            else:
                step, hop, due, first = pending
                self._hand_on(keys=keys, args=[task_id, step, due, int(first), hop], client=pipe)

    def handed_on(self, step: HandedOnStep, due_in_s: float) -> None:
        """Remember `step` as the call's current one, overdue `due_in_s` from now, unless a later
        hop of the call is recorded already."""
        with self._buffer() as pending:
            pending[step.task_id] = (step.model_dump_json(), step.hop, time.time() + due_in_s, False)

    def sent(self, step: HandedOnStep, due_in_s: float) -> None:
        """Remember `step`, a call's first, just sent, unless the call has a step recorded already:
        the worker that took it may have handed the call on before this write reaches Redis."""
        with self._buffer() as pending:
            pending[step.task_id] = (step.model_dump_json(), step.hop, time.time() + due_in_s, True)

    def finished(self, task_id: str) -> None:
        with self._buffer() as pending:
            pending[task_id] = None

    def end_now(self, task_id: str) -> bool:
        """End the call at once, not buffered; True for the one process that found it still in flight,
        so that what is counted at a call's end is counted once by copies of its step delivered
        together."""
        return bool(self._end(keys=self._keys(task_id), args=[task_id, ENDED_TTL_S]))

    def overdue(self, now: float | None = None, limit: int = 100) -> list[HandedOnStep]:
        """The steps due before `now`, most overdue first (an id without a step is dropped)."""
        return self.due_between("-inf", now or time.time(), limit)

    def due_between(self, start: float | str, end: float, limit: int = 100) -> list[HandedOnStep]:
        """The steps due from `start` to `end` (Unix seconds), soonest first (an id without a step is dropped)."""
        ids = [as_text(i) for i in self.client.zrangebyscore(self.due_key, start, end, start=0, num=limit)]
        if not ids:
            return []
        raws = self.client.hmget(self.steps_key, ids)
        missing = [i for i, raw in zip(ids, raws) if raw is None]
        if missing:
            self.client.zrem(self.due_key, *missing)
        return [HandedOnStep.model_validate_json(raw) for raw in raws if raw is not None]

    def current(self, task_id: str) -> HandedOnStep | None:
        """The step the call was last handed on to, as Redis has it (None: none recorded, or ended)."""
        raw = self.client.hget(self.steps_key, task_id)
        return None if raw is None else HandedOnStep.model_validate_json(raw)

    def waiting(self, queue_keys: list[str], task_ids: list[str], limit: int = QUEUE_READ_LIMIT) -> set[str] | None:
        """Those of `task_ids` with a message waiting in the lists `queue_keys` (one queue's), or
        None when they hold more than `limit` messages, too many to read."""
        found = self._queued(keys=queue_keys, args=[limit, *task_ids])
        return None if found is None else {as_text(t) for t in found}

    def postpone(self, task_id: str, due_in_s: float) -> None:
        """Look at the call again `due_in_s` from now (only while it is still in flight)."""
        self.client.zadd(self.due_key, {task_id: time.time() + due_in_s}, xx=True)

    def died(self, attempt_id: str, reason: str, ms: float, once: str | None = None) -> int:
        """Count a death of the process that was running `attempt_id` (`reason`: how it died, after
        `ms` of running); returns how many are counted. Written at once, not buffered: the broker
        gives the step back right after, and its next delivery reads the count. `once` names the
        death, which is then counted once however often it is told (a run's mark read again, as
        long as the mark is kept: QA 59b S2, a token of 300 s let a mark read again later count its
        death twice)."""
        token = f"{self.prefix}once:died:{once or new_token()}"
        token_ttl_s = DIED_TTL_S if once else ONCE_TTL_S
        return int(self._died(keys=[self._died_key(attempt_id), token], args=[reason, round(ms, 1), DIED_TTL_S, token_ttl_s]))

    def deaths(self, attempt_id: str) -> AttemptDeaths:
        """The deaths counted for `attempt_id` (none: 0)."""
        raw = self.client.hgetall(self._died_key(attempt_id))
        fields = {as_text(k): as_text(v) for k, v in raw.items()}
        return AttemptDeaths(count=int(fields.get("deaths", 0)), reason=fields.get("reason", ""),
                             ms=float(fields.get("ms", 0.0)))

    def _died_key(self, attempt_id: str) -> str:
        return f"{self.prefix}inflight:died:{attempt_id}"

    def count(self) -> int:
        return int(self.client.zcard(self.due_key))

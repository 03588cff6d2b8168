"""Which attempts a worker's pool processes are running tools for, so that the death of the whole
worker mid-run is counted against the attempt that caused it, and against no other.

Why this exists: the death of a pool process is counted by the worker's main process
(workers/attempt_deaths.py `ExecuteRequest`), but a tool that kills the main process itself (or
an OOM kill of it) leaves no process of the worker to count anything. Its message is given back
(the worker lease, workers/worker_lease.py) and the next executor ran the tool again, and died
again, for ever (QA live F3). So a pool process marks the message it runs a tool for before the
tool starts, and the main process clears the mark when done with the message, however its step
ended. A mark still there when the message is delivered again was left by a worker that died
while the tool ran.

Whose doing the death was is clear only when that tool ran alone in the worker: a tool running
beside it may have killed it (QA recheck 47: a nap that ran beside a worker-killing tool twice was
recorded as a crash, twice its death). So a death is counted only for an attempt that ran alone.
Every attempt whose worker died while it ran, alone or not, runs its python tool isolated when it
comes back (workers/attempt_deaths.py `isolation_reason`): in a process of its own, a tool that kills its parent or
its process group kills that process, or the pool process, whose death the worker counts against
it alone (review 48: taking turns left the killer beside new calls, its deaths never counted).

A mark holds its run's token: the death it tells is counted once (the count's token is the run's)
however often a delivery that read it is given back before the mark goes (Redis away meanwhile).

Keys, under the key prefix: `inflight:running:<task id>:<delivery tag>` (the attempt id, the pool
process and the worker that ran it, as JSON) and `inflight:running-in:<worker>` (a set: the
messages its pool processes run tools for now), each kept MARK_TTL_S, as is `inflight:stopping:<worker>`
(its shutdown began: a run a kill then ends is not its tool's doing) and `inflight:stopped:<attempt
id>` (the one run of that attempt a stop was let end uncounted); `inflight:killer:<tool
version>`, kept KILLER_TTL_S, for a version whose attempt ended a crash by its deaths. Keyed by the message, not the
call: the next step of the call (its next attempt, a message of its own) may be running before the
main process clears the mark of the step that handed it on.
"""

from __future__ import annotations

import redis
from pydantic import BaseModel, Field
from redis.client import Pipeline

from workers.buffered import BufferedWrites
from workers.state.base import as_text
from workers.state.once import new_token

FLUSH_INTERVAL_S = 0.1
# How long a mark waits for a redelivery: past the visibility timeout after which the broker gives
# back a dead worker's message (the lease gives it back within a minute), as an attempt's deaths are.
MARK_TTL_S = 24 * 3600
KILLER_TTL_S = 24 * 3600  # how long a version that killed its processes has its probes run isolated


class RunMark(BaseModel):
    attempt_id: str
    holder: str  # the worker's node name and the pool process's pid, for people
    worker: str  # the worker's node name and its main process's pid: whose running set holds the message
    run: str = Field(default_factory=new_token)  # this run's: its death is counted once


def worker_key(node: str | None, pid: int) -> str:
    """A worker as its running set is keyed: its node name and its main process's pid (a restarted
    worker, with the node name of the one that died, has a set of its own)."""
    return f"{node}:{pid}"


def message_key(task_id: str, tag: str) -> str:
    """A delivered message: its task id and the broker's tag, the same at each redelivery."""
    return f"{task_id}:{tag}"


class RunMarks(BufferedWrites[set[tuple[str, str]]]):
    """Set synchronously by the pool process before a tool runs (it may kill the worker before a
    buffer is flushed); cleared in the main process's buffer, off the consumer's round trips, once
    the message is done with, or at once when it goes back to its queue (`cleared`): a clear
    buffered then could land after its redelivery's mark (review 48)."""

    name = "run-marks"

    def __init__(self, client: redis.Redis, prefix: str, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.prefix = prefix
        super().__init__(client, flush_interval_s)

    def _new_buffer(self) -> set[tuple[str, str]]:
        return set()

    def _write(self, pipe: Pipeline, buffer: set[tuple[str, str]]) -> None:
        for message, worker in buffer:
            self._clear(pipe, message, worker)

    def _clear(self, pipe: Pipeline, message: str, worker: str) -> None:
        pipe.delete(self._mark_key(message))
        pipe.srem(self._set_key(worker), message)

    def running(self, message: str, mark: RunMark) -> None:
        """Mark `message` as running `mark.attempt_id`'s tool in `mark.worker`."""
        with self.client.pipeline() as pipe:
            pipe.set(self._mark_key(message), mark.model_dump_json(), ex=MARK_TTL_S)
            pipe.sadd(self._set_key(mark.worker), message)
            pipe.expire(self._set_key(mark.worker), MARK_TTL_S)
            pipe.execute()

    def ended(self, message: str, worker: str) -> None:
        """The worker is done with `message`: whatever its tool did, the worker outlived it."""
        with self._buffer() as ended:
            ended.add((message, worker))

    def last_run(self, message: str) -> RunMark | None:
        """The mark of `message`'s last run (None: none ran, or its mark is gone)."""
        return self._mark(message)

    def left_behind(self, message: str) -> tuple[RunMark, set[str]] | None:
        """The mark of a run of `message` whose end its worker never saw, and the other messages that
        worker was running tools for as it died (its running set, which nothing changes after its
        death, is left as it was: each of those messages reads the same when it comes back); None
        when every run of it ended in a worker that lived on. The mark stays until `counted`, once
        its death is counted (by its run's token: once, however often this is read)."""
        mark = self._mark(message)
        return None if mark is None else (mark, self.running_in(mark.worker) - {message})

    def counted(self, message: str) -> None:
        """The death the mark of `message` told is counted: the mark goes, and its dead worker's
        running set stays as it died, read by the other messages it holds when they come back."""
        self.client.delete(self._mark_key(message))

    def cleared(self, message: str, worker: str) -> None:
        """The mark of `message` goes at once, and its entry in `worker`'s running set: the message
        goes back to its queue from a worker that lives on, and its next delivery must not read it."""
        with self.client.pipeline() as pipe:
            self._clear(pipe, message, worker)
            pipe.execute()

    def stopping(self, worker: str) -> None:
        """`worker` is being stopped (its warm shutdown began): a run of it that a kill ends then
        (`fittest up` kills a worker still stopping after 5 s) is the stop's doing, not its tool's."""
        self.client.set(self._stopping_key(worker), 1, ex=MARK_TTL_S)

    def was_stopping(self, worker: str) -> bool:
        """Whether `worker` was being stopped when it ended (`stopping`)."""
        return bool(self.client.exists(self._stopping_key(worker)))

    def first_stop(self, attempt_id: str, run: str) -> bool:
        """Whether `run` is the first run of `attempt_id` that a stop of its worker ended: that one is
        the stop's doing; a second is counted as the deaths of any run are (a tool that stops its
        own worker would otherwise be run again, and stop it again, for ever). The same run read
        again (a delivery given back before its mark was counted, a copy of the step) is still the
        first (review 50: it was charged as the tool's death)."""
        key = self._stopped_key(attempt_id)
        if self.client.set(key, run, nx=True, ex=MARK_TTL_S):
            return True
        return as_text(self.client.get(key) or b"") == run

    def note_killer(self, key: str) -> None:
        """Tool version `key` killed the processes running it: its breaker's probes run it isolated,
        where it takes a pool process, not a worker, with it (QA 48: each probe of a tool that kills
        its executor cost a restart of the executor, and `fittest up` gave up on it)."""
        self.client.set(self._killer_key(key), 1, ex=KILLER_TTL_S)

    def killer(self, key: str) -> bool:
        """Whether tool version `key` killed the processes running it within KILLER_TTL_S."""
        return bool(self.client.exists(self._killer_key(key)))

    def running_in(self, worker: str) -> set[str]:
        """The messages `worker`'s pool processes run tools for now."""
        return {m.decode() if isinstance(m, bytes) else str(m) for m in self.client.smembers(self._set_key(worker))}

    def _mark(self, message: str) -> RunMark | None:
        raw = self.client.get(self._mark_key(message))
        return None if raw is None else RunMark.model_validate_json(raw)

    def _mark_key(self, message: str) -> str:
        return f"{self.prefix}inflight:running:{message}"

    def _killer_key(self, key: str) -> str:
        return f"{self.prefix}inflight:killer:{key}"

    def _stopped_key(self, attempt_id: str) -> str:
        return f"{self.prefix}inflight:stopped:{attempt_id}"

    def _stopping_key(self, worker: str) -> str:
        return f"{self.prefix}inflight:stopping:{worker}"

    def _set_key(self, worker: str) -> str:
        return f"{self.prefix}inflight:running-in:{worker}"

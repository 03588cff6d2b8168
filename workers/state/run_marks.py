"""Which attempt a worker's pool process is running a tool for, so that the death of the whole
worker mid-run is counted against that attempt.

Why this exists: the death of a pool process is counted by the worker's main process
(workers/tasks/execution.py `ExecuteRequest`), but a tool that kills the main process itself (or
an OOM kill of it) leaves no process of the worker to count anything. Its message is given back
(the worker lease, workers/worker_lease.py) and the next executor ran the tool again, and died
again, for ever (QA live F3). So a pool process marks the message it runs a tool for before the
tool starts, and the main process clears the mark when the pool hands back the step's end, however
it ended. A mark still there when the message is delivered again was left by a worker that died
while the tool ran: the attempt's next run counts that death first (inflight.py `died`), and two
deaths make it a crash, as two deaths of its pool process do.

Keys, under the key prefix: `inflight:running:<task id>:<delivery tag>` (the attempt id and the
worker that ran it, as JSON; MARK_TTL_S). Keyed by the message, not the call: the next step of the
call (its next attempt, a message of its own) may be running before the main process clears the
mark of the step that handed it on.
"""

from __future__ import annotations

import redis
from pydantic import BaseModel
from redis.client import Pipeline

from workers.buffered import BufferedWrites

FLUSH_INTERVAL_S = 0.1
# How long a mark waits for a redelivery: past the visibility timeout after which the broker gives
# back a dead worker's message (the lease gives it back within a minute), as an attempt's deaths are.
MARK_TTL_S = 24 * 3600


class RunMark(BaseModel):
    attempt_id: str
    holder: str  # the worker's node name and the pool process's pid


class RunMarks(BufferedWrites[set[str]]):
    """Set synchronously by the pool process before a tool runs (it may kill the worker before a
    buffer is flushed); cleared in the main process's buffer, off the consumer's round trips."""

    name = "run-marks"

    def __init__(self, client: redis.Redis, prefix: str, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.prefix = prefix
        super().__init__(client, flush_interval_s)

    def _new_buffer(self) -> set[str]:
        return set()

    def _write(self, pipe: Pipeline, buffer: set[str]) -> None:
        if buffer:
            pipe.delete(*buffer)

    def running(self, task_id: str, tag: str, mark: RunMark) -> None:
        """Mark the message (`task_id`, delivery `tag`) as running `mark.attempt_id`'s tool."""
        self.client.set(self._key(task_id, tag), mark.model_dump_json(), ex=MARK_TTL_S)

    def ended(self, task_id: str, tag: str) -> None:
        """The pool handed back the message's end: whatever its tool did, the worker outlived it."""
        with self._buffer() as keys:
            keys.add(self._key(task_id, tag))

    def left_behind(self, task_id: str, tag: str) -> RunMark | None:
        """The mark of a run of this message whose end its worker never saw, taken away (one death
        is counted once); None when every run of it ended in a worker that lived on."""
        with self.client.pipeline() as pipe:  # MULTI: GETDEL, for a Redis before 6.2 too
            pipe.get(self._key(task_id, tag))
            pipe.delete(self._key(task_id, tag))
            raw, _ = pipe.execute()
        return None if raw is None else RunMark.model_validate_json(raw)

    def _key(self, task_id: str, tag: str) -> str:
        return f"{self.prefix}inflight:running:{task_id}:{tag}"

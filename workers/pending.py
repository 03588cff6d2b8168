"""Vector writes the vector memory could not take, kept in Redis until it takes them.

Failure and feedback records are vectors. When the store cannot be opened, or a write (or the
embedding before it) fails, the write goes to one Redis list, `{prefix}pending:vectors`, instead
of being lost, and the call that caused it goes on. The list is replayed, oldest first, when the
store answers again: by the process that opens it after a failure, and after any later write that
succeeds. Point ids are stable (an attempt id), so a write replayed twice leaves one point; items
are removed from the list only after the store took them, so a crash during a replay repeats
some writes and loses none. One replay runs at a time (a lock in Redis), because two replays
trimming the same list would each remove what the other wrote.

A point's vector travels as base64 float32 (1.5 kB for 384 dimensions, a quarter of JSON floats);
a point whose vector could not be computed keeps its text and is embedded at replay. At most
MAX_PENDING writes are kept; past that the oldest are dropped, and counted in the log.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ValidationError
from redis import Redis

from selection.ports import VectorMemory, VectorPoint
from workers.memory.common import check_vector
from workers.state.redis import RedisStateStore
from workers.store_failures import is_store_failure

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.pending")

MAX_PENDING = 100_000
REPLAY_BATCH = 200
REPLAY_LOCK = "pending:vectors:replay"
REPLAY_LOCK_S = 300.0


class PendingWrite(BaseModel):
    """One point for one collection; `vector_b64` empty means "embed `text` first"."""

    collection: str
    id: str
    payload: dict[str, Any]
    vector_b64: str = ""
    text: str = ""

    @classmethod
    def of(cls, collection: str, point: VectorPoint, text: str) -> PendingWrite:
        packed = base64.b64encode(np.asarray(point.vector, dtype="<f4").tobytes()).decode() if point.vector else ""
        return cls(collection=collection, id=point.id, payload=point.payload, vector_b64=packed, text=text)

    def vector(self) -> list[float]:
        return np.frombuffer(base64.b64decode(self.vector_b64), dtype="<f4").astype(float).tolist() if self.vector_b64 else []


class PendingWrites:
    """The list of writes waiting for the vector memory. It holds its own Redis client, so a replay
    can run beside (not inside) a Runtime that is still opening its services."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.key = f"{prefix}pending:vectors"
        self._locks = RedisStateStore(client, prefix)

    def __len__(self) -> int:
        return int(self.client.llen(self.key))

    def keep(self, writes: Sequence[PendingWrite]) -> None:
        """Add `writes` at the end, the oldest dropped past MAX_PENDING, in one MULTI: trimmed in a
        second round trip by the length read in the first, two writers over the limit at once
        dropped more than it asked (review 52b)."""
        if not writes:
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(self.key, *[w.model_dump_json() for w in writes])
        pipe.ltrim(self.key, -MAX_PENDING, -1)
        length, _ = pipe.execute()
        if length > MAX_PENDING:
            log.error("pending vector writes over the limit: dropped the %d oldest", length - MAX_PENDING,
                      extra={"event": "pending_dropped", "dropped": length - MAX_PENDING})

    def replay(self, memory: VectorMemory, embed: Callable[[list[str]], list[list[float]]]) -> int:
        """Write what waits, oldest first; the number written (0 when another replay runs or the
        store failed again, in which case the rest waits for the next time)."""
        owner = uuid.uuid4().hex
        if not self._locks.acquire_lock(REPLAY_LOCK, owner, REPLAY_LOCK_S):
            return 0
        written = 0
        try:
            while raws := self.client.lrange(self.key, 0, REPLAY_BATCH - 1):
                writes = self._parse(raws, memory.dim)
                try:
                    _write(memory, embed, writes)
                except Exception as exc:
                    if not is_store_failure(exc):
                        raise
                    log.warning("replay of pending vector writes stopped: %s", exc, extra={"event": "pending_replay_failed"})
                    break
                # Remove exactly what was written: keep() may have trimmed the head meanwhile (the
                # list over its limit), and an LTRIM by count would then drop writes never replayed.
                pipe = self.client.pipeline(transaction=False)
                for raw in raws:
                    pipe.lrem(self.key, 1, raw)  # type: ignore[arg-type]  # bytes, as read (redis-py's stubs say str)
                pipe.execute()
                written += len(writes)
        finally:
            self._locks.release_lock(REPLAY_LOCK, owner)
        if written:
            log.info("replayed %d pending vector writes", written, extra={"event": "pending_replayed", "written": written})
        return written

    @staticmethod
    def _parse(raws: list[Any], dim: int) -> list[PendingWrite]:
        """The writes of `raws` the store can take; one it never could is dropped and logged. Left in
        the list, it failed every replay with a ValueError and held back every write behind it,
        and the vector write that set the replay off failed with it (QA P: a vector of another size,
        kept before the embedding model changed)."""
        writes = []
        for raw in raws:
            try:
                write = PendingWrite.model_validate_json(raw)
            except ValidationError:
                log.error("dropped an unreadable pending vector write: %r", raw[:200])
                continue
            try:
                if write.vector_b64:
                    check_vector(write.vector(), dim)
            except ValueError as exc:
                log.error("dropped a pending vector write the store cannot take (%s %s): %s", write.collection, write.id,
                          exc, extra={"event": "pending_dropped_invalid", "collection": write.collection})
                continue
            writes.append(write)
        return writes


def _write(memory: VectorMemory, embed: Callable[[list[str]], list[list[float]]], writes: list[PendingWrite]) -> None:
    texts = [w.text for w in writes if not w.vector_b64]
    vectors = iter(embed(texts) if texts else [])
    by_collection: dict[str, list[VectorPoint]] = defaultdict(list)
    for w in writes:
        vector = w.vector() or next(vectors)
        by_collection[w.collection].append(VectorPoint(id=w.id, vector=vector, payload=w.payload))
    for collection, points in by_collection.items():
        memory.upsert(collection, points)


class WriteRefusal(BaseModel):
    """The store of this process refuses writes: since when (the first refusal after the last write
    it took) and what it said last. Health reports it: a store that opens and reads but cannot
    write (its files deleted under it, a full disk) keeps calls answered but learns nothing."""

    since: float
    error: str


_refusal: WriteRefusal | None = None


def write_refusal() -> WriteRefusal | None:
    """None while the last write of this process's store was taken (or none was tried)."""
    return _refusal


_replaying = threading.Lock()
# After a write the store took, the pending list is looked at for writes to catch up on at most this
# often (per process): a look is a Redis round trip, and the memory worker writes on every outcome.
PENDING_CHECK_S = 1.0
_next_check = 0.0


def upsert_or_keep(rt: Runtime, collection: str, points: Sequence[VectorPoint], texts: Sequence[str]) -> bool:
    """Write `points` (each embedded from its text in `texts` when its vector is empty); when the
    embedder or the store fails, keep them in the pending list instead. Never raises for those
    failures: True when written now, False when kept."""
    global _next_check, _refusal
    pending = PendingWrites(rt.redis, rt.settings.key_prefix)
    try:
        missing = [i for i, p in enumerate(points) if not p.vector]
        if missing:
            vectors = rt.embedder.embed([texts[i] for i in missing])
            points = list(points)
            for i, vector in zip(missing, vectors):
                points[i] = points[i].model_copy(update={"vector": vector})
        rt.memory.upsert(collection, points)
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        _refusal = WriteRefusal(since=_refusal.since if _refusal else time.time(), error=f"{type(exc).__name__}: {exc}")
        pending.keep([PendingWrite.of(collection, p, t) for p, t in zip(points, texts)])
        log.warning("vector memory unavailable; kept %d %s write(s) for later: %s", len(points), collection, exc,
                    extra={"event": "pending_kept", "collection": collection})
        return False
    _refusal = None
    now = time.monotonic()
    if now >= _next_check:
        _next_check = now + PENDING_CHECK_S
        if len(pending) and _replaying.acquire(blocking=False):  # the store is back: catch up
            try:
                pending.replay(rt.memory, rt.embedder.embed)
            finally:
                _replaying.release()
    return True

"""The vector memory on Qdrant Edge: Qdrant's engine inside this process, one shard per collection.

Facts about qdrant-edge-py 0.9 that shape this adapter (measured, not assumed):

- Its calls hold the GIL, `optimize()` included, so building an HNSW index stalls every thread of
  the process for as long as it runs (48 s for 100k x 384 at once on 2 cores). Edge runs no
  optimizer by itself either: without `optimize()` every point stays in a plain segment and an
  unfiltered search at 100k points takes ~22 ms. So the index is built in small steps: a segment is
  indexed once INDEX_EVERY points have arrived (~2 s of stall), and segments stop growing at
  MAX_SEGMENT_POINTS, so no later merge rebuilds a large graph in one go.
- The write-ahead log (on by default) keeps every acknowledged write across a crash of the process
  (checked with kill -9). `flush()` writes the segments and lets the WAL be truncated, which bounds
  the replay at the next start and the window a power loss could take; it costs a few ms, so it
  runs at most every FLUSH_INTERVAL_S per shard on the write path, and on close.
- The binding turns a Python `bool` in `MatchValue` into the integer 1/0, which then never
  matches a boolean payload; a `numpy.bool_` reaches the engine as a boolean.
- A shard directory is locked by the process that opened it; a second opener fails on the WAL lock.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_edge import (
    CountRequest,
    Direction,
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HnswIndexConfig,
    MatchAny,
    MatchValue,
    OrderBy,
    PayloadSchemaType,
    Point,
    RangeFloat,
    Query,
    QueryRequest,
    ScrollRequest,
    UpdateOperation,
)

from selection.ports import COLLECTIONS, VectorFilter, VectorHit, VectorPoint
from workers.memory.common import (
    VectorMemoryUnavailable,
    batched,
    check_order_field,
    check_vector,
    collection_name,
    indexed_fields,
    payload_keys,
    point_uuid,
    scroll_descending,
    scroll_pages,
    stored_payload,
    to_hit,
    to_point,
    translate_filter,
)
from workers.settings import check_collection_prefix

INDEX_EVERY = 10_000  # points written since the last optimize() that trigger the next one
MAX_SEGMENT_POINTS = 20_000  # segments stop growing here: bounds the stall of any one optimize()
FULL_SCAN_POINTS = 5_000  # a filter matching fewer points is answered from the payload index, exactly
FLUSH_INTERVAL_S = 1.0
UPSERT_BATCH = 1_000  # points per engine call; the GIL is released between calls


class _EdgeConditions:
    def value(self, key: str, value: str | int | bool) -> FieldCondition:
        return FieldCondition(key=key, match=MatchValue(np.bool_(value) if isinstance(value, bool) else value))  # type: ignore[arg-type]

    def any(self, key: str, values: list[str] | list[int]) -> FieldCondition:
        return FieldCondition(key=key, match=MatchAny(values))

    def range(self, key: str, gte: float | None, lt: float | None) -> FieldCondition:
        return FieldCondition(key=key, range=RangeFloat(gte=gte, lt=lt))

    def either(self, conditions: list[FieldCondition]) -> Filter:
        return Filter(should=[*conditions])

    def filter(self, must: list[Any], must_not: list[Any]) -> Filter:
        return Filter(must=must or None, must_not=must_not or None)


_CONDITIONS = _EdgeConditions()
_INDEX_KINDS = {"bool": PayloadSchemaType.Bool, "float": PayloadSchemaType.Float, "keyword": PayloadSchemaType.Keyword}


class _Shard:
    """An open shard and the bookkeeping that decides when to index and flush it."""

    def __init__(self, engine: EdgeShard, unindexed: int) -> None:
        self.engine = engine
        self.unindexed = unindexed
        self.flushed_at = time.monotonic()


class EdgeVectorMemory:
    """VectorMemory on Qdrant Edge under `path`, one shard directory per `prefix + collection`.

    Shards open on first use (created or loaded). Safe to share between threads: the engine is
    internally synchronised, and a lock guards the table of open shards and their bookkeeping."""

    def __init__(self, path: Path, prefix: str, dim: int = 384) -> None:
        self.path = Path(path)
        self.prefix = check_collection_prefix(prefix)
        self.dim = dim
        self._lock = threading.Lock()
        self._shards: dict[str, _Shard] = {}
        self._closed = False

    def ensure_collections(self) -> None:
        for collection in COLLECTIONS:
            self._shard(collection)

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        shard = self._shard(collection)
        for chunk in batched(points, UPSERT_BATCH):
            operation = UpdateOperation.upsert_points(
                [Point(point_uuid(p.id), check_vector(p.vector, self.dim), stored_payload(p)) for p in chunk]
            )
            shard.engine.update(operation)
        self._after_write(shard, len(points))

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        limit: int = 10,
        filter: VectorFilter | None = None,
        score_threshold: float | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[VectorHit]:
        request = QueryRequest(
            limit=limit,
            query=Query.Nearest(check_vector(vector, self.dim)),
            filter=translate_filter(filter, _CONDITIONS),
            score_threshold=score_threshold,
            with_payload=payload_keys(fields),
        )
        return [to_hit(p, p.score) for p in self._shard(collection).engine.query(request)]

    def scroll(self, collection: str, filter: VectorFilter | None = None, limit: int = 1000,
               descending_by: str | None = None) -> list[VectorPoint]:
        check_order_field(collection, descending_by)
        engine = self._shard(collection).engine
        condition = translate_filter(filter, _CONDITIONS)
        if descending_by is not None:
            def ordered(start: float | None, n: int) -> list[VectorPoint]:
                request = ScrollRequest(limit=n, filter=condition, with_payload=True, with_vector=True,
                                        order_by=OrderBy(descending_by, Direction.Desc, start))
                records, _ = engine.scroll(request)
                return [to_point(r, r.vector) for r in records]  # type: ignore[arg-type]

            return scroll_descending(ordered, descending_by, limit)

        def fetch(offset: Any, n: int) -> tuple[list[VectorPoint], Any]:
            request = ScrollRequest(offset=offset, limit=n, filter=condition, with_payload=True, with_vector=True)
            records, next_offset = engine.scroll(request)
            return [to_point(r, r.vector) for r in records], next_offset  # type: ignore[arg-type]

        return scroll_pages(fetch, limit)

    def count(self, collection: str, filter: VectorFilter | None = None) -> int:
        request = CountRequest(exact=True, filter=translate_filter(filter, _CONDITIONS))
        return self._shard(collection).engine.count(request)

    def delete(self, collection: str, filter: VectorFilter) -> None:
        shard = self._shard(collection)
        condition = translate_filter(filter, _CONDITIONS)
        # Deleted points count like written ones: the optimize() they help trigger also vacuums them.
        deleted = shard.engine.count(CountRequest(exact=True, filter=condition))
        shard.engine.update(UpdateOperation.delete_points_by_filter(condition))
        self._after_write(shard, deleted)

    def drop_all(self) -> None:
        """Close and remove this prefix's shard directories; other prefixes under `path` stay.

        The memory stays usable: the next call creates empty shards."""
        with self._lock:
            shards, self._shards = self._shards, {}
            for shard in shards.values():
                shard.engine.close()
            for collection in COLLECTIONS:
                shutil.rmtree(self.path / collection_name(self.prefix, collection), ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            shards, self._shards = self._shards, {}
            self._closed = True
            for shard in shards.values():
                shard.engine.flush()
                shard.engine.close()

    def _shard(self, collection: str) -> _Shard:
        name = collection_name(self.prefix, collection)
        with self._lock:
            if self._closed:
                raise VectorMemoryUnavailable(f"vector memory {self.path / self.prefix}* is closed")
            shard = self._shards.get(collection)
            if shard is None:
                shard = self._shards[collection] = self._open(collection, self.path / name)
        return shard

    def _open(self, collection: str, directory: Path) -> _Shard:
        config = self._config()
        try:
            if directory.is_dir() and any(directory.iterdir()):
                # Passing the config checks the stored vectors against it, and applies the index
                # and optimizer settings above to a shard made with other ones.
                engine = EdgeShard.load(str(directory), config)
            else:
                engine = EdgeShard.create(str(directory), config)
        except Exception as exc:
            # The ownership hint only where another process may hold the store: a full disk is
            # no ownership matter (QA 59d L3)
            held = "WouldBlock" in str(exc) or "lock" in str(exc).lower()
            raise VectorMemoryUnavailable(
                f"cannot open the Qdrant Edge shard {directory} ({self.dim}-dim vectors): {exc}."
                + (" With Qdrant embedded one process owns the store under FITTEST_DATA_DIR; "
                   "to share vectors between processes set FITTEST_QDRANT_URL to a Qdrant server." if held else "")
            ) from exc
        indexed = engine.info().payload_schema
        for field, kind in indexed_fields(collection):
            if field not in indexed:
                engine.update(UpdateOperation.create_field_index(field, _INDEX_KINDS[kind]))
        info = engine.info()
        shard = _Shard(engine, info.points_count - info.indexed_vectors_count)
        if shard.unindexed >= INDEX_EVERY:  # left behind by a process that stopped before indexing
            engine.optimize()
            shard.unindexed = 0
        return shard

    def _config(self) -> EdgeConfig:
        kb_per_point = self.dim * 4 / 1024  # float32 vectors; the engine sizes segments in KB
        return EdgeConfig(
            vectors=EdgeVectorParams(size=self.dim, distance=Distance.Cosine),
            # payload_m=0: no extra graph per payload value. Filters that match few points are
            # answered exactly from the payload index, and broad ones keep recall >= 0.98 on the
            # plain graph, while the extra graphs would lengthen every optimize() stall.
            hnsw_config=HnswIndexConfig(
                m=16,
                ef_construct=100,
                full_scan_threshold=int(FULL_SCAN_POINTS * kb_per_point),
                payload_m=0,
            ),
            optimizers=EdgeOptimizersConfig(
                indexing_threshold=int(INDEX_EVERY * kb_per_point),
                max_segment_size=int(MAX_SEGMENT_POINTS * kb_per_point),
            ),
        )

    def _after_write(self, shard: _Shard, changed: int) -> None:
        """Index and flush on the writer's time, at most one thread per shard doing each."""
        now = time.monotonic()
        with self._lock:
            shard.unindexed += changed
            index_now = shard.unindexed >= INDEX_EVERY
            if index_now:
                shard.unindexed = 0
            flush_now = now - shard.flushed_at >= FLUSH_INTERVAL_S
            if flush_now:
                shard.flushed_at = now
        if index_now:
            shard.engine.optimize()
        if flush_now:
            shard.engine.flush()

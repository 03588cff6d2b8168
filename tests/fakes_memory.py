"""An in-memory VectorMemory for unit tests of pure logic: exact cosine search over a dict.

Written independently of the Qdrant adapters (it shares none of their filter translation), so the
contract suite, which runs against all three, checks them against a second reading of the port."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

from selection.ports import COLLECTIONS, Match, Range, VectorFilter, VectorHit, VectorPoint
from workers.memory.common import check_order_field


class InMemoryVectorMemory:
    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self._lock = threading.Lock()
        self._collections: dict[str, dict[str, VectorPoint]] = {}

    def ensure_collections(self) -> None:
        with self._lock:
            for collection in COLLECTIONS:
                self._collections.setdefault(collection, {})

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        # Stored normalised, like Qdrant's cosine collections, so scroll returns the same vectors.
        stored = [p.model_copy(update={"vector": _unit(self._checked(p.vector))}, deep=True) for p in points]
        with self._lock:
            target = self._collection(collection)
            for point in stored:
                target[point.id] = point

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        limit: int = 10,
        filter: VectorFilter | None = None,
        score_threshold: float | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[VectorHit]:
        query = _unit(self._checked(vector))
        with self._lock:
            candidates = [p for p in self._collection(collection).values() if _matches(p.payload, filter)]
        hits = [
            VectorHit(id=p.id, score=sum(a * b for a, b in zip(query, p.vector, strict=True)),
                      payload={k: v for k, v in p.payload.items() if fields is None or k in fields})
            for p in candidates
        ]
        if score_threshold is not None:
            hits = [h for h in hits if h.score >= score_threshold]
        hits.sort(key=lambda h: h.score, reverse=True)
        return hits[:limit]

    def scroll(self, collection: str, filter: VectorFilter | None = None, limit: int = 1000,
               descending_by: str | None = None) -> list[VectorPoint]:
        check_order_field(collection, descending_by)
        with self._lock:
            points = [p for p in self._collection(collection).values() if _matches(p.payload, filter)]
        if descending_by is not None:
            points = sorted((p for p in points if isinstance(p.payload.get(descending_by), int | float)),
                            key=lambda p: -p.payload[descending_by])
        return [p.model_copy(deep=True) for p in points[:limit]]

    def count(self, collection: str, filter: VectorFilter | None = None) -> int:
        with self._lock:
            return sum(1 for p in self._collection(collection).values() if _matches(p.payload, filter))

    def delete(self, collection: str, filter: VectorFilter) -> None:
        with self._lock:
            target = self._collection(collection)
            for point_id in [i for i, p in target.items() if _matches(p.payload, filter)]:
                del target[point_id]

    def drop_all(self) -> None:
        with self._lock:
            self._collections.clear()

    def close(self) -> None:
        """Nothing to release."""

    def _collection(self, collection: str) -> dict[str, VectorPoint]:
        if collection not in COLLECTIONS:
            raise ValueError(f"unknown collection {collection!r}")
        return self._collections.setdefault(collection, {})

    def _checked(self, vector: Sequence[float]) -> list[float]:
        values = [float(x) for x in vector]
        if len(values) != self.dim:
            raise ValueError(f"vector has {len(values)} dimensions, this memory stores {self.dim}")
        if not all(math.isfinite(x) for x in values):
            raise ValueError("vector contains NaN or infinity")
        return values


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector


def _matches(payload: dict[str, Any], vector_filter: VectorFilter | None) -> bool:
    if vector_filter is None:
        return True
    return all(_holds(payload, m) for m in vector_filter.must) and all(
        _within(payload, r) for r in vector_filter.ranges) and not any(
        _holds(payload, m) for m in vector_filter.must_not
    )


def _holds(payload: dict[str, Any], match: Match) -> bool:
    value = payload.get(match.key)
    values = value if isinstance(value, list) else [value]
    return any(_same(v, wanted) for v in values for wanted in match.any_of)


def _same(a: Any, b: Any) -> bool:
    """Equality as Qdrant sees it: a boolean never equals the integer 1 or 0."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _within(payload: dict[str, Any], r: Range) -> bool:
    value = payload.get(r.key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return (r.gte is None or value >= r.gte) and (r.lt is None or value < r.lt)

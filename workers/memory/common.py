"""What the Qdrant Edge and qdrant-client adapters share, so the two engines cannot drift apart:
collection naming, the string-id to UUID mapping, the payload round trip, vector checks and the
translation of a port `VectorFilter` into either engine's filter objects."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

import numpy as np

from selection.ports import (
    BOOL_FIELDS,
    COLLECTIONS,
    FLOAT_FIELDS,
    INDEXED_FIELDS,
    Match,
    VectorFilter,
    VectorHit,
    VectorPoint,
)

# Payload key that keeps the caller's string id beside the UUID Qdrant needs. Adapters strip it
# on the way out, so a payload round-trips unchanged.
ID_KEY = "_id"

# Fixed forever: every stored point's UUID is derived from it, so changing it orphans all data.
_ID_NAMESPACE = uuid.UUID("5f0c6f3e-8f4b-4a59-9d53-3c1f6a1e2b7d")


C = TypeVar("C")  # an engine's condition type
F = TypeVar("F", covariant=True)  # an engine's filter type


class VectorMemoryUnavailable(RuntimeError):
    """The vector store cannot be opened or reached; the message says which store and why."""


class PointLike(Protocol):
    """What both engines return for a stored point (Qdrant Edge `Record`/`ScoredPoint`, client models)."""

    @property
    def id(self) -> Any: ...

    @property
    def payload(self) -> dict[str, Any] | None: ...


def collection_name(prefix: str, collection: str) -> str:
    """The engine-side name; refusing unknown collections here catches typos before they create stores."""
    if collection not in COLLECTIONS:
        raise ValueError(f"unknown collection {collection!r}; expected one of {', '.join(COLLECTIONS)}")
    return prefix + collection


def indexed_fields(collection: str) -> list[tuple[str, Literal["bool", "float", "keyword"]]]:
    """The payload fields to index in `collection`, each with the kind of index it needs."""
    return [(field, "bool" if field in BOOL_FIELDS else "float" if field in FLOAT_FIELDS else "keyword")
            for field in INDEXED_FIELDS[collection]]


def check_order_field(collection: str, field: str | None) -> None:
    """An ordered scroll needs the field's float index (a Qdrant server refuses one without it)."""
    orderable = sorted(FLOAT_FIELDS.intersection(INDEXED_FIELDS.get(collection, ())))
    if field is not None and field not in orderable:
        raise ValueError(f"a scroll of {collection!r} can be ordered by {orderable} only, not {field!r}")


def point_uuid(point_id: str) -> str:
    """Qdrant accepts only UUIDs or integers as ids; uuid5 makes re-upserting an id replace its point."""
    return str(uuid.uuid5(_ID_NAMESPACE, point_id))


def stored_payload(point: VectorPoint) -> dict[str, Any]:
    if ID_KEY in point.payload:
        raise ValueError(f"payload key {ID_KEY!r} is reserved for the point id (point {point.id!r})")
    return {**point.payload, ID_KEY: point.id}


def payload_keys(fields: Sequence[str] | None) -> bool | list[str]:
    """The engines' `with_payload` for the keys a caller reads, and the point id kept in the payload."""
    return True if fields is None else [*dict.fromkeys(fields), ID_KEY]


def _split(stored: PointLike) -> tuple[str, dict[str, Any]]:
    payload = dict(stored.payload or {})
    # A point written by something other than this adapter has no ID_KEY; its UUID is the best id.
    # (`stored.id` builds a UUID object: only asked for when needed, it showed in selection's profile.)
    return str(payload.pop(ID_KEY) if ID_KEY in payload else stored.id), payload


def to_hit(scored: PointLike, score: float) -> VectorHit:
    point_id, payload = _split(scored)
    return VectorHit(point_id, float(score), payload)


def to_point(record: PointLike, vector: Sequence[float] | None) -> VectorPoint:
    point_id, payload = _split(record)
    return VectorPoint(id=point_id, vector=list(vector or []), payload=payload)


def check_vector(vector: Sequence[float], dim: int) -> list[float]:
    """Fail with a readable error here: the engines either reject a wrong size cryptically or,
    for NaN and infinities, store a point that then poisons every search."""
    # A plan's vector is a list of floats, checked on each of its searches: the sum is NaN or
    # infinite when any element is (2 us; converting to numpy and back took 16 us).
    values = vector if type(vector) is list else np.asarray(vector, dtype=np.float64).tolist()
    if len(values) != dim:
        raise ValueError(f"vector has {len(values)} dimensions, this memory stores {dim}")
    try:
        total = sum(values)
    except TypeError:
        raise ValueError("vector holds values that are not numbers") from None
    if not math.isfinite(total):
        raise ValueError("vector contains NaN or infinity (or values too large to add up)")
    return values


def batched(items: Sequence[VectorPoint], size: int) -> Iterator[Sequence[VectorPoint]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def scroll_pages(
    fetch: Callable[[Any, int], tuple[list[VectorPoint], Any]], limit: int
) -> list[VectorPoint]:
    """Collect up to `limit` points from an engine that may return fewer per call than asked.

    `fetch(offset, n)` returns a page and the next offset (None at the end)."""
    points: list[VectorPoint] = []
    offset: Any = None
    while len(points) < limit:
        page, offset = fetch(offset, limit - len(points))
        points.extend(page)
        if offset is None or not page:
            break
    return points[:limit]


def scroll_descending(fetch: Callable[[float | None, int], list[VectorPoint]], field: str,
                      limit: int) -> list[VectorPoint]:
    """Collect up to `limit` points, highest `field` first, from an engine whose ordered scroll
    pages by value: `fetch(start_from, n)` returns up to n points whose value is at most
    `start_from`, highest first, and may answer fewer than asked before the end. A page starts at
    the last value seen, so the points of that value already taken are asked for again and
    skipped; the scroll ends at a page with nothing new."""
    points: list[VectorPoint] = []
    seen: set[str] = set()
    start: float | None = None
    while len(points) < limit:
        at_start = 0 if start is None else sum(1 for p in points if p.payload.get(field) == start)
        asked = limit - len(points) + at_start
        page = fetch(start, asked)
        new = [p for p in page if p.id not in seen]
        points.extend(new)
        seen.update(p.id for p in new)
        if not new:  # the end (or more points of one value than a page holds: the rest of them are left)
            break
        start = float(points[-1].payload[field])
    return points[:limit]


class ConditionBuilder(Protocol, Generic[C, F]):
    """How one engine spells the five shapes a port filter needs."""

    def value(self, key: str, value: str | int | bool) -> C: ...

    def range(self, key: str, gte: float | None, lt: float | None) -> C: ...

    def any(self, key: str, values: list[str] | list[int]) -> C: ...

    def either(self, conditions: list[C]) -> C: ...

    def filter(self, must: list[C], must_not: list[C]) -> F: ...


@overload
def translate_filter(vector_filter: VectorFilter, build: ConditionBuilder[C, F]) -> F: ...


@overload
def translate_filter(vector_filter: VectorFilter | None, build: ConditionBuilder[C, F]) -> F | None: ...


def translate_filter(vector_filter: VectorFilter | None, build: ConditionBuilder[C, F]) -> F | None:
    """A `Match` is "the field equals any of these values (a list field: contains one of them)";
    the matches of `must` and the `ranges` are ANDed and none of `must_not` may hold. An empty `VectorFilter`
    becomes an empty engine filter, which matches every point."""
    if vector_filter is None:
        return None
    return build.filter(
        [*(_condition(m, build) for m in vector_filter.must),
         *(build.range(r.key, r.gte, r.lt) for r in vector_filter.ranges)],
        [_condition(m, build) for m in vector_filter.must_not],
    )


def _condition(match: Match, build: ConditionBuilder[C, F]) -> C:
    values = match.any_of
    if len(values) == 1:
        return build.value(match.key, values[0])
    # Qdrant's MatchAny takes only all-string or all-integer lists (an empty one matches nothing);
    # booleans and mixed types need one exact match per value, any of which may hold.
    if _all_of_type(values, str) or _all_of_type(values, int):
        return build.any(match.key, values)  # type: ignore[arg-type]
    return build.either([build.value(match.key, v) for v in values])


def _all_of_type(values: Iterable[object], kind: type) -> bool:
    return all(type(v) is kind for v in values)  # `type is`: True must not count as an int

"""The vector memory on qdrant-client: a Qdrant server by URL, so every queue can scale on its own,
or the client's local mode (a path, or ":memory:") where tests need no server."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

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

# Points per request: 256 x 384 floats as JSON stays far below the server's 32 MB request limit.
UPSERT_BATCH = 256


class _ClientConditions:
    def value(self, key: str, value: str | int | bool) -> models.FieldCondition:
        return models.FieldCondition(key=key, match=models.MatchValue(value=value))

    def any(self, key: str, values: list[str] | list[int]) -> models.FieldCondition:
        return models.FieldCondition(key=key, match=models.MatchAny(any=values))

    def range(self, key: str, gte: float | None, lt: float | None) -> models.FieldCondition:
        return models.FieldCondition(key=key, range=models.Range(gte=gte, lt=lt))

    def either(self, conditions: list[models.FieldCondition]) -> models.Filter:
        return models.Filter(should=[*conditions])

    def filter(self, must: list[Any], must_not: list[Any]) -> models.Filter:
        return models.Filter(must=must or None, must_not=must_not or None)


_CONDITIONS = _ClientConditions()
_INDEX_KINDS = {"bool": models.PayloadSchemaType.BOOL, "float": models.PayloadSchemaType.FLOAT,
                "keyword": models.PayloadSchemaType.KEYWORD}


class ClientVectorMemory:
    """VectorMemory on qdrant-client; collections are `prefix + name`.

    Give `url` for a server, `path` for local mode on disk (":memory:" for RAM only), or a ready
    `client` to share one connection between prefixes (the caller then closes it). Collections are
    created on first use too, so a memory is usable again after `drop_all`."""

    def __init__(
        self,
        prefix: str,
        url: str | None = None,
        path: str | None = None,
        api_key: str | None = None,
        dim: int = 384,
        client: QdrantClient | None = None,
    ) -> None:
        self.prefix = check_collection_prefix(prefix)
        self.dim = dim
        self._owns_client = client is None
        self._client = client if client is not None else _connect(url, path, api_key)
        options = self._client.init_options
        self._local = options.get("path") is not None or options.get("location") == ":memory:"
        # Local mode keeps collections in plain Python structures that are not thread-safe; the
        # server client is, and a lock would only serialise its requests.
        self._guard: AbstractContextManager[Any] = threading.Lock() if self._local else nullcontext()
        self._ready: set[str] = set()

    def ensure_collections(self) -> None:
        for collection in COLLECTIONS:
            self._name(collection)

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        name = self._name(collection)
        for chunk in batched(points, UPSERT_BATCH):
            structs = [
                models.PointStruct(
                    id=point_uuid(p.id), vector=check_vector(p.vector, self.dim), payload=stored_payload(p)
                )
                for p in chunk
            ]
            with self._guard:
                self._client.upsert(name, points=structs, wait=True)

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        limit: int = 10,
        filter: VectorFilter | None = None,
        score_threshold: float | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[VectorHit]:
        name = self._name(collection)
        query = check_vector(vector, self.dim)
        with self._guard:
            response = self._client.query_points(
                name,
                query=query,
                query_filter=translate_filter(filter, _CONDITIONS),
                limit=limit,
                score_threshold=score_threshold,
                with_payload=payload_keys(fields),
            )
        return [to_hit(p, p.score) for p in response.points]

    def scroll(self, collection: str, filter: VectorFilter | None = None, limit: int = 1000,
               descending_by: str | None = None) -> list[VectorPoint]:
        check_order_field(collection, descending_by)
        name = self._name(collection)
        condition = translate_filter(filter, _CONDITIONS)
        if descending_by is not None:
            def ordered(start: float | None, n: int) -> list[VectorPoint]:
                order = models.OrderBy(key=descending_by, direction=models.Direction.DESC, start_from=start)
                with self._guard:
                    records, _ = self._client.scroll(name, scroll_filter=condition, limit=n, order_by=order,
                                                     with_payload=True, with_vectors=True)
                return [to_point(r, r.vector) for r in records]  # type: ignore[arg-type]

            return scroll_descending(ordered, descending_by, limit)

        def fetch(offset: Any, n: int) -> tuple[list[VectorPoint], Any]:
            with self._guard:
                records, next_offset = self._client.scroll(
                    name, scroll_filter=condition, limit=n, offset=offset, with_payload=True, with_vectors=True
                )
            return [to_point(r, r.vector) for r in records], next_offset  # type: ignore[arg-type]

        return scroll_pages(fetch, limit)

    def count(self, collection: str, filter: VectorFilter | None = None) -> int:
        name = self._name(collection)
        with self._guard:
            return self._client.count(name, count_filter=translate_filter(filter, _CONDITIONS), exact=True).count

    def delete(self, collection: str, filter: VectorFilter) -> None:
        name = self._name(collection)
        selector = models.FilterSelector(filter=translate_filter(filter, _CONDITIONS))
        with self._guard:
            self._client.delete(name, points_selector=selector, wait=True)

    def drop_all(self) -> None:
        """Delete this prefix's collections; collections of other prefixes stay."""
        with self._guard:
            for collection in COLLECTIONS:
                self._client.delete_collection(collection_name(self.prefix, collection))
            self._ready.clear()

    def close(self) -> None:
        if self._owns_client:
            with self._guard:
                self._client.close()

    def _name(self, collection: str) -> str:
        name = collection_name(self.prefix, collection)
        if name not in self._ready:
            with self._guard:
                self._create(collection, name)
            self._ready.add(name)
        return name

    def _create(self, collection: str, name: str) -> None:
        """Create the collection and its payload indexes unless they exist; safe to race with
        other workers doing the same against one server."""
        if self._client.collection_exists(name):
            size = self._client.get_collection(name).config.params.vectors.size  # type: ignore[union-attr]
            if size != self.dim:
                raise VectorMemoryUnavailable(
                    f"Qdrant collection {name} stores {size}-dim vectors, this memory needs {self.dim}; "
                    "drop it or use another FITTEST_COLLECTION_PREFIX"
                )
        else:
            try:
                self._client.create_collection(
                    name, vectors_config=models.VectorParams(size=self.dim, distance=models.Distance.COSINE)
                )
            except UnexpectedResponse as exc:
                if exc.status_code != 409:  # 409: another worker created it first
                    raise
        if self._local:
            return  # local mode ignores payload indexes and warns about each one
        for field, kind in indexed_fields(collection):
            self._client.create_payload_index(name, field, _INDEX_KINDS[kind], wait=True)


def _connect(url: str | None, path: str | None, api_key: str | None) -> QdrantClient:
    if url:
        return QdrantClient(url=url, api_key=api_key, timeout=10)
    if path == ":memory:":
        return QdrantClient(location=":memory:")
    if path:
        try:
            return QdrantClient(path=path)
        except RuntimeError as exc:  # the storage folder is locked by another client
            raise VectorMemoryUnavailable(f"cannot open Qdrant local storage {path}: {exc}") from exc
    raise ValueError("ClientVectorMemory needs a url (Qdrant server) or a path (local mode, or ':memory:')")

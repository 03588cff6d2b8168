"""A small thread-safe TTL cache with LRU eviction, for the evidence of repeated selections.

The caller puts the state version in the key (`StateVersions.state`), so any change selection ranks
by (quality, promotions, weights, breakers…) makes every older entry unreachable at once; the TTL bounds how stale anything else can be (vector
memory that grew meanwhile). cachetools' TTLCache keeps the entries (expiry, least recently used
evicted first past `maxsize`); this adds the lock the selector's threads need, and a TTL or size of
0 turning the cache off, as the setting does. `VersionedValue` is the one-value kind, kept by
version alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import cachetools

V = TypeVar("V")


class TTLCache(Generic[V]):
    def __init__(self, ttl_s: float, maxsize: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self._items: cachetools.TTLCache[Hashable, V] | None = (
            cachetools.TTLCache(maxsize, ttl_s, timer=clock) if ttl_s > 0 and maxsize > 0 else None)
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        if self._items is None:
            return None
        with self._lock:
            return self._items.get(key)

    def put(self, key: Hashable, value: V) -> None:
        if self._items is None:
            return
        with self._lock:
            self._items[key] = value

    def clear(self) -> None:
        """Forget everything: what was cached cannot know of a change the state version does not
        count (a tool version added to the registry)."""
        if self._items is not None:
            with self._lock:
                self._items.clear()

    def __len__(self) -> int:
        if self._items is None:
            return 0
        with self._lock:
            self._items.expire()
            return len(self._items)


class VersionedValue(Generic[V]):
    """One value read from the state store, kept while the version it was read at holds (the
    selector's weights, promotions and newcomers, by the state versions each change moves; its tool
    classifier, by the revision the weights name). Reading only when the version moved keeps the
    store out of most calls; `get` with no version (none read for this call) reads through and
    keeps nothing, since nothing would tell when what it read went stale."""

    def __init__(self) -> None:
        self._held: tuple[Hashable, V] | None = None

    def get(self, version: Hashable | None, read: Callable[[], V]) -> V:
        if version is None:
            return read()
        held = self._held
        if held is None or held[0] != version:
            held = (version, read())
            self._held = held
        return held[1]

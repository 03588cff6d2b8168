"""The selection cache: entries expire after the TTL, the least recently used go first."""

from __future__ import annotations

from selection.cache import TTLCache


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    cache: TTLCache[str] = TTLCache(30.0, clock=clock)
    cache.put(("scenario", 1), "evidence")
    clock.t = 29.9
    assert cache.get(("scenario", 1)) == "evidence"
    assert cache.get(("scenario", 2)) is None  # another state version: another key
    clock.t = 30.0
    assert cache.get(("scenario", 1)) is None


def test_least_recently_used_is_evicted_and_zero_ttl_disables() -> None:
    cache: TTLCache[int] = TTLCache(60.0, maxsize=2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    off: TTLCache[int] = TTLCache(0.0)
    off.put("a", 1)
    assert off.get("a") is None and len(off) == 0

"""Paging an ordered scroll by value, as the Qdrant engines do: a page starts at the last value seen,
so the points of that value already taken come again and must be skipped, not counted twice."""

from __future__ import annotations

from selection.ports import VectorPoint
from workers.memory.common import scroll_descending

# 250 points, values 0..49 five times each, stored in no particular order
POINTS = [VectorPoint(id=f"p{i}", vector=[1.0], payload={"timestamp": float((i * 7) % 50)}) for i in range(250)]


def engine(page_size: int):
    """An ordered scroll that answers at most `page_size` points a call, highest first, ties by id."""
    calls: list[tuple[float | None, int]] = []
    ordered = sorted(POINTS, key=lambda p: (-p.payload["timestamp"], p.id))

    def fetch(start: float | None, n: int) -> list[VectorPoint]:
        calls.append((start, n))
        return [p for p in ordered if start is None or p.payload["timestamp"] <= start][:min(n, page_size)]

    return fetch, calls


def test_pages_are_joined_without_repeats_or_gaps() -> None:
    fetch, calls = engine(page_size=12)  # not a multiple of the 5 points a value has
    got = scroll_descending(fetch, "timestamp", limit=100)
    assert len(got) == 100 and len({p.id for p in got}) == 100
    values = [p.payload["timestamp"] for p in got]
    assert values == sorted(values, reverse=True) and values[0] == 49.0 and values[-1] == 30.0
    assert len(calls) > 1


def test_it_stops_at_the_end() -> None:
    fetch, _ = engine(page_size=40)
    assert len({p.id for p in scroll_descending(fetch, "timestamp", limit=1000)}) == 250
    fetch, calls = engine(page_size=1000)
    assert len(scroll_descending(fetch, "timestamp", limit=1000)) == 250
    assert len(calls) == 2  # the 2nd page finds nothing new

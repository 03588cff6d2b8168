"""The allocator's pages a burst of short-lived objects left are given back (workers/heap.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from workers.heap import give_back


def anonymous_mb() -> int:
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) // 1024 for line in status.splitlines() if line.startswith("RssAnon"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the process's memory from /proc")
def test_the_memory_a_freed_burst_of_vectors_held_goes_back_to_the_system() -> None:
    """QA 62b: the memory worker grew at every classifier refit and never shrank. A burst like a
    refit's (vectors read as Python floats, on a worker thread, a few kept) leaves its pages with
    glibc's allocator until they are given back."""
    kept: list[list[float]] = []

    def burst() -> None:
        vectors = [[float(i)] * 384 for i in range(30_000)]  # ~90 MB of lists
        kept.extend(vectors[::500])  # what outlives the burst pins pages all over the heap
        del vectors

    thread = threading.Thread(target=burst)
    thread.start()
    thread.join()
    held = anonymous_mb()
    assert give_back(), "glibc's malloc_trim is not there"
    assert anonymous_mb() < held - 50, "the burst's freed pages were not given back"
    assert len(kept) == 60

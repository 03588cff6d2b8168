"""Garbage-collector settings for a process that selects tools.

A memory-side worker holds a large, long-lived heap (the model's session, the registry, the tool
index, the caches) and allocates many short-lived objects per call (search hits, evidence,
plans). With CPython's defaults a full collection walks that whole heap every few thousand calls,
and a young one runs every 700 allocations: in the selection bench the slowest 2 % of selections
took 56-61 ms, of which Redis round trips of 5-7 ms that normally take 0.9 ms, all of it the
collector. Moving what exists once the services are loaded out of the collector's sight
(`gc.freeze`) and collecting the young generation less often took those selections to ~30 ms.

A refit of the tool classifier reads thousands of stored vectors as Python floats at once (8,000
successes: 118 MB at its peak), all freed when it ends; glibc's allocator keeps their pages, and a
refit that reads more successes than the last raises what it keeps (QA 62b: the memory worker grew
15-41 MB at each refit of a soak, 319 to 676 MB in 52 minutes). `give_back` returns them after such
a burst: 16 refits of 8,000 successes on a pool of 4 threads left 239-261 MB of anonymous memory
without it, 161-183 MB with it; on a new thread each, 341-824 MB of RSS without it, 263-392 MB with.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
from collections.abc import Callable

# Young collections every 20,000 net allocations instead of 700; the older generations after 20 and
# 50 younger ones. Garbage in reference cycles lives a little longer; everything else is freed by
# reference counting as before.
THRESHOLDS = (20_000, 20, 50)

_lock = threading.Lock()


def settle() -> None:
    """Collect once, freeze what survives (the services just loaded) and raise the thresholds.

    Called after a process loads its services; calling it again freezes what was loaded since."""
    with _lock:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*THRESHOLDS)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "malloc_trim", None)
    except OSError:
        return None


_trim = _malloc_trim()


def give_back() -> bool:
    """Return the allocator's free pages to the system after a burst of short-lived objects;
    whether it could (only glibc can be asked)."""
    if _trim is None:
        return False
    _trim(0)
    return True

"""Garbage-collector settings for a process that selects tools.

A memory-side worker holds a large, long-lived heap (the model's session, the registry, the tool
index, the caches) and allocates many short-lived objects per call (search hits, evidence,
plans). With CPython's defaults a full collection walks that whole heap every few thousand calls,
and a young one runs every 700 allocations: in the selection bench the slowest 2 % of selections
took 56-61 ms, of which Redis round trips of 5-7 ms that normally take 0.9 ms, all of it the
collector. Moving what exists once the services are loaded out of the collector's sight
(`gc.freeze`) and collecting the young generation less often took those selections to ~30 ms.
"""

from __future__ import annotations

import gc
import threading

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

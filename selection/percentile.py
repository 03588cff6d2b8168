"""The nearest-rank percentile, as stats_and_breakers.lua takes the p95 the adaptive timeout is
made of (selection/timeouts.py) and as every bench reports its p99, so that both read the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank: a value that was seen, never an interpolation."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = math.ceil(round(q * len(ordered), 9))  # the round: 0.07 * 100 is 7.000000000000001
    return ordered[min(len(ordered) - 1, max(0, rank - 1))]

"""The hard timeout of one attempt, adapted to how long a tool version really takes.

A tool's declared `timeout_s` is its author's estimate of the worst case. Once the tool has run
a few times, its recent run times say more: a tool that always answers in 80 ms and now hangs
should be cut off in well under its declared 10 s, so the call falls back quickly; a tool that is
in practice a little slower than its author thought should get that room instead of failing.
"""

from __future__ import annotations

MIN_RUNS = 5  # fewer recent runs than this say too little; the declared timeout holds
HEADROOM = 1.2  # p95 × 1.2: a run as slow as the slowest usual one still finishes
MAX_GROWTH = 2.0  # recent runs may stretch the declared timeout at most this much


def timeout_from_p95(p95_ms: float | None, runs: int, declared_s: float, min_s: float, max_s: float,
                     *, floor_s: float = 0.0) -> float:
    """Seconds to allow the next attempt of a tool version, from a summary of its recent runs (their
    count and 95th percentile, in ms) as the state store hands it to selection, so that the timeout
    travels in the call's plan.

    The rule:
    - fewer than 5 recent run times: the declared timeout;
    - otherwise p95 × 1.2 of them, but at most twice the declared timeout: it can shrink a timeout
      to what the tool really needs, or grow it, but the author's figure still bounds it, so a
      "longer timeout" evolution of `timeout_s` keeps its meaning;
    - either way within the operator's bounds [min_s, max_s], min_s winning over everything
      (a timeout below process start-up time only produces false timeouts);
    - `floor_s`: the least this version is given whatever its recent runs say (`earned_floor`).

    The runs include those that timed out, at their elapsed time: otherwise a tool that keeps
    timing out would only ever be judged by its fast runs and its timeout would never grow."""
    if declared_s <= 0:
        raise ValueError(f"declared timeout must be positive, got {declared_s}")
    if min_s <= 0 or min_s > max_s:
        raise ValueError(f"bounds must satisfy 0 < min_s <= max_s, got [{min_s}, {max_s}]")
    if runs < MIN_RUNS or p95_ms is None:
        chosen = declared_s
    else:
        chosen = max(min(p95_ms / 1000.0 * HEADROOM, declared_s * MAX_GROWTH), floor_s)
    return max(min_s, min(chosen, max_s))


def earned_floor(declared_s: float, parent_declared_s: float | None, side_effects: bool = False) -> float:
    """The timeout a version keeps however fast its recent runs were: its declared one when an
    evolution raised it above its parent's (the timeout mutator's "longer timeout"), or when it has
    side effects; else none.

    Why: a version of a longer timeout exists because some inputs need that time. Its usual inputs
    may be fast, and p95 x 1.2 of fast runs would cut the slow ones off again, undoing the evolution
    and evolving the next version for the same failure (QA saw 1s -> 4s -> 16s, each cut to 0.5 s).
    A tool with side effects cut off mid-run may have done its job or half of it, and nothing may
    run that job again (selection/call_endings.py `effect_unknown`): only its author's worst case
    cuts it off (QA 63a: a payment tool declared 10 s, cut at 0.72 s after five 50 ms runs)."""
    if side_effects or (parent_declared_s is not None and declared_s > parent_declared_s):
        return declared_s
    return 0.0

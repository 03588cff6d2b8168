"""The adaptive timeout rule (see selection.timeouts.timeout_from_p95)."""

from __future__ import annotations

import pytest

from selection.percentile import percentile
from selection.timeouts import earned_floor, timeout_from_p95


def adaptive_timeout(recent_ms: list[float], declared_s: float, min_s: float, max_s: float) -> float:
    """The timeout for these recent runs, summarised as the state store summarises them (their
    count and nearest-rank p95: stats_and_breakers.lua)."""
    return timeout_from_p95(percentile(recent_ms, 0.95) if recent_ms else None, len(recent_ms), declared_s, min_s, max_s)


def test_declared_timeout_until_five_runs_are_known() -> None:
    assert adaptive_timeout([], 10.0, 0.5, 120.0) == 10.0
    assert adaptive_timeout([100, 100, 100, 100], 10.0, 0.5, 120.0) == 10.0


def test_shrinks_to_p95_times_1_2_once_five_runs_are_known() -> None:
    # 20 runs: nearest-rank p95 is the 19th smallest value
    runs = [1000.0] * 18 + [2000.0, 9000.0]
    assert percentile(runs, 0.95) == 2000.0
    assert adaptive_timeout(runs, 10.0, 0.5, 120.0) == pytest.approx(2.4)


def test_few_runs_use_their_maximum() -> None:
    assert adaptive_timeout([800, 900, 1000, 1100, 1500], 10.0, 0.5, 120.0) == pytest.approx(1.8)


def test_grows_past_declared_but_at_most_twice_it() -> None:
    assert adaptive_timeout([3000.0] * 10, 3.0, 0.5, 120.0) == pytest.approx(3.6)
    assert adaptive_timeout([60_000.0] * 10, 3.0, 0.5, 120.0) == pytest.approx(6.0)


def test_operator_bounds_hold() -> None:
    assert adaptive_timeout([5.0] * 10, 10.0, 0.5, 120.0) == 0.5  # fast tool: floor
    assert adaptive_timeout([], 300.0, 0.5, 120.0) == 120.0  # declared above the ceiling
    assert adaptive_timeout([], 0.1, 0.5, 120.0) == 0.5  # declared below the floor
    assert adaptive_timeout([100_000.0] * 10, 100.0, 0.5, 60.0) == 60.0


@pytest.mark.parametrize(("declared", "lo", "hi"), [(0.0, 0.5, 1.0), (1.0, 0.0, 1.0), (1.0, 2.0, 1.0)])
def test_bad_arguments_are_refused(declared: float, lo: float, hi: float) -> None:
    with pytest.raises(ValueError):
        adaptive_timeout([], declared, lo, hi)


def test_a_timeout_an_evolution_raised_is_kept_however_fast_the_usual_runs_are() -> None:
    """The timeout mutator gave 1 s -> 4 s for inputs that take 2.5 s; eight fast calls later,
    p95 x 1.2 would give 0.5 s and cut those inputs off again (QA)."""
    fast = timeout_from_p95(12.0, 8, 4.0, 0.5, 120.0)
    assert fast == 0.5
    assert earned_floor(4.0, 1.0) == 4.0
    assert timeout_from_p95(12.0, 8, 4.0, 0.5, 120.0, floor_s=earned_floor(4.0, 1.0)) == 4.0
    assert timeout_from_p95(3000.0, 8, 4.0, 0.5, 120.0, floor_s=4.0) == pytest.approx(4.0)  # slower runs still grow it
    assert timeout_from_p95(6000.0, 8, 4.0, 0.5, 120.0, floor_s=4.0) == pytest.approx(7.2)
    assert earned_floor(4.0, 4.0) == earned_floor(4.0, None) == 0.0  # same as its parent's, or an original: no floor


def test_a_tool_with_side_effects_is_cut_off_only_past_its_declared_timeout() -> None:
    """QA 63a: a payment tool declared 10 s, five 50 ms runs, then cut at 0.72 s after its write; the
    call ran it again. Its recent runs may grow its timeout, never shrink it below the author's."""
    floor = earned_floor(10.0, None, side_effects=True)
    assert floor == 10.0
    assert timeout_from_p95(50.0, 6, 10.0, 0.5, 120.0, floor_s=floor) == 10.0
    assert timeout_from_p95(12_000.0, 6, 10.0, 0.5, 120.0, floor_s=floor) == pytest.approx(14.4)
    assert timeout_from_p95(50.0, 6, 10.0, 0.5, 120.0, floor_s=earned_floor(10.0, None)) == 0.5  # without: cut to the bound

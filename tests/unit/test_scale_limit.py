"""The vector count past which `fittest bench scale` tells operators to run a Qdrant server."""

from workers.bench.scale import Cell, _summarise


def _cells(p99_by_level: dict[int, list[float]]) -> list[Cell]:
    return [Cell(store="edge", tools=tools, vectors=vectors, queries=200, p50_ms=p99 / 2, p99_ms=p99,
                 cpu_p50_ms=1.0, cpu_p99_ms=1.0, mean_candidates=8.0)
            for vectors, row in p99_by_level.items() for tools, p99 in zip((10, 1000, 10000), row, strict=True)]


def _limit(p99_by_level: dict[int, list[float]]) -> int | None:
    levels = sorted(p99_by_level)
    return _summarise(_cells(p99_by_level), [10, 1000, 10000], levels, 200, [], {}).server_advised_above


def test_the_limit_is_the_last_level_within_target_before_the_levels_that_exceed_it() -> None:
    assert _limit({1_000: [2, 3, 4], 10_000: [2, 4, 5], 100_000: [5, 7, 6], 1_000_000: [22, 25, 11]}) == 100_000
    assert _limit({1_000: [2, 3, 4], 10_000: [2, 12, 5], 100_000: [5, 13, 6]}) == 1_000


def test_one_slow_cell_at_a_small_level_does_not_hide_the_limit() -> None:
    assert _limit({1_000: [2, 3, 10.4], 10_000: [2, 4, 5], 100_000: [5, 7, 6], 1_000_000: [22, 25, 11]}) == 100_000


def test_no_limit_when_the_largest_level_is_within_target_or_no_level_is() -> None:
    assert _limit({1_000: [2, 3, 4], 100_000: [5, 7, 6]}) is None
    assert _limit({1_000: [2, 3, 12], 100_000: [5, 7, 6]}) is None
    assert _limit({1_000: [11, 12, 13], 100_000: [15, 17, 16]}) is None

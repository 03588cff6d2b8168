"""The nearest-rank percentile every bench reports."""

from selection.percentile import percentile


def test_nearest_rank_is_the_smallest_value_with_q_of_the_values_at_or_below_it() -> None:
    values: list[float] = list(range(1, 301))
    assert percentile(values, 0.99) == 297  # 1 % of 300 values (3) lie above the p99
    assert percentile(list(range(1, 101)), 0.99) == 99  # not the maximum
    assert percentile(list(range(1, 101)), 0.07) == 7
    assert percentile(list(range(1, 101)), 0.5) == 50
    assert percentile([4.0, 1.0, 3.0], 1.0) == 4.0 and percentile([5.0], 0.01) == 5.0
    assert percentile([], 0.5) == 0.0

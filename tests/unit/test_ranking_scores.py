"""How the supervised reference counts a ranking: as the selection bench counts its attempts."""

from __future__ import annotations

import numpy as np

from workers.bench.supervised import ranking_scores


def test_places_become_top1_top5_and_attempts() -> None:
    # 7 tools; the right tool (0) is placed 1st, 2nd, 5th and 7th in the four queries
    scores = np.array([
        [9, 1, 1, 1, 1, 1, 1],
        [8, 9, 1, 1, 1, 1, 1],
        [5, 9, 8, 7, 6, 1, 1],
        [1, 9, 8, 7, 6, 5, 4],
    ], dtype=np.float32)
    result = ranking_scores(scores, np.zeros(4, dtype=int))
    assert result.top1 == 0.25
    assert result.top5 == 0.75
    assert result.mean_attempts == (1 + 2 + 5 + 5) / 4  # not among the first 5: 5 attempts, as the bench counts


def test_a_tie_goes_to_the_right_tool() -> None:
    result = ranking_scores(np.array([[3.0, 3.0, 1.0]]), np.array([1]))
    assert result.top1 == 1.0 and result.mean_attempts == 1.0

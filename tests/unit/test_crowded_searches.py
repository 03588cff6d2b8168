"""selection/crowded.py `with_the_crowded_out`: a search full of repeats of the scenario is completed
with the tools it left out, and only then (pure logic: the search is a stand-in)."""

from __future__ import annotations

from selection.ports import VectorHit


def hits(tool: str, n: int, score: float, start: int = 0) -> list[VectorHit]:
    return [VectorHit(f"{tool}:{i}", score, {"tool": tool}) for i in range(start, start + n)]


def test_a_search_full_of_repeats_is_searched_again_among_the_tools_it_left_out() -> None:
    from selection.crowded import with_the_crowded_out

    asked: list[list[str]] = []

    def search(among: list[str]) -> list[VectorHit]:
        asked.append(among)
        return hits("a@1", 4, 1.0) + hits("new@1", 5, 1.0)  # a@1's first 3 again, and one more

    crowded = hits("old@1", 29, 1.0) + hits("a@1", 3, 1.0)
    found = with_the_crowded_out(crowded, 32, ["old@1", "a@1", "new@1"], search)
    assert asked == [["a@1", "new@1"]]  # old@1 had its fair share and more; a@1 under it
    assert sum(h.payload["tool"] == "a@1" for h in found) == 4 and sum(h.payload["tool"] == "new@1" for h in found) == 5
    assert len({h.id for h in found}) == len(found)  # nothing counted twice


def test_a_search_that_is_not_full_or_not_all_repeats_is_left_as_it_is() -> None:
    from selection.crowded import with_the_crowded_out

    def search(among: list[str]) -> list[VectorHit]:
        raise AssertionError("searched again")

    assert len(with_the_crowded_out(hits("old@1", 20, 1.0), 32, ["old@1", "a@1"], search)) == 20
    varied = hits("old@1", 31, 1.0) + hits("old@1", 1, 0.8, start=31)  # the farthest is another job
    assert with_the_crowded_out(varied, 32, ["old@1", "a@1"], search) == varied

"""workers/tasks/feedback.py `likeliest_first`: the version a judgement's reply names as tried first
is the likeliest first place over several draws, not one draw (QA integrator 9)."""

from __future__ import annotations

from itertools import cycle
from types import SimpleNamespace
from typing import Any

from selection.manifest import ToolManifest
from selection.models import CallPlan, CallRequest, Candidate


def plans(*firsts: tuple[str, float], degraded: list[str] | None = None) -> Any:
    """A runtime whose selector's plans put each of `firsts` (key, probability of that first place)
    first in turn."""
    turns = cycle(firsts)

    def plan(request: CallRequest) -> CallPlan:
        key, p = next(turns)
        name, _, version = key.partition("@")
        manifest = ToolManifest(name=name, version=version, description=name, implementation={"kind": "http", "url": "http://x"})
        return CallPlan(request=request, candidates=[Candidate(key=key, manifest=manifest, score=1.0, probability=p)],
                        degraded=degraded or [])

    return SimpleNamespace(selector=SimpleNamespace(plan=plan))


def test_the_first_place_most_calls_give_is_named_whatever_one_draw_gave() -> None:
    from workers.tasks.feedback import drawn_plans, likeliest_first, ranked_in

    # a second opinion goes first on 25 % of the calls; the incumbent on the rest
    drawn = drawn_plans(plans(("fast_sort@1.0.0", 0.25), ("sort_numbers@1.0.0", 0.75)), "sort these numbers")
    assert drawn is not None
    first = likeliest_first(drawn)
    assert (first.key, first.probability) == ("sort_numbers@1.0.0", 0.75)
    ranked = ranked_in(drawn, "fast_sort@1.0.0")
    assert ranked is not None and ranked.probability == 0.25
    assert ranked_in(drawn, "other@1.0.0") is None
    assert drawn_plans(plans(("a@1.0.0", 0.5), degraded=["memory"]), "x") is None

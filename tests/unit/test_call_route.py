"""The route of a failed call's evolution (evolution/call_route.py): the one rule the evolver and
the execution worker both read, without any service."""

from __future__ import annotations

from typing import Any

from evolution.call_route import CallRoute, route_call
from selection.models import CallPlan, CallRequest, FailureClass, Promotion, ToolExecutionResult


def failed(tried: list[str], *, pinned: str | None = None, held_back: list[str] | None = None) -> CallPlan:
    """A call of `mean` whose versions `tried` all crashed."""
    request = CallRequest(scenario="average of numbers", input={"xs": []}, namespace="mean", version=pinned)
    attempts = [ToolExecutionResult(attempt_id=f"a{i}", call_id=request.call_id, tool="mean", version=v, success=False,
                                    error_class=FailureClass.crash, error_message="ZeroDivisionError")
                for i, v in enumerate(tried)]
    return CallPlan(request=request, candidates=[], attempts=attempts, held_back=held_back or [])


def promoted(version: str, parent: str | None = "1.0.0", **fields: Any) -> Promotion:
    return Promotion(namespace="mean", evolved_version=version, original_version="1.0.0", parent_version=parent, **fields)


ACTIVE_101 = promoted("1.0.1", status="active")
ROLLED_BACK_101 = promoted("1.0.1", status="rolled_back")  # the original is served again


def test_the_served_version_that_failed_is_evolved() -> None:
    assert route_call(failed(["1.0.0"]), "mean", "1.0.0", None, None, "1.0.0") == CallRoute("evolve", "1.0.0")
    assert route_call(failed(["1.0.1"]), "mean", "1.0.1", "1.0.1", ACTIVE_101, "1.0.0") == CallRoute("evolve", "1.0.1")
    assert route_call(failed(["1.0.0"]), "mean", "1.0.0", None, ROLLED_BACK_101, "1.0.0") == CallRoute("evolve", "1.0.0")


def test_a_version_promoted_since_or_not_tried_is_retried_instead() -> None:
    assert route_call(failed(["1.0.0"]), "mean", "1.0.0", None, ACTIVE_101, "1.0.0") == CallRoute("reused", "1.0.1")
    # promoted before the call, which still did not try it (another tool's attempts used up its turns)
    assert route_call(failed(["1.0.0"]), "mean", "1.0.0", "1.0.1", ACTIVE_101, "1.0.0") == CallRoute("reused", "1.0.1")
    # promoted, tried and failed, then another version promoted meanwhile: that one is new to the call
    assert route_call(failed(["1.0.1"]), "mean", "1.0.1", "1.0.1", promoted("1.0.2", "1.0.1"), "1.0.0") == CallRoute("reused", "1.0.2")


def test_a_call_that_failed_on_a_version_rolled_back_meanwhile_retries_with_the_one_served_and_evolves_nothing() -> None:
    """QA evolution H1: 1.0.1 rolled back to the original while a call ran it; the call's failure
    evolved 1.0.1, whose child went on trial against it, and 1.0.1 served 75 % of the calls again."""
    for prepared in ("1.0.1", None):
        assert route_call(failed(["1.0.1"]), "mean", "1.0.1", prepared, ROLLED_BACK_101, "1.0.0") == CallRoute("reused", "1.0.0")


def test_the_version_served_is_evolved_rather_than_another_the_call_failed_on_first() -> None:
    """QA recheck N1: a call ran 1.0.1, rolled back meanwhile, then 1.0.0, which failed too: 1.0.1
    was evolved, and its child went on trial against it."""
    assert route_call(failed(["1.0.1", "1.0.0"]), "mean", "1.0.1", None, ROLLED_BACK_101, "1.0.0") == CallRoute("evolve", "1.0.0")
    # a call without a namespace that tried an older fallback of mean first
    assert route_call(failed(["0.9.0", "1.0.1"]), "mean", "0.9.0", "1.0.1", ACTIVE_101, "1.0.0") == CallRoute("evolve", "1.0.1")


def test_a_served_version_held_back_by_its_breaker_is_the_one_evolved() -> None:
    plan = failed(["1.0.0"], held_back=["mean@1.0.1"])
    assert route_call(plan, "mean", "1.0.0", "1.0.1", ACTIVE_101, "1.0.0") == CallRoute("evolve", "1.0.1")
    plan = failed(["1.1.0"], held_back=["mean@1.0.0"])  # the original, served after a rollback
    assert route_call(plan, "mean", "1.1.0", None, ROLLED_BACK_101, "1.0.0") == CallRoute("evolve", "1.0.0")


def test_a_pinned_call_is_neither_retried_with_nor_evolves_another_version() -> None:
    assert route_call(failed(["1.0.0"], pinned="1.0.0"), "mean", "1.0.0", "1.0.1", ACTIVE_101, "1.0.0") == CallRoute("pinned", "1.0.1")
    # pinned to the version served: it is the one to mend
    assert route_call(failed(["1.0.1"], pinned="1.0.1"), "mean", "1.0.1", "1.0.1", ACTIVE_101, "1.0.0") == CallRoute("evolve", "1.0.1")
    # never promoted: the pinned version, the original, is evolved
    assert route_call(failed(["1.0.0"], pinned="1.0.0"), "mean", "1.0.0", None, None, "1.0.0") == CallRoute("evolve", "1.0.0")
    # QA evolution H1: pinned to the version rolled back, while the original serves
    assert route_call(failed(["1.0.1"], pinned="1.0.1"), "mean", "1.0.1", None, ROLLED_BACK_101, "1.0.0") == CallRoute("pinned", "1.0.0")

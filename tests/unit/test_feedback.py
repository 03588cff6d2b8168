"""Feedback score: similarity-weighted, age-decayed, capped at ±50; the outcome rules; the trend."""

from __future__ import annotations

from typing import Any

import pytest

from selection.feedback import (
    MANUAL_WEIGHT,
    MAX_POINTS,
    PERIOD_S,
    FeedbackEntry,
    FeedbackRecord,
    JudgedOutput,
    feedback_points,
    judged_outputs,
    outcome_value,
    points_by_tool,
    trend,
)
from selection.ports import VectorHit

DAY = 86_400.0
NOW = 1_000 * DAY


def entry(value: float, similarity: float, age_days: float = 0.0) -> FeedbackEntry:
    return FeedbackEntry(value=value, similarity=similarity, timestamp=NOW - age_days * DAY)


def points(*entries: FeedbackEntry, half_life_days: float = 14.0) -> float:
    return feedback_points(entries, half_life_days * DAY, now=NOW)


def test_similar_scenario_moves_the_score_more_than_a_dissimilar_one() -> None:
    assert points(entry(1.0, 0.95)) > points(entry(1.0, 0.7)) > 0
    assert points(entry(-1.0, 0.95)) < points(entry(-1.0, 0.7)) < 0
    assert points() == 0.0


def test_older_feedback_counts_less() -> None:
    fresh, old = points(entry(1.0, 0.9, 0)), points(entry(1.0, 0.9, 28))
    assert fresh > old > 0
    # Two half-lives: the entry's weight is a quarter.
    assert points(entry(1.0, 1.0, 28)) == pytest.approx(MAX_POINTS * 0.25 / 1.25)


def test_score_is_capped_at_50() -> None:
    many_good = [entry(1.0, 1.0) for _ in range(1000)]
    many_bad = [entry(-1.0, 1.0) for _ in range(1000)]
    assert 49.0 < points(*many_good) <= MAX_POINTS
    assert -MAX_POINTS <= points(*many_bad) < -49.0


def test_a_weaker_judgement_that_agrees_adds_to_the_score_and_one_of_strength_0_counts_for_nothing() -> None:
    """QA V: a negative of quality 0.2 after a negative of 1.0 raised the tool from -25 to -20 (a
    mean of levels), and a positive of quality 0 pulled a score towards 0."""
    strong = entry(-1.0, 1.0)
    assert points(strong) == pytest.approx(-25.0)
    assert points(strong, entry(-0.2, 1.0)) < points(strong) < points(strong, entry(0.2, 1.0)) < 0
    assert points(strong, entry(0.0, 1.0)) == points(strong)


def test_a_persons_judgement_outweighs_the_next_outcomes_of_the_version_it_judged() -> None:
    """QA V: a person's "wrong for this job" (no call named) was cancelled by the next call that
    the same version served: its success stored a +1 as heavy as the person's -1."""
    judged = FeedbackEntry(value=-1.0, similarity=1.0, timestamp=NOW, manual=True)
    assert points(judged, entry(1.0, 1.0)) < -25.0 < points(entry(-1.0, 1.0), entry(1.0, 1.0)) == 0.0
    served_on = [entry(1.0, 1.0) for _ in range(int(MANUAL_WEIGHT) - 1)]
    assert points(judged, *served_on) < 0  # still against it after MANUAL_WEIGHT - 1 more successes


def test_outcome_rules() -> None:
    assert outcome_value(True, 0.9) == 1.0  # strong positive
    assert outcome_value(True, 0.6) == 0.5  # positive
    assert outcome_value(True, 0.3) is None  # a success of a bad version teaches nothing
    assert outcome_value(False, 0.9) == -1.0


def test_manual_record_and_trend() -> None:
    good = FeedbackRecord.manual("t", "1.0.0", "do a thing", "positive", quality=0.8)
    bad = FeedbackRecord.manual("t", "1.0.0", "do a thing", "negative")
    assert (good.value, bad.value) == (0.8, -1.0)
    with pytest.raises(ValueError):
        FeedbackRecord.manual("t", "1.0.0", "x", "positive", quality=2.0)
    records = [good.model_copy(update={"timestamp": 0.5 * DAY}), bad.model_copy(update={"timestamp": 0.6 * DAY}),
               good.model_copy(update={"timestamp": 2.1 * DAY})]
    days = trend(records, DAY)
    assert [(t.count, t.positive, t.negative) for t in days] == [(2, 1, 1), (1, 1, 0)]
    assert days[0].mean_value == pytest.approx(-0.2 / 1.8, abs=1e-4)  # each vote as strong as its value
    # QA AD: three of quality 0 pulled a day of +1.00 to +0.40; they count for nothing, as in the scores
    nothing = FeedbackRecord.manual("t", "1.0.0", "do a thing", "negative", quality=0.0)
    assert str(nothing.value) == "0.0"  # not -0.0, which JSON and the tables print as a negative (QA selection F10)
    later = [good.model_copy(update={"timestamp": 2.2 * DAY})] + [nothing.model_copy(update={"timestamp": 2.3 * DAY})] * 3
    assert [(t.count, t.mean_value) for t in trend(records + later, DAY)][-1] == (5, 1.0)
    assert trend([nothing], DAY)[0].mean_value == 0.0
    # A person's judgement is MANUAL_WEIGHT outcomes' votes, as in the scores (QA ops: 8 judgements of a
    # version whose score was -34.7 read -0.08, counted as outcomes).
    outcome = FeedbackRecord(tool="t", version="1.0.0", scenario="do a thing", value=1.0, source="outcome")
    assert trend([bad, outcome, outcome], DAY)[0].mean_value == pytest.approx((2 - MANUAL_WEIGHT) / (2 + MANUAL_WEIGHT), abs=1e-4)
    back = FeedbackRecord.from_payload(good.id, good.payload())
    assert back == good


def test_the_trend_counts_per_hour_or_per_week_from_a_monday() -> None:
    """A team's first day of feedback is one row per day: per hour it shows when the votes turned."""
    import datetime

    monday = datetime.datetime(2026, 11, 23, tzinfo=datetime.timezone.utc).timestamp()
    vote = FeedbackRecord.manual("t", "1.0.0", "do a thing", "positive")
    at = [monday + 9.5 * 3600, monday + 9.9 * 3600, monday + 11.2 * 3600, monday + 6.9 * DAY, monday + 7.1 * DAY]
    records = [vote.model_copy(update={"timestamp": t}) for t in at]
    hours = trend(records, PERIOD_S["hour"])
    assert [(t.start - monday, t.count) for t in hours] == [(9 * 3600, 2), (11 * 3600, 1), (6 * DAY + 21 * 3600, 1), (7 * DAY + 2 * 3600, 1)]
    weeks = trend(records, PERIOD_S["week"])
    assert [(datetime.datetime.fromtimestamp(t.start, datetime.timezone.utc).strftime("%a %Y-%m-%d"), t.count)
            for t in weeks] == [("Mon 2026-11-23", 4), ("Mon 2026-11-30", 1)]
    assert [t.count for t in trend(records, PERIOD_S["day"])] == [3, 1, 1]


def test_a_judgement_of_a_calls_output_takes_the_place_of_that_calls_outcome_feedback() -> None:
    now = 1_000.0

    def hit(tool: str, value: float, source: str, call_id: str | None) -> VectorHit:
        return VectorHit(f"{source}:{tool}:{call_id}", 1.0, {"tool": tool, "value": value, "timestamp": now,
                                                              "source": source, "call_id": call_id})

    hits = [hit("a@1", 1.0, "outcome", "c1"), hit("a@1", 1.0, "outcome", "c2"), hit("b@1", 1.0, "outcome", "c1"),
            hit("a@1", -1.0, "manual", "c1")]
    points = points_by_tool(hits, half_life_s=86_400, now=now)
    # c2's success and the judgement of c1, which counts MANUAL_WEIGHT outcomes; c1's own success is gone
    assert points["a@1"] == pytest.approx(MAX_POINTS * (1 - MANUAL_WEIGHT) / (1 + MANUAL_WEIGHT + 1))
    assert points["b@1"] == 25.0  # another version's outcome of the same call stays
    unjudged = points_by_tool([*hits[:3], hit("a@1", -1.0, "manual", None)], half_life_s=86_400, now=now)
    assert unjudged["a@1"] == pytest.approx(MAX_POINTS * (2 - MANUAL_WEIGHT) / (2 + MANUAL_WEIGHT + 1))  # replaces nothing


def test_only_judgements_of_calls_outputs_count_as_outputs_judged() -> None:
    def hit(tool: str, value: float, source: str, call_id: str | None, score: float) -> VectorHit:
        return VectorHit(f"{source}:{tool}:{call_id}", score, {"tool": tool, "value": value, "source": source,
                                                                "call_id": call_id, "timestamp": score * 100})

    judged = judged_outputs([hit("a@1", -1.0, "manual", "c1", 0.9), hit("a@1", -0.4, "manual", "c2", 0.8),
                             hit("a@1", 1.0, "manual", "c3", 0.7), hit("a@1", -1.0, "outcome", "c4", 1.0),
                             hit("b@1", -1.0, "manual", None, 1.0), hit("a@1", 0.0, "manual", "c5", 1.0)])
    # not an outcome, a scenario's judgement, nor one of quality 0
    assert judged == {"a@1": [JudgedOutput(0.9, 90.0, True, "c1"), JudgedOutput(0.8, 80.0, True, "c2"),
                              JudgedOutput(0.7, 70.0, False, "c3")]}


def test_an_outcome_flagged_as_judged_does_not_count_without_its_judgement_among_the_hits() -> None:
    """A judgement given under another scenario is not among the entries near this one: the flag
    its recording set on the call's outcome is what keeps that outcome out (QA: it counted +25)."""
    flagged = VectorHit("outcome:c1", 1.0, {"tool": "a@1", "value": 1.0, "timestamp": 1_000.0, "source": "outcome",
                                            "call_id": "c1", "replaced": True})
    unflagged = VectorHit("outcome:c2", 1.0, {**flagged.payload, "call_id": "c2", "replaced": False})
    assert points_by_tool([flagged], half_life_s=86_400, now=1_000.0) == {}
    assert points_by_tool([flagged, unflagged], half_life_s=86_400, now=1_000.0)["a@1"] == 25.0


def test_a_call_judged_by_its_task_id_is_judged_under_the_call_id_its_caller_chose() -> None:
    """A call sent with a chosen call_id keeps its result under Celery's task id (what `fittest
    result` asks for); a judgement by that task id must key on the call id, which the call's outcome
    and execution records carry, or the outcome it should replace still counts beside it."""
    from typing import Any, cast

    from workers.feedback_store import judged_call

    stored = {"task-123": {"call_id": "order-42", "scenario": "add VAT", "attempts": [
        {"tool": "vat_price", "version": "1.0.0", "outcome": "success"}]}}
    call = judged_call(cast(Any, None), "task-123", stored.get)
    assert call is not None
    assert (call.call_id, call.ran, call.scenario) == ("order-42", ["vat_price@1.0.0"], "add VAT")


def test_a_judgement_of_an_attempt_that_only_failed_is_refused() -> None:
    """QA: a positive judgement of a crashed attempt (no output to judge) replaced the crash's
    negative outcome; QA X: a negative one was taken, and counted the failure again."""
    from typing import Any, cast

    from workers.feedback_store import judged_call, record_tool_feedback

    stored = {"c1": {"call_id": "c1", "scenario": "add VAT", "attempts": [
        {"tool": "vat_price", "version": "1.0.0", "outcome": "failure", "error_class": "crash"},
        {"tool": "convert_units", "version": "1.0.0", "outcome": "success"}]}}
    call = judged_call(cast(Any, None), "c1", stored.get)
    assert call is not None and call.failed == ["vat_price@1.0.0"]
    for sentiment in ("positive", "negative"):
        with pytest.raises(ValueError, match="vat_price@1.0.0's attempt in call c1 failed: it gave no output to judge "
                                             r"\(its failure counts against it already"):
            record_tool_feedback(cast(Any, None), "vat_price", None, None, sentiment, call=call)
    # QA ops: of a refusal set aside as the caller's mistake, "counts against it already" said the opposite.
    stored["c2"] = {"call_id": "c2", "scenario": "add VAT", "attempts": [
        {"tool": "vat_price", "version": "1.0.0", "outcome": "failure", "error_class": "bad_input", "callers_mistake": True}]}
    refused = judged_call(cast(Any, None), "c2", stored.get)
    assert refused is not None and refused.set_aside == ["vat_price@1.0.0"]
    with pytest.raises(ValueError, match=r"\(its failure was set aside, as the caller's input's \(or an outage's\), not the tool's"):
        record_tool_feedback(cast(Any, None), "vat_price", None, None, "negative", call=refused)


# QA 58b: behaviours a single mutation changed while every unit test passed
def test_an_entry_stamped_in_the_future_counts_as_a_fresh_one_not_more() -> None:
    """Mutant F4 (feedback.py `decay(max(0, age))` -> `decay(age)`) survived: a worker whose clock
    runs ahead would store judgements that weigh more than fresh ones, up to outweighing the cap's prior."""
    fresh = feedback_points([FeedbackEntry(1.0, 1.0, NOW)], 14 * DAY, now=NOW)
    ahead = feedback_points([FeedbackEntry(1.0, 1.0, NOW + 28 * DAY)], 14 * DAY, now=NOW)
    assert ahead == pytest.approx(fresh) == pytest.approx(25.0)


def test_a_success_of_a_version_of_quality_exactly_0_7_is_a_strong_positive() -> None:
    """Mutant F8 (`quality >= 0.7` -> `>`) survived. README: +1 while its quality is 0.7 or more,
    +0.5 from 0.5."""
    assert outcome_value(True, 0.7) == 1.0
    assert outcome_value(True, 0.5) == 0.5
    assert outcome_value(True, 0.4999) is None


def hit(score: float, **payload: Any) -> VectorHit:
    return VectorHit(id=str(payload.get("call_id", "x")) + str(payload.get("source")), score=score,
                     payload={"tool": "t@1.0.0", "timestamp": NOW, **payload})


def test_a_judgement_of_quality_0_of_a_call_leaves_that_calls_outcome_counting() -> None:
    """Mutant F10 (judged_calls without `and payload_value(p)`) survived. README: a judgement of
    quality 0 counts for nothing: of a call, ... the output counts as it ran."""
    outcome = hit(1.0, value=1.0, source="outcome", call_id="c1")
    nothing = hit(1.0, value=0.0, source="manual", call_id="c1")
    alone = points_by_tool([outcome], 14 * DAY, now=NOW)["t@1.0.0"]
    assert alone > 0
    assert points_by_tool([outcome, nothing], 14 * DAY, now=NOW)["t@1.0.0"] == pytest.approx(alone)


def test_a_forgiven_outcome_counts_for_nothing() -> None:
    """Mutant F14 (points_by_tool without `or forgiven(h.payload)`) survived: a failure in an outage
    its tool recovered from (workers/outage.py) went on costing it feedback points."""
    forgiven = hit(1.0, value=-1.0, source="outcome", call_id="c1", forgiven=True)
    success = hit(1.0, value=1.0, source="outcome", call_id="c2")
    assert "t@1.0.0" not in points_by_tool([forgiven], 14 * DAY, now=NOW)
    assert points_by_tool([forgiven, success], 14 * DAY, now=NOW) == points_by_tool([success], 14 * DAY, now=NOW)

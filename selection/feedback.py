"""Feedback math: how much a stored judgement about a tool version counts for the current scenario.

A feedback entry is a signed value in [-1, 1] about one exact tool version in one scenario: a
vote for or against it, as strong as the value's size. Its weight here is the product of what a
person would agree with: how similar its scenario is to this one (`similarity_weight`, the same
kernel the learned policy uses for every piece of outcome evidence), how recent it is (halved
every half-life), how strong it is (|value|: a judgement of quality 0.2 that agrees with the others
adds to them a little, where as a level it pulled their mean towards 0 — QA V: a second, weaker
negative raised a tool from -25 to -20), and whose it is (a person's counts MANUAL_WEIGHT times an
outcome's). The score is the weighted mean vote, shrunk towards 0 by one pseudo-entry of weight
PRIOR_WEIGHT (one identical-scenario outcome moves it half-way), times 50: so it stays within ±50
by construction, and grows with the amount and closeness of agreeing evidence.

Which outcome becomes which feedback follows the design's rules (`outcome_value`).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from selection.manifest import VersionKeyed, split_key
from selection.models import Sentiment
from selection.ports import VectorHit

MAX_POINTS = 50.0
# Cosine distance over which evidence from another scenario loses a factor e: at 0.1 a scenario
# 0.9 similar counts 0.37, one 0.7 similar 0.05. The one scale for all outcome evidence.
BANDWIDTH = 0.1
PRIOR_WEIGHT = 1.0
# An outcome says a version ran without an error; a person says whether its output was right. At
# 1 a person's "wrong for this job" was cancelled by the next call the same version served (QA V:
# -24 after one judgement, -12 after a call and a second one).
MANUAL_WEIGHT = 5.0
# Entries from scenarios so far away that they weigh under 1% of a same-scenario judgement need
# not be fetched: the similarity below which a search may stop.
MIN_SIMILARITY = 1.0 + BANDWIDTH * math.log(0.01)
STRONG_QUALITY = 0.7  # success of a version at least this good: strong positive
POSITIVE_QUALITY = 0.5  # at least this good: positive; below it a success teaches nothing
STRONG_VALUE = 1.0
POSITIVE_VALUE = 0.5
NEGATIVE_VALUE = -1.0


def similarity_weight(similarity: float, bandwidth: float = BANDWIDTH) -> float:
    """exp(-(1 - cosine) / bandwidth): 1 for the same scenario, falling fast with distance."""
    return math.exp(-(1.0 - min(1.0, similarity)) / bandwidth)


def decay(age_s: float, half_life_s: float) -> float:
    return 0.5 ** (max(0.0, age_s) / half_life_s)


def outcome_value(success: bool, quality: float) -> float | None:
    """The feedback a finished attempt gives its exact version, or None when it gives none."""
    if not success:
        return NEGATIVE_VALUE
    if quality >= STRONG_QUALITY:
        return STRONG_VALUE
    if quality >= POSITIVE_QUALITY:
        return POSITIVE_VALUE
    return None


class FeedbackEntry(NamedTuple):
    """One stored judgement as selection sees it: its value (-1..1), its scenario's similarity, its
    time, whether a person made it. A tuple, not a model: a selection builds up to 200 of them from
    its own store's hits."""

    value: float
    similarity: float
    timestamp: float
    manual: bool = False


def feedback_points(
    entries: Iterable[FeedbackEntry],
    half_life_s: float,
    now: float | None = None,
    bandwidth: float = BANDWIDTH,
) -> float:
    """The feedback score of one tool version for the current scenario, in [-50, 50]."""
    now = time.time() if now is None else now
    total = weight = 0.0
    for e in entries:
        w = (similarity_weight(e.similarity, bandwidth) * decay(now - e.timestamp, half_life_s) * abs(e.value)
             * (MANUAL_WEIGHT if e.manual else 1.0))
        total += math.copysign(w, e.value)
        weight += w
    points = MAX_POINTS * total / (weight + PRIOR_WEIGHT)
    return max(-MAX_POINTS, min(MAX_POINTS, points))


def payload_value(payload: dict[str, Any]) -> float:
    """A stored judgement's value in [-1, 1] (a payload with only `positive` counts as ±1)."""
    value = payload.get("value", 1.0 if payload.get("positive") else -1.0)
    return max(-1.0, min(1.0, float(value)))


def judged_calls(payloads: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    """(tool version, call id) of every call a person judged (stored feedback payloads), but by a
    judgement of quality 0, which counts for nothing: the call's outcome counts in its place."""
    return {(p["tool"], p["call_id"]) for p in payloads
            if p.get("source") == "manual" and p.get("call_id") and payload_value(p)}


def replaced(payload: dict[str, Any], judged: set[tuple[str, str]]) -> bool:
    """Whether this stored feedback is a call's outcome that a person's judgement of the same call and
    version took the place of: it no longer counts, in scores and in reports alike. The judgement
    flags it (`replaced`), and is recognised among the same entries too, for one flagged late."""
    return payload.get("source") == "outcome" and (
        payload.get("replaced") is True or (payload["tool"], payload.get("call_id")) in judged)


def forgiven(payload: dict[str, Any]) -> bool:
    """Whether this stored feedback is the negative outcome of a failure in an outage its tool
    recovered from (workers/outage.py): it no longer counts, in scores and in reports alike."""
    return payload.get("forgiven") is True


def points_by_tool(hits: Iterable[VectorHit], half_life_s: float, now: float | None = None) -> dict[str, float]:
    """Feedback points per tool version from FEEDBACK search hits (payload `tool`, `value`,
    `timestamp`, `source`, `call_id`; a payload with only `positive` counts as ±1). A person's
    judgement of a call's output replaces the feedback that call's outcome gave the same version."""
    hits = list(hits)
    judged = judged_calls(h.payload for h in hits)
    entries: dict[str, list[FeedbackEntry]] = defaultdict(list)
    for h in hits:
        if replaced(h.payload, judged) or forgiven(h.payload):
            continue
        entries[h.payload["tool"]].append(
            FeedbackEntry(payload_value(h.payload), h.score, float(h.payload.get("timestamp", 0.0)),
                          h.payload.get("source", "manual") == "manual"))
    return {key: feedback_points(items, half_life_s, now) for key, items in entries.items()}


class JudgedOutput(NamedTuple):
    """A person's judgement of one call's output by a version, as selection sees it."""

    similarity: float  # of the call's scenario to this one
    timestamp: float
    wrong: bool
    call_id: str = ""


def judged_outputs(hits: Iterable[VectorHit]) -> dict[str, list[JudgedOutput]]:
    """People's judgements of calls' outputs per tool version, from FEEDBACK search hits: only a
    judgement of a call (`fittest feedback add ... --call`) says that the version ran and its
    output was wrong (or right); one of a scenario says what a person thinks of the tool for it,
    and one of quality 0 says nothing (it counts for nothing)."""
    found: dict[str, list[JudgedOutput]] = defaultdict(list)
    for h in hits:
        if h.payload.get("source", "manual") == "manual" and h.payload.get("call_id") and (value := payload_value(h.payload)):
            found[h.payload["tool"]].append(JudgedOutput(h.score, float(h.payload.get("timestamp", 0.0)), value < 0,
                                                         str(h.payload["call_id"])))
    return dict(found)


class FeedbackRecord(VersionKeyed, BaseModel):
    """One judgement of an exact tool version in a scenario, as stored (FEEDBACK) with its vector.

    `value` is in [-1, 1]: a person's positive/negative with a quality, or an outcome's rule."""

    id: str = Field(default_factory=lambda: f"manual:{uuid.uuid4().hex}")
    tool: str = Field(min_length=1)
    version: str = Field(min_length=1)
    scenario: str = Field(min_length=1, max_length=4000)
    value: float = Field(ge=-1.0, le=1.0)
    reason: str = Field("", max_length=500)
    source: Literal["manual", "outcome"] = "manual"
    call_id: str | None = None
    timestamp: float = Field(default_factory=time.time)
    replaced: bool = False  # an outcome a person's judgement of its call took the place of (`replaced`)
    general: bool = False  # a judgement of the tool in general: `scenario` is its description, for the vector
    forgiven: bool = False  # an outcome's that says nothing of the tool: an outage, or a caller's bad input

    @classmethod
    def manual(cls, tool: str, version: str, scenario: str, sentiment: Sentiment,
               reason: str = "", quality: float = 1.0, call_id: str | None = None, general: bool = False) -> FeedbackRecord:
        if not 0.0 <= quality <= 1.0:
            raise ValueError(f"quality must be within 0..1, got {quality!r}")
        return cls(tool=tool, version=version, scenario=scenario, reason=reason, call_id=call_id, general=general,
                   value=quality if sentiment == "positive" else -quality + 0.0)  # + 0.0: never -0.0 (QA selection F10)

    def payload(self) -> dict[str, Any]:
        return {"tool": self.key, "name": self.tool, "version": self.version, "value": self.value,
                "positive": self.value > 0, "reason": self.reason, "source": self.source, "call_id": self.call_id,
                "scenario": self.scenario[:1000], "timestamp": self.timestamp, **({"replaced": True} if self.replaced else {}),
                **({"general": True} if self.general else {}), **({"forgiven": True} if self.forgiven else {})}

    @classmethod
    def from_payload(cls, point_id: str, payload: dict[str, Any]) -> FeedbackRecord:
        """Back from a stored point."""
        return cls(id=point_id, tool=payload.get("name") or split_key(str(payload.get("tool", "?")))[0],
                   version=payload.get("version") or split_key(str(payload.get("tool", "?@?")))[1] or "?",
                   scenario=payload.get("scenario") or "(no scenario)", value=payload_value(payload),
                   reason=payload.get("reason", ""), source=payload.get("source", "manual"),
                   call_id=payload.get("call_id"), timestamp=float(payload.get("timestamp", 0.0)),
                   replaced=payload.get("replaced") is True, general=payload.get("general") is True,
                   forgiven=payload.get("forgiven") is True)


class TrendPoint(BaseModel):
    """Feedback of one period: how much, how it split, and its mean vote (-1..1), each entry as
    strong as its value and a person's MANUAL_WEIGHT times an outcome's, as the scores weigh them
    (so one of quality 0 counts for nothing: QA AD saw three of them pull a day of +1.00 to +0.40;
    QA ops: 8 judgements of a version, its score -34.7, read -0.08 counted as outcomes); 0 when
    none has any strength."""

    start: float
    count: int
    positive: int
    negative: int
    mean_value: float


# The periods a trend is counted in: a day's shows a week of use, an hour's the day a team starts.
TrendPeriod = Literal["hour", "day", "week"]
PERIOD_S: dict[str, float] = {"hour": 3_600.0, "day": 86_400.0, "week": 604_800.0}


# Periods are counted from a Monday (1970-01-01 was a Thursday), so that a week starts on one;
# hours and days fall where they would from the epoch.
PERIODS_FROM = -3 * 86_400.0


def trend(records: Iterable[FeedbackRecord], bucket_s: float) -> list[TrendPoint]:
    """Feedback per period of `bucket_s` seconds (UTC), oldest first; periods without any are left out."""
    buckets: dict[int, list[tuple[float, float]]] = defaultdict(list)  # (value, weight)
    for r in records:
        buckets[int((r.timestamp - PERIODS_FROM) // bucket_s)].append((r.value, MANUAL_WEIGHT if r.source == "manual" else 1.0))
    return [
        TrendPoint(start=PERIODS_FROM + b * bucket_s, count=len(v), positive=sum(1 for x, _ in v if x > 0),
                   negative=sum(1 for x, _ in v if x < 0),
                   mean_value=round(sum(x * w for x, w in v) / (sum(abs(x) * w for x, w in v) or 1.0), 4))
        for b, v in sorted(buckets.items())
    ]

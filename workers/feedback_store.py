"""Feedback as stored (FEEDBACK): record a judgement of an exact tool version, score a version for a
scenario, list a tool's entries with their trend. The math is selection/feedback.py; this module
only reads and writes the vector memory (through the pending list when it is unavailable)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from evolution.trial import head_version
from selection.feedback import FeedbackRecord, TrendPoint, trend
from selection.manifest import tool_key
from selection.ports import FEEDBACK, VectorFilter, VectorPoint
from workers.pending import upsert_or_keep

if TYPE_CHECKING:
    from workers.runtime import Runtime

REPORT_SCAN = 10_000  # entries of one tool read for a report
TREND_BUCKET_S = 86_400.0


def write_feedback(rt: Runtime, records: Sequence[FeedbackRecord], vectors: Sequence[list[float]] | None = None) -> bool:
    """Store feedback as vectors; the id makes a rewrite replace, never add. False when the vector
    memory was unavailable and the writes were kept for later (workers/pending.py)."""
    if not records:
        return True
    points = [VectorPoint(id=r.id, vector=vectors[i] if vectors else [], payload=r.payload()) for i, r in enumerate(records)]
    return upsert_or_keep(rt, FEEDBACK, points, texts=[r.scenario for r in records])


def served_version(rt: Runtime, name: str) -> str:
    """The version a namespace stands for now (`fittest show`'s head): the promoted one, after a
    rollback the one it fell back to, else its original."""
    original = rt.registry.original(name)
    if original is None:
        raise LookupError(f"no tool named '{name}'")
    head = head_version(rt.state.promotion(name))
    return head if head is not None and f"{name}@{head}" in rt.registry else original.version


def record_tool_feedback(rt: Runtime, tool: str, version: str | None, scenario: str | None,
                         sentiment: Literal["positive", "negative"], reason: str = "", quality: float = 1.0,
                         call_id: str | None = None) -> FeedbackRecord:
    """A person's judgement of `tool@version` (default: the served version) in `scenario` (default:
    the tool's description, i.e. about the tool in general); of the output of call `call_id`, if
    given (it then counts in place of that call's outcome feedback: selection/feedback.py)."""
    version = version or served_version(rt, tool)
    manifest = rt.registry.get(f"{tool}@{version}")
    if manifest is None:
        raise LookupError(f"no tool version '{tool}@{version}'")
    record = FeedbackRecord.manual(tool, version, scenario or manifest.description, sentiment, reason, quality, call_id)
    write_feedback(rt, [record])
    rt.state.invalidate()  # every selector's cached searches predate it
    return record


def feedback_score(rt: Runtime, tool: str, version: str, scenario: str) -> float:
    """The feedback points of `tool@version` for `scenario`, in [-50, 50], as selection computes them."""
    key = tool_key(tool, version)
    return rt.selector.feedback_points([key], rt.embedder.embed_one(scenario)).get(key, 0.0)


class FeedbackReport(BaseModel):
    tool: str
    entries: list[FeedbackRecord]  # newest first
    total: int
    trend: list[TrendPoint]  # oldest first, one per day with entries


def feedback_report(rt: Runtime, tool: str, limit: int = 50) -> FeedbackReport:
    points = rt.memory.scroll(FEEDBACK, filter=VectorFilter.where(name=tool), limit=REPORT_SCAN)
    records = sorted((FeedbackRecord.from_payload(p.id, p.payload) for p in points), key=lambda r: -r.timestamp)
    return FeedbackReport(tool=tool, entries=records[:limit], total=len(records), trend=trend(records, TREND_BUCKET_S))

"""What an attempt or a finished call teaches the stores, applied once per attempt id.

The feedback tasks call these functions; so does the selection bench, which streams queries
through the same code without Celery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from selection.models import FailureMark, OutcomeRecord
from selection.ports import FAILURES, FailureApplied, VectorPoint

if TYPE_CHECKING:
    from workers.runtime import Runtime


def apply_failure(rt: Runtime, mark: FailureMark, vector: list[float] | None = None) -> FailureApplied:
    """Demote the version that failed and remember the failure as a vector.

    The vector's id is the attempt id, so a redelivery rewrites the same point, never a second one.
    """
    applied = rt.state.mark_failure(mark.key, mark.attempt_id, mark.effective_severity())
    rt.memory.upsert(
        FAILURES,
        [
            VectorPoint(
                id=mark.attempt_id,
                vector=vector if vector is not None else rt.embedder.embed_one(mark.scenario),
                payload={
                    "tool": mark.key,
                    "name": mark.tool,
                    "version": mark.version,
                    "scenario": mark.scenario[:1000],
                    "error_class": mark.error_class.value,
                    "severity": mark.effective_severity().value,
                    "message": mark.error_message[:500],
                    "call_id": mark.call_id,
                    "timestamp": mark.timestamp,
                },
            )
        ],
    )
    return applied


def apply_outcome(rt: Runtime, record: OutcomeRecord, vector: list[float] | None = None) -> dict[str, Any]:
    """Count the successful attempt of a finished call (once per attempt id)."""
    counted = [a.attempt_id for a in record.attempts if a.success and rt.state.record_success(a.key, a.attempt_id)]
    return {"call_id": record.call_id, "successes_counted": counted}

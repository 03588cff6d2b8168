"""The `feedback` queue: apply what one attempt or call teaches, exactly once per attempt."""

from __future__ import annotations

from typing import Any

from selection.models import FailureMark, OutcomeRecord
from workers.app import app
from workers.outcomes import apply_failure, apply_outcome
from workers.runtime import runtime


@app.task(name="fittest.mark_failure")
def mark_failure(mark_data: dict[str, Any]) -> dict[str, Any]:
    """Demote the version that failed and remember the failure (once per attempt)."""
    return apply_failure(runtime(), FailureMark.model_validate(mark_data)).model_dump()


@app.task(name="fittest.record_outcome")
def record_outcome(record_data: dict[str, Any]) -> dict[str, Any]:
    """Learn from a finished call: successes, feedback and the learner's record (once per attempt)."""
    return apply_outcome(runtime(), OutcomeRecord.model_validate(record_data))

"""A call that ends before any attempt (its payload refused, or no tool to try) is counted with
the calls that ran (the sentences such a call ends with: selection/call_endings.py)."""

from __future__ import annotations

import time
from typing import Any

from selection.call_endings import no_candidates_result
from selection.models import CallPlan
from workers.runtime import runtime


def ended_early(result: dict[str, Any], started_at: float | None = None) -> dict[str, Any]:
    """Count a call that ended before any attempt (its payload refused, or no tool to try) with the
    calls that ran, so that `fittest_calls_total` by status adds up to every call made."""
    elapsed_ms = (time.time() - started_at) * 1000 if started_at is not None else 0.0
    runtime().metrics.call(result["status"], 0, elapsed_ms, None)
    return result


def no_candidates(plan: CallPlan) -> dict[str, Any]:
    """The end of a call that has no candidate to try, saying why."""
    rt = runtime()
    result = no_candidates_result(plan, rt.registry, rt.settings.tools_dir)
    return ended_early(result.model_dump(mode="json"), started_at=plan.started_at)

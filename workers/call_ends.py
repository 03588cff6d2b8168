"""Where every call's end is counted and logged, whichever step ended it: one `fittest_calls_total`
row (by status, and by `cause` where the status alone does not say whom it is for to mend) and one
`call_ended` log line, so that an operator can follow a call from its `ranking` to how it ended
(QA 61c: no line said it, and a refused input and tools that failed were both just "failed").
The sentences such a call ends with: selection/call_endings.py."""

from __future__ import annotations

import logging
import time
from typing import Any

from selection.call_endings import no_candidates_result
from selection.manifest import tool_key
from selection.models import CallPlan
from workers.runtime import runtime

log = logging.getLogger("fittest.call")


def call_ended(call_id: str, status: str, cause: str, attempts: int | None, elapsed_ms: float | None,
               tool: str | None = None, version: str | None = None) -> None:
    """Count the call's end and log it: a failure the tools are to mend (`tools_failed`, or a step
    that raised) as a warning, every other end at info. `attempts` and `elapsed_ms` are None when a
    step raised: the step knows neither."""
    runtime().metrics.call(status, attempts, elapsed_ms, tool, cause=cause)
    said = f" ({cause})" if cause else ""
    if tool:
        said += f" by {tool_key(tool, version) if version else tool}"
    if attempts is not None and elapsed_ms is not None:
        said += f" after {attempts} attempt{'' if attempts == 1 else 's'} in {elapsed_ms:.0f} ms"
    level = logging.WARNING if cause == "tools_failed" or status == "error" else logging.INFO
    log.log(level, "call %s ended %s%s", call_id, status, said,
            extra={"event": "call_ended", "call_id": call_id, "status": status, "cause": cause or None,
                   "attempts": attempts, "elapsed_ms": None if elapsed_ms is None else round(elapsed_ms, 3),
                   "tool": tool, "version": version})


def ended_early(result: dict[str, Any], started_at: float | None = None) -> dict[str, Any]:
    """Count a call that ended before any attempt (its payload refused, or no tool to try) with the
    calls that ran, so that `fittest_calls_total` by status adds up to every call made."""
    elapsed_ms = (time.time() - started_at) * 1000 if started_at is not None else 0.0
    call_ended(result["call_id"], result["status"], result.get("no_candidates_reason") or "", 0, elapsed_ms)
    return result


def no_candidates(plan: CallPlan) -> dict[str, Any]:
    """The end of a call that has no candidate to try, saying why."""
    rt = runtime()
    result = no_candidates_result(plan, rt.registry, rt.settings.tools_dir)
    return ended_early(result.model_dump(mode="json"), started_at=plan.started_at)

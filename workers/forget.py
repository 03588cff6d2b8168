"""Forgetting calls: every record of a call that holds what its caller sent, removed on request.

A call's scenario, input and output are kept in several places (README, "What a call leaves
behind"): its result in the backend (a day), the vector store's history (its feedback, execution
and failure points, a person's judgement of it included), the recent successes each tool version
keeps for evolution's replay, the learner's window, and the vector writes waiting for the store.
A service whose callers send personal data needs to remove one call's records when asked, without
stopping the stack (QA 61a-2); this removes them from each of those, by the call's id.

What is not removed, as it holds no call's text: the counts a call added (quality, successes,
breakers, trials), the weights and the tool classifier learned from many calls, and the per-call
markers (ids and digests, which keep a call's effects from being applied twice). What a call's
failure taught an evolution (the changelog's verification notes, the evolution patterns) names no
call and is not reached by its id.

Records still on their way (an outcome in a batch, a write waiting for the store) can land after
the first pass, so the task forgets the same calls once more FORGET_AGAIN_S later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from selection.ports import VectorFilter
from workers.retention import HISTORY
from workers.state.call_records import CallRecordLists
from workers.store_failures import is_store_failure

if TYPE_CHECKING:
    from workers.payloads import ForgetReport
    from workers.runtime import Runtime

log = logging.getLogger("fittest.forget")

FORGET_AGAIN_S = 60.0


def forget_calls(rt: Runtime, call_ids: Sequence[str], forget_result: Callable[[str], bool]) -> ForgetReport:
    """One pass over every store (the vector store's history, the Redis lists, the results) for
    `call_ids`; a call still running is left alone and named in `running`."""
    from workers.payloads import ForgetReport

    running = [c for c in call_ids if rt.inflight.current(c) is not None]
    done = [c for c in call_ids if c not in running]
    report = ForgetReport(call_ids=done, running=running)
    if not done:
        return report
    calls = VectorFilter.where(call_id=list(done))
    try:
        for collection in HISTORY:
            report.removed[collection] = rt.memory.count(collection, calls)
            rt.memory.delete(collection, calls)
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        report.store_error = f"the vector store is unavailable ({type(exc).__name__}: {exc}): its records are kept"
    report.removed |= CallRecordLists(rt.redis, rt.settings.key_prefix).forget(done)
    report.removed["results"] = sum(forget_result(c) for c in done)
    log.info("forgot %d call(s): %s", len(done), ", ".join(f"{n} {kind}" for kind, n in report.removed.items()),
             extra={"event": "calls_forgotten", "call_ids": list(done), "removed": report.removed})
    return report

"""An outage a tool version recovered from, forgiven in what selection reads of it.

A version whose breaker opened failed at least FITTEST_BREAKER_THRESHOLD times in a row; when a
later run of it succeeds (its probe), the breaker closes ("recovered"). Its failures of those jobs
in the meantime said that it was down, not that it is unfit for them; counted on, they kept the
tool that took the job over first for good (QA X: 20 of 20 calls after the fix). So a recovery
sets them aside, for the job it recovered on: the version's failure records and the negative
feedback their calls' outcomes gave it since its last success on that job (at least SAME_JOB
similar) are flagged `forgiven`, which selection's searches and the feedback scores leave out,
and what those failures cost its quality is given back, with their count (QA 56a M3: kept at the
0.21 an outage took it to, from 0.77, the version earned no feedback for its successes after). A
failure counted apart (a refused input) cost nothing and counts in no `failures`; one whose record
does not say what it cost (written by an earlier release, or by a redelivery) is forgiven without
a give-back.
They stay in the store for history (`fittest feedback show` counts them apart). Only an outage is
forgiven: a version that did the job reliably (its RELIABLE_RUNS runs of it before the failures
all succeeded), then failed it until it recovered. One that never did the job, or that failed
between its successes (a flaky one), has nothing forgiven: its failures there are its own. Nor
is a timeout on an input clearly more complex than the one it recovered on (BIGGER_INPUT): a small
input cannot show that a limit on large ones is gone (QA ops: one 3-number probe forgave five
timeouts of a sort on 30,000 numbers, which its manifest says run past its timeout).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from selection.learner import ExecutionRecord
from selection.models import FailureClass
from selection.ports import EXECUTIONS, FAILURES, FEEDBACK, FORGIVEN, Match, Range, VectorFilter, VectorPoint
from selection.job_record import RELIABLE_RUNS, SAME_JOB
from workers.store_failures import is_store_failure

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.outage")


RUNS_SCAN = 256  # the version's newest runs looked through for the start of its outage
# A timeout on an input more complex than the recovering run's by this much (selection/context.py
# complexity, 0..1 on a log scale of size: 0.1 is about twice the lines) says nothing the recovery
# answers.
BIGGER_INPUT = 0.1
OUTAGE_SCAN = 1000  # records of one outage looked at, per collection
# How much earlier than its execution record a failure record may be stamped (the failure message
# is sent as the attempt fails, the outcome's records when the call ends).
WRITE_LAG_S = 600.0


def cosines(points: list[VectorPoint], vector: list[float]) -> list[float]:
    """Each point's cosine to `vector`: for points a scroll read, which a search would have scored."""
    if not points:
        return []
    query = np.asarray(vector, dtype=np.float32)
    query /= max(float(np.linalg.norm(query)), 1e-12)
    stored = np.asarray([p.vector for p in points], dtype=np.float32)
    return [float(c) for c in stored @ query / np.maximum(np.linalg.norm(stored, axis=1), 1e-12)]


def _on_the_job(points: list[VectorPoint], vector: list[float]) -> list[VectorPoint]:
    """The points at least SAME_JOB similar to `vector`."""
    return [p for p, c in zip(points, cosines(points, vector)) if c >= SAME_JOB]


def outage_start(rt: Runtime, key: str, vector: list[float], before: float, call_id: str) -> float | None:
    """When `key`'s failures of this job (its scenario `vector`) before `before` began: the time of
    its last success on the job, in another call, provided that its RELIABLE_RUNS runs of the job up
    to that one all succeeded. None: it never did the job, or it failed between its successes (a
    flaky tool, whose breaker a run of failures opens and the next success closes, has no outage
    to forgive: QA AB saw all 8 failures of a tool failing two runs in three forgiven)."""
    runs = rt.memory.scroll(  # a refused input that was the caller's mistake is no run of the job (job_record.py does_the_job)
        EXECUTIONS, filter=VectorFilter(must=[Match(key="tool", any_of=[key])], must_not=[FORGIVEN],
                                        ranges=[Range(key="timestamp", lt=before)]),
        limit=RUNS_SCAN, descending_by="timestamp")
    on_the_job = _on_the_job([p for p in runs if p.payload.get("call_id") != call_id], vector)
    ran_ok = [bool(p.payload.get("outcome_success", p.payload.get("success"))) for p in on_the_job]  # newest first
    last = next((i for i, ok in enumerate(ran_ok) if ok), None)
    if last is None or ran_ok[last:last + RELIABLE_RUNS] != [True] * RELIABLE_RUNS:
        return None
    return float(on_the_job[last].payload["timestamp"])


def answered_by(failure: VectorPoint, complexity: float | None) -> bool:
    """Whether a recovery on an input of `complexity` (None: unknown) answers this failure: not a
    timeout on a clearly more complex input."""
    ran = failure.payload.get("complexity")
    return (complexity is None or ran is None or failure.payload.get("error_class") != FailureClass.timeout.value
            or float(ran) <= complexity + BIGGER_INPUT)


def forgive_outage(rt: Runtime, key: str, vector: list[float], recovered_at: float, call_id: str,
                   complexity: float | None = None) -> int:
    """Set aside what `key`'s failures on this job (its scenario `vector`) since its last success
    on it taught selection, now that its run of `call_id` at `recovered_at`, on an input of
    `complexity`, closed its breaker (`answered_by`), and give back what those failures cost; the
    number of records flagged. What the vector memory cannot do now is left undone, and logged."""
    try:
        since = outage_start(rt, key, vector, recovered_at, call_id)
        if since is None:
            return 0
        window = [Range(key="timestamp", gte=since, lt=recovered_at)]
        failures = rt.memory.scroll(FAILURES, filter=VectorFilter(must=[Match(key="tool", any_of=[key])],
                                                                  must_not=[FORGIVEN], ranges=window), limit=OUTAGE_SCAN)
        negative = VectorFilter(must=[Match(key="tool", any_of=[key]), Match(key="source", any_of=["outcome"]),
                                      Match(key="positive", any_of=[False])], must_not=[FORGIVEN], ranges=window)
        kept = {p.payload.get("call_id") for p in failures if not answered_by(p, complexity)}
        failures = [p for p in failures if answered_by(p, complexity)]
        feedback = [p for p in rt.memory.scroll(FEEDBACK, filter=negative, limit=OUTAGE_SCAN)
                    if p.payload.get("call_id") not in kept]
        failures, feedback = _on_the_job(failures, vector), _on_the_job(feedback, vector)
        # Given back before they are flagged, each once: flagged first, a failure to give back
        # would have left them forgiven here and charged in the quality for good.
        given = rt.state.forgive_failures(key, [(p.id, int(p.payload["cost_bp"])) for p in failures if "cost_bp" in p.payload])
        forgiven = 0
        for collection, points in ((FAILURES, failures), (FEEDBACK, feedback)):
            flagged = [p.model_copy(update={"payload": {**p.payload, "forgiven": True}}) for p in points]
            if flagged:
                rt.memory.upsert(collection, flagged)
                forgiven += len(flagged)
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        log.warning("could not forgive the outage %s recovered from: %s", key, exc,
                    extra={"event": "outage_unforgiven", "tool": key, "call_id": call_id})
        return 0
    if forgiven:
        rt.state.note_memory_change()
        log.info("%s recovered: %d records of its outage forgiven, and what %d of its failures cost the quality given back",
                 key, forgiven, given, extra={"event": "outage_forgiven", "tool": key, "call_id": call_id, "records": forgiven,
                                              "given_back": given})
    return forgiven


def outages_forgiven(rt: Runtime, records: Sequence[ExecutionRecord]) -> set[tuple[str, str]]:
    """(tool version, call) of each failed run among `records` (the learner's window, which Redis
    keeps as the calls ran) whose failure record a recovery forgave since: one read of the few
    forgiven records (the `forgiven` index) of the versions that failed there. None of them when
    the store cannot be read: the runs are then counted as they ran."""
    failed = [r for r in records if not r.success]
    if not failed:
        return set()
    window = VectorFilter(must=[FORGIVEN, Match(key="tool", any_of=sorted({r.key for r in failed}))],
                          ranges=[Range(key="timestamp", gte=min(r.timestamp for r in failed) - WRITE_LAG_S)])
    try:
        points = rt.memory.scroll(FAILURES, filter=window, limit=len(failed) * 2)
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        return set()
    return {(str(p.payload.get("tool")), str(p.payload.get("call_id"))) for p in points}

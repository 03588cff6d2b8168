"""What an attempt or a finished call teaches the stores, applied once per attempt id.

The feedback tasks call these functions; so does the selection bench, which streams queries
through the same code without Celery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from evolution.models import bounded_input
from selection.feedback import FeedbackRecord, outcome_value
from selection.learner import ExecutionRecord
from selection.models import FailureCount, FailureMark, OutcomeRecord
from selection.ports import (EXECUTIONS, FAILURES, FEEDBACK, FORGIVEN, STORED_TIME_SLACK_S, FailureApplied, Match, Range,
                             VectorFilter, VectorPoint)
from workers.feedback_store import as_judged, judgements_known, write_feedback
from workers.evolution_jobs import apply_evolution_outcomes
from workers.outage import OUTAGE_SCAN, forgive_outage
from workers.pending import upsert_or_keep
from workers.store_failures import is_store_failure

if TYPE_CHECKING:
    from workers.runtime import Runtime


def apply_failure(rt: Runtime, mark: FailureMark, vector: list[float] | None = None) -> FailureApplied:
    """Demote the version that failed and remember the failure as a vector.

    The vector's id is the attempt id, so a redelivery never writes a second point. Nor does it
    write the first one again when it is there (QA 59b F2): its payload, rebuilt from the mark,
    lacked what the first delivery knew (what the failure cost) and what came since (an outage's
    forgiveness), so the failure counted again near its job, and its cost was never given back.
    A delivery that was stopped before it wrote the point writes it.
    """
    applied = rt.state.mark_failure(mark.key, mark.attempt_id, mark.effective_severity(), mark.counts_as())
    if not applied.applied and _failure_stored(rt, mark):
        return applied
    upsert_or_keep(  # kept in Redis and written later when the vector memory is unavailable
        rt,
        FAILURES,
        [
            VectorPoint(
                id=mark.attempt_id,
                vector=vector or [],  # empty: embedded from the scenario by upsert_or_keep
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
                    "input": bounded_input(mark.input),  # replayed when evolution verifies a fix
                    "targeted": mark.targeted,
                    # what it cost the quality, given back if an outage's (outage.py): of a failure counted
                    # as one (not a refused input), known to its first delivery only
                    **({"cost_bp": applied.cost_bp} if applied.applied and mark.counts_as() is FailureCount.failure else {}),
                    "complexity": float(mark.features.get("complexity") or 0.0),  # of its input (workers/outage.py)
                    **({"forgiven": True} if mark.callers_mistake else {}),  # the caller's input, not the tool (job_record.py does_the_job)
                },
            )
        ],
        texts=[mark.scenario],
    )
    return applied


def _failure_stored(rt: Runtime, mark: FailureMark) -> bool:
    """Whether the vector memory holds the point of `mark`'s failure; False when it cannot be read
    (the write then goes on to be kept for later, as a first delivery's would).

    Looked for around its time, not at it: Qdrant stores a payload's float to the nearest double
    only most of the time (345 of 3,000 timestamps read back from Qdrant Edge were one unit in the
    last place off), and a range starting at the mark's own time missed the point that rounded
    down, which the redelivery then rewrote without its cost and its forgiveness (CI, stop 60)."""
    written_then = VectorFilter(must=[Match(key="tool", any_of=[mark.key])],
                                ranges=[Range(key="timestamp", gte=mark.timestamp - STORED_TIME_SLACK_S,
                                              lt=mark.timestamp + STORED_TIME_SLACK_S)])
    try:
        return any(p.id == mark.attempt_id for p in rt.memory.scroll(FAILURES, filter=written_then, limit=100))
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        return False


def apply_outcome(rt: Runtime, record: OutcomeRecord, vector: list[float] | None = None) -> None:
    """`apply_outcomes` for one call; `vector`: its scenario's, when the caller has it."""
    apply_outcomes(rt, [record], None if vector is None else [vector])


def apply_outcomes(rt: Runtime, records: Sequence[OutcomeRecord], vectors: Sequence[list[float]] | None = None) -> None:
    """Count the successful attempts of finished calls and give every attempt's exact version its
    feedback (the failed attempts of a call that later succeeded too), once per attempt id. The
    calls' execution records are the learner's (`store_executions`, what `fittest.learn` runs).

    Many calls at once (`fittest.record_outcome` is batched): the quality of every version and the
    promotions of every namespace are read once, and the feedback is written in one upsert."""
    # A success set aside (on an input a tool doing the job refused, by a version that has done no
    # such job) is no success of its version: counted, it raised the standing the default policy
    # ranks by (review).
    successes: list[tuple[str, str]] = []
    for record in records:
        aside = record.set_aside()
        successes += [(a.key, a.attempt_id) for a in record.attempts if a.success and a.attempt_id not in aside]
    rt.state.record_successes(successes)
    apply_evolution_outcomes(rt, records)
    quality = {key: s.quality for key, s in rt.state.stats([a.key for r in records for a in r.attempts]).items()}
    feedback: list[FeedbackRecord] = []
    feedback_vectors: list[list[float]] = []
    for i, record in enumerate(records):
        forgiven = {f"outcome:{attempt}" for attempt in record.set_aside()}
        given = [f.model_copy(update={"forgiven": True}) if f.id in forgiven else f for f in outcome_feedback(record, quality)]
        feedback += given
        if vectors is not None:
            feedback_vectors += [vectors[i]] * len(given)
    # A judgement that came before its call's outcome was applied found no entry to flag (it waits
    # OUTCOME_WAIT_S for the call's records): the entry knows it as it is written.
    judged = judgements_known(rt, [r.call_id for r in records]) if feedback else {}
    # A redelivered outcome rewrites its entries: one an outage's recovery flagged since its first
    # delivery stays flagged, or the outage counted against its version again (QA 59b S4).
    forgiven_since = _forgiven_already(rt, [r.call_id for r in records]) if feedback else set()
    feedback = [f.model_copy(update={"replaced": True}) if (f.key, f.call_id) in judged else f for f in feedback]
    feedback = [f.model_copy(update={"forgiven": True}) if f.id in forgiven_since else f for f in feedback]
    write_feedback(rt, feedback, feedback_vectors if vectors is not None else None)
    for i, record in enumerate(records):  # a version whose breaker this call's run closed: its outage is forgiven
        for a in record.attempts:
            if a.success and a.metadata.get("breaker") == "recovered":
                vector = vectors[i] if vectors is not None else rt.embedder.embed_one(record.scenario)
                forgive_outage(rt, a.key, vector, a.timestamp, record.call_id,  # logs what it forgave
                               record.features.get("complexity"))


def _forgiven_already(rt: Runtime, call_ids: Sequence[str]) -> set[str]:
    """The ids of the outcome entries of `call_ids` stored with `forgiven` set: one read of the few
    forgiven entries of these calls (the `forgiven` and `call_id` indexes). Empty when the store
    cannot be read: the write is then kept for later, as it would be anyway."""
    flagged = VectorFilter(must=[FORGIVEN, Match(key="source", any_of=["outcome"]),
                                 Match(key="call_id", any_of=sorted(set(call_ids)))])
    try:
        return {p.id for p in rt.memory.scroll(FEEDBACK, filter=flagged, limit=OUTAGE_SCAN)}
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        return set()


def outcome_feedback(record: OutcomeRecord, quality: Mapping[str, float]) -> list[FeedbackRecord]:
    """The design's rules: a failure is negative; a success is strong positive when its version's
    quality is at least 0.7, positive at 0.5, nothing below."""
    out = []
    for a in record.attempts:
        value = outcome_value(a.success, quality[a.key])
        if value is None:
            continue
        reason = "succeeded" if a.success else f"failed: {a.error_class.value if a.error_class else 'error'}"
        out.append(FeedbackRecord(id=f"outcome:{a.attempt_id}", tool=a.tool, version=a.version, scenario=record.scenario,
                                  value=value, reason=reason, source="outcome", call_id=record.call_id,
                                  timestamp=a.timestamp))
    return out


def execution_records(record: OutcomeRecord) -> list[ExecutionRecord]:
    """The call's attempts as the learner keeps them (those set aside as the caller's mistake
    stored `forgiven`: `OutcomeRecord.set_aside`)."""
    set_aside = record.set_aside()
    return [
        ExecutionRecord(
            attempt_id=a.attempt_id,
            call_id=record.call_id,
            tool=a.tool,
            version=a.version,
            scenario=record.scenario,
            features=record.features,
            components=record.components.get(a.key, {}),
            success=a.success,
            error_class=a.error_class.value if a.error_class else None,
            probability=record.probabilities.get(a.key, 1.0),
            policy=record.policy,
            execution_time_ms=a.execution_time_ms,
            timestamp=a.timestamp,
            forgiven=a.attempt_id in set_aside,
            unconfirmed=a.unconfirmed,
            named=a.success and record.namespace == a.tool,
            not_its_job=a.attempt_id in record.not_its_job,
        )
        for a in record.attempts
    ]


def store_executions(rt: Runtime, records: Sequence[ExecutionRecord], vectors: Sequence[list[float]] | None = None) -> int:
    """What `fittest.learn` does with a batch: each record as a vector of its scenario (EXECUTIONS,
    the evidence the learned policy ranks by) and in the learner's recent window (Redis). Returns
    how many records were new to the window."""
    if not records:
        return 0
    points = [
        VectorPoint(
            id=r.attempt_id,
            vector=vectors[i] if vectors else [],
            payload={"tool": r.key, "name": r.tool, "version": r.version, "success": r.success,
                     "error_class": r.error_class, "call_id": r.call_id, "policy": r.policy,
                     "probability": r.probability, "timestamp": r.timestamp, "scenario": r.scenario[:500],
                     **({"forgiven": True} if r.forgiven else {}), **({"unconfirmed": True} if r.unconfirmed else {}),
                     **({"named": True} if r.named else {})},
        )
        for i, r in enumerate(records)
    ]
    judged = judgements_known(rt, [r.call_id for r in records])  # one made before the records came
    points = [(as_judged(p, judged[key]) or p) if (key := (r.key, r.call_id)) in judged else p for p, r in zip(points, records)]
    upsert_or_keep(rt, EXECUTIONS, points, texts=[r.scenario for r in records])
    return rt.learning.push(records)

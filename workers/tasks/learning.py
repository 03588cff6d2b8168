"""The `learning` queue: store execution records in bulk, and relearn the SPARC weights on a beat.

`fittest.learn` is a celery-batches task: the worker buffers its messages (each carrying the
records of the calls one `fittest.record_outcome` batch applied) and stores up to FLUSH_EVERY
messages' records with one embedding call, one vector upsert and one Redis round trip, or what
arrived within FLUSH_INTERVAL_S. Buffered messages stay unacknowledged until their batch ran, so
the memory worker runs with a prefetch multiplier large enough to hold a batch beside its other
work (Procfile: --prefetch-multiplier 16); a record delivered twice is stored once (its attempt id).

`fittest.retrain_weights` runs on the beat schedule (workers/app.py, celery-redbeat, every
FITTEST_RETRAIN_INTERVAL_S): it learns the weights from the window of recent records, refits the
tool classifier on the stored successes (workers/tool_classifier.py), and stores both with a new
version, which changes the state version, so selection uses them on its next call.

`fittest.prune_history` runs on the same schedule: it keeps the newest records of the vector
store's history (workers/retention.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from celery import Task
from celery_batches import SimpleRequest
from pydantic import ValidationError

from selection.learner import ExecutionRecord, retrain
from selection.ports import ClassifierFit, RetrainNote
from selection.recommend import recommendation_report
from workers.app import PRIORITY_LOW, app
from workers.feedback_store import as_people_judged, judgements_known
from workers.outage import outages_forgiven
from workers.outcomes import store_executions
from workers.payloads import InvalidReply, RecommendRequest, RetrainResult
from workers.renewed_lock import renewed
from workers.rescue import effects_ended, send_recorded
from workers.runtime import Runtime, runtime
from workers.store_failures import is_store_failure
from workers.tasks.batches import Batches
from workers.tasks.expiry import drop_if_expired
from workers.tasks.refusals import batch_payloads
from workers.tool_classifier import CLASSIFIER_OFF, refit, stored_classifier

log = logging.getLogger("fittest.learning")

FLUSH_EVERY = 32
FLUSH_INTERVAL_S = 0.25
RETRAIN_LOCK_S = 30.0  # a lease, renewed while the retrain runs (workers/renewed_lock.py)


def send_learn(records: Sequence[ExecutionRecord]) -> None:
    """Hand execution records to `fittest.learn`, in one message."""
    if records:  # recorded in flight: a message lost on its way is sent again (workers/rescue.py)
        send_recorded(learn, [[record.model_dump(mode="json") for record in records]], priority=PRIORITY_LOW)


@app.task(base=Batches, name="fittest.learn", flush_every=FLUSH_EVERY, flush_interval=FLUSH_INTERVAL_S,
          ignore_result=True)
def learn(requests: list[SimpleRequest]) -> int:
    """Store a batch of execution records: vectors (EXECUTIONS) and the learner's window (Redis).
    A message carries one record or a list of them."""
    rt = runtime()
    with effects_ended(rt, requests):
        records = batch_payloads(requests, ExecutionRecord, "fittest.learn")
        stored = store_executions(rt, records)
    # Each call's records by its id, so that a call can be followed from its ranking to its learning (QA 61c).
    log.info("learned %d execution records (%d new)", len(records), stored,
             extra={"event": "learn", "records": len(records), "new": stored,
                    "call_ids": list(dict.fromkeys(r.call_id for r in records))})
    return stored


def retrain_now(rt: Runtime) -> RetrainResult:
    """Relearn the weights from the recent window and refit the tool classifier (when enabled);
    one retrain at a time (a lock in Redis). New weights, a new classifier or both are stored as
    the next weights version."""
    owner = uuid.uuid4().hex
    if not rt.state.acquire_lock("retrain", owner, RETRAIN_LOCK_S):
        return RetrainResult(changed=False, reason="another retrain is running")
    with renewed(rt.state, "retrain", owner, RETRAIN_LOCK_S):
        current = rt.state.weights()
        new, evidence = retrain(window_as_known(rt), current)
        classifier = None
        if rt.settings.tool_classifier:
            try:
                classifier, evidence.classifier = refit(rt, stored_classifier(rt), current.evidence.classifier or ClassifierFit())
            except Exception as exc:  # the weights are still learned; the next beat refits
                if not is_store_failure(exc):
                    raise
                evidence.classifier = ClassifierFit(unchanged=f"vector memory unavailable: {type(exc).__name__}: {exc}")
        else:  # the revision stored before stays, for a stack that turns it on again; selection does not read it
            evidence.classifier = ClassifierFit(unchanged=CLASSIFIER_OFF)
        if new is None and classifier is None:  # kept for `fittest weights`, which says why (QA AC)
            rt.state.note_retrain(RetrainNote(at=time.time(), evidence=evidence))
            return RetrainResult(changed=False, version=current.version, weights=current.weights,
                                 classifier=current.classifier, evidence=evidence)
        stored = rt.state.set_weights(
            (new or current).model_copy(update={
                "evidence": evidence, "updated_at": time.time(),
                "classifier": classifier.revision if classifier is not None else current.classifier,
            }),
            classifier=classifier.to_text() if classifier is not None else None,
        )
    log.info("selection weights v%d: %s, classifier %s", stored.version, stored.weights,
             (stored.classifier or "none") if rt.settings.tool_classifier else CLASSIFIER_OFF,
             extra={"event": "weights", "version": stored.version, "weights": stored.weights,
                    "classifier": stored.classifier if rt.settings.tool_classifier else None})
    return RetrainResult(changed=True, version=stored.version, weights=stored.weights, classifier=stored.classifier,
                         evidence=evidence)


# track_started: CallSender.ask_within (`fittest weights --retrain`) waits for a started one
@app.task(bind=True, name="fittest.retrain_weights", track_started=True)
def retrain_weights(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Measure how strongly each SPARC component predicts success and store normalised weights, with
    the tool classifier refitted on the successes since. Dropped when begun past its message's
    expiry: `fittest weights --retrain` has said nothing was done (review 51 L6: a late one stored
    a weights version after that). It takes no arguments: a message with some is answered unchanged,
    naming them, not with a TypeError from inside Celery (QA 59a)."""
    if args or kwargs:
        given = [repr(a) for a in args] + sorted(kwargs)
        return RetrainResult(changed=False, reason=f"refused: retrain_weights takes no arguments, got {', '.join(given)}"
                             ).model_dump(mode="json")
    drop_if_expired(self)
    return retrain_now(runtime()).model_dump(mode="json")


def window_as_known(rt: Runtime) -> list[ExecutionRecord]:
    """The learner's window as the vector memory knows its runs now: an output a person judged wrong
    is a failure (`as_people_judged`), and a failure a recovery forgave is set aside (QA 56a M3:
    `fittest recommend` went on counting an outage's failures against the version that recovered,
    as the weights did)."""
    recent = rt.learning.recent()
    judged = as_people_judged(recent, judgements_known(rt, [r.call_id for r in recent]))
    forgiven = outages_forgiven(rt, judged)
    return [r.model_copy(update={"forgiven": True}) if not r.success and (r.key, r.call_id) in forgiven else r
            for r in judged]


@app.task(name="fittest.recommend")
def recommend(**kwargs: Any) -> dict[str, Any]:
    """Tool versions with low success in some context (`fittest recommend`), over the learner's
    window as people judged it: an output judged wrong is a failure there (`judged_wrong`), as it
    is for the weights. Here, beside the vector memory, which keeps the judgements. An
    `InvalidReply` to a payload that is not a RecommendRequest."""
    try:
        req = RecommendRequest.model_validate(kwargs)
    except ValidationError as exc:
        return InvalidReply.of(exc).model_dump(mode="json")
    rt = runtime()
    return recommendation_report(window_as_known(rt), req.min_runs, req.max_rate, judgements_applied=True,
                                 manifests=rt.registry.all(), registered_only=True).model_dump(mode="json")


@app.task(name="fittest.prune_history")
def prune_history() -> dict[str, int]:
    """Cut each history collection of the vector store back to its newest FITTEST_HISTORY_MAX_POINTS
    records (workers/retention.py); the number deleted per collection."""
    from workers.retention import prune_history as prune

    rt = runtime()
    try:
        return prune(rt.memory, rt.settings.history_max_points)
    except Exception as exc:  # the store is down: the next beat prunes
        if not is_store_failure(exc):
            raise
        log.warning("history not pruned: vector memory unavailable: %s", exc, extra={"event": "history_not_pruned"})
        return {}

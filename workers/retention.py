"""The history's retention: the vector store keeps the newest records, not every record forever.

Every attempt adds a point to the feedback and executions collections, and every failure one to the
failures; a QA run measured about 8 KB of data directory a call. Selection searches them on every
call, and the embedded store keeps its p99 within 10 ms only up to about 100k points (README,
`fittest bench scale`). So on the beat each of those collections is cut back to its newest
FITTEST_HISTORY_MAX_POINTS records, by their `timestamp` (a count rather than an age: what slows
the searches is how many there are, whatever the traffic).

What goes is what weighs least: feedback halves in weight every FITTEST_FEEDBACK_HALF_LIFE_DAYS,
the weights learn from the newest FITTEST_LEARNER_WINDOW records and the tool classifier from the
newest FITTEST_CLASSIFIER_MAX_RECORDS successes (its columns keep what older ones taught). A
person's judgements (`feedback add`) are few and are kept whatever their age.
"""

from __future__ import annotations

import logging

from selection.ports import EXECUTIONS, FAILURES, FEEDBACK, Match, Range, VectorFilter, VectorMemory

log = logging.getLogger("fittest.retention")

HISTORY = (FEEDBACK, FAILURES, EXECUTIONS)
KEPT = {FEEDBACK: [Match(key="source", any_of=["manual"])]}  # never pruned
SEARCH_STEPS = 64  # halvings of the time span: far below a microsecond at today's timestamps


def prunable(collection: str, since: float | None = None, before: float | None = None) -> VectorFilter:
    """The records of `collection` retention may remove, within [since, before)."""
    return VectorFilter(must_not=KEPT.get(collection, []), ranges=[Range(key="timestamp", gte=since, lt=before)])


def cutoff(memory: VectorMemory, collection: str, keep: int) -> float | None:
    """The time from which `collection` holds at most `keep` prunable records, as many as it can
    (None: it holds no more than that already). Found by bisection on counts of a time range, each
    answered from the timestamp index, so nothing is read."""
    if memory.count(collection, prunable(collection, since=0.0)) <= keep:
        return None
    (newest,) = memory.scroll(collection, prunable(collection), limit=1, descending_by="timestamp")
    low, high = 0.0, float(newest.payload["timestamp"]) + 1.0  # more than `keep` from low; none from high
    for _ in range(SEARCH_STEPS):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if memory.count(collection, prunable(collection, since=middle)) > keep:
            low = middle
        else:
            high = middle
    return high


def prune_history(memory: VectorMemory, keep: int) -> dict[str, int]:
    """Delete the oldest prunable records of each history collection beyond its newest `keep`;
    the number deleted per collection."""
    deleted: dict[str, int] = {}
    for collection in HISTORY:
        before = cutoff(memory, collection, keep)
        if before is None:
            continue
        old = prunable(collection, since=0.0, before=before)
        deleted[collection] = memory.count(collection, old)
        memory.delete(collection, old)
    if deleted:
        log.info("pruned the history to its newest %d records a collection: %s", keep,
                 ", ".join(f"{n} {c}" for c, n in deleted.items()),
                 extra={"event": "history_pruned", "keep": keep, **{f"deleted_{c}": n for c, n in deleted.items()}})
    return deleted

"""Refitting the tool classifier (selection/classifier.py) from what the stores hold.

The successes are the execution records of the vector memory (EXECUTIONS, written by
`fittest.learn`) with their scenario vectors: the newest FITTEST_CLASSIFIER_MAX_RECORDS of them when
there are more, so that it follows what the tools serve now rather than an arbitrary sample of the
past. The columns of namespaces without any start from their description's vector. The refit runs
with the SPARC weights' retrain (`retrain_now`, on the beat), and its result is stored with the
weights in one step (set_weights.lua), so the selectors load it when the weights' version moves.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from threadpoolctl import threadpool_limits

from selection.classifier import ToolClassifier
from selection.learner import MIN_RECORDS
from selection.ports import EXECUTIONS, VectorFilter

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.classifier")


def description_vectors(rt: Runtime, namespaces: list[str]) -> dict[str, list[float]]:
    """The description vector of each of these namespaces (its original version's description)."""
    manifests = [m for ns in namespaces if (m := rt.registry.original(ns)) is not None]
    vectors = rt.embedder.embed([m.description for m in manifests]) if manifests else []
    return {m.name: v for m, v in zip(manifests, vectors, strict=True)}


def stored_classifier(rt: Runtime) -> ToolClassifier | None:
    """The stored classifier, or None when there is none or it cannot be read (written by another
    version of fittest, or for another embedding model): selection then ranks without it, and the
    next refit starts again from the descriptions."""
    text = rt.state.classifier()
    if not text:
        return None
    try:
        classifier = ToolClassifier.from_text(text)
    except ValueError as exc:
        log.warning("the stored tool classifier is unreadable: %s", exc)
        return None
    return classifier if classifier.dim == rt.embedder.dim else None


def refit(rt: Runtime, current: ToolClassifier | None,
          since: float = 0.0) -> tuple[ToolClassifier | None, dict[str, Any]]:
    """A classifier refitted on the stored successes, or None (and why) when there is nothing new to
    learn: fewer than MIN_RECORDS successes, or none newer than `since` (the newest success of
    the last refit) and as many as it had."""
    started = time.perf_counter()
    points = rt.memory.scroll(EXECUTIONS, filter=VectorFilter.where(success=True),
                              limit=rt.settings.classifier_max_records, descending_by="timestamp")
    registered = rt.registry.namespaces()
    known = set(registered)
    examples = [(p.vector, p.payload["name"]) for p in points if p.vector and p.payload.get("name") in known]
    newest = max((float(p.payload.get("timestamp") or 0.0) for p in points), default=0.0)
    evidence: dict[str, Any] = {"successes": len(examples), "namespaces": len(registered), "newest": newest}
    if len(examples) < MIN_RECORDS:
        evidence["unchanged"] = f"{len(examples)} successes, fewer than {MIN_RECORDS}"
        return None, evidence
    if current is not None:
        # Only namespaces registered since the last refit need their description embedded: the
        # others have a column (embedding all of them each beat would cost ~3 ms per tool).
        start = current.with_names(description_vectors(rt, [ns for ns in registered if ns not in current.index]))
    else:
        start = ToolClassifier.from_descriptions(description_vectors(rt, registered))
    usable = [(v, n) for v, n in examples if n in start.index]  # a namespace without an original has no column
    if not usable:
        evidence["unchanged"] = "no success of a namespace with a description"
        return None, evidence
    if current is not None and newest <= since and len(usable) == current.examples:
        evidence["unchanged"] = "no success since the last refit"
        return None, evidence
    vectors, names = zip(*usable, strict=True)
    # One BLAS thread: OpenBLAS's threads spin for a while after each product, and beside a worker's
    # selections that took their core. In the bench the plan right after a refit took 20-33 ms with
    # them and 10-17 ms without; the refit of 10,000 successes takes 1.0 s instead of 0.65 s.
    with threadpool_limits(limits=1, user_api="blas"):
        fitted = start.learn_many(list(vectors), list(names), max_names=rt.settings.classifier_max_namespaces)
    evidence.update(revision=fitted.revision, fit_s=round(time.perf_counter() - started, 2),
                    namespaces_fitted=min(len(start.names), rt.settings.classifier_max_namespaces))
    return fitted, evidence

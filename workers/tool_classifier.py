"""Refitting the tool classifier (selection/classifier.py) from what the stores hold.

The successes are the execution records of the vector memory (EXECUTIONS, written by
`fittest.learn`) with their scenario vectors: the newest FITTEST_CLASSIFIER_MAX_RECORDS of them when
there are more, so that it follows what the tools serve now rather than an arbitrary sample of the
past. The columns of namespaces without any start from their description's vector, and every
registered namespace's description and examples are examples of its jobs in each refit
(`own_words`), so that the namespaces that served nothing yet keep their own regions. The refit runs
with the SPARC weights' retrain (`retrain_now`, on the beat), and its result is stored with the
weights in one step (set_weights.lua), so the selectors load it when the weights' version moves.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING

from threadpoolctl import threadpool_limits

from selection.classifier import ToolClassifier
from selection.learner import MIN_RECORDS
from selection.ports import EXECUTIONS, SUCCESSES, TOOLS, ClassifierFit, SuccessesSeen
from workers.heap import give_back

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.classifier")

NO_NEW_SUCCESS = "no success since the last refit"
# QA 58c L4: `fittest weights` and the log named the revision stored before, as if it were in use
CLASSIFIER_OFF = "off (FITTEST_TOOL_CLASSIFIER=false): neither refitted nor used by selection"


def description_vectors(rt: Runtime, namespaces: list[str]) -> dict[str, list[float]]:
    """The description vector of each of these namespaces (its original version's description)."""
    manifests = [m for ns in namespaces if (m := rt.registry.original(ns)) is not None]
    vectors = rt.embedder.embed([m.description for m in manifests]) if manifests else []
    return {m.name: v for m, v in zip(manifests, vectors, strict=True)}


def own_words(rt: Runtime, namespaces: set[str]) -> list[tuple[list[float], str]]:
    """Each of these namespaces' descriptions and examples (TOOLS: its versions' manifests), once
    each, as examples of its jobs in every refit. Fitted on successes alone, the softmax pushed the
    namespaces that served nothing yet down everywhere, their own jobs included, and the tool that
    served most calls up everywhere: after 60 calls of a string reverser it was the classifier's
    choice (p 0.79) for sorting, hashing and word counting (QA selection F5)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in rt.memory.scroll(TOOLS, limit=1_000_000):
        name, text = p.payload.get("name"), str(p.payload.get("text_hash", ""))
        # a description variant (workers/variants.py) is not the manifest's word until promoted
        if (not p.vector or name not in namespaces or p.payload.get("deprecated") or "variant" in p.payload
                or (name, text) in seen):
            continue
        seen.add((name, text))
        out.append((p.vector, name))
    return out


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


def successes_seen(rt: Runtime) -> SuccessesSeen:
    """What a refit would read, as seen from outside: how many successes (up to the records cap),
    the newest one's time, which namespaces are registered, and the namespaces cap.

    Reading the successes with their vectors is what a refit costs even when it then finds nothing
    new (20,000 successes: 0.8-1.7 s on a 2-core host), on every beat of an idle system; this look
    costs ~3 ms. It is blind to a success deleted while another with an older time is stored
    between two beats (the count and the newest stay): that one waits for the next new success."""
    success = SUCCESSES
    newest = rt.memory.scroll(EXECUTIONS, filter=success, limit=1, descending_by="timestamp")
    namespaces = "\n".join(rt.registry.namespaces()).encode()
    return SuccessesSeen(
        successes=min(rt.memory.count(EXECUTIONS, success), rt.settings.classifier_max_records),
        newest=float(newest[0].payload.get("timestamp") or 0.0) if newest else 0.0,
        namespaces=hashlib.sha256(namespaces).hexdigest()[:16],
        max_namespaces=rt.settings.classifier_max_namespaces,
    )


def refit(rt: Runtime, current: ToolClassifier | None,
          last: ClassifierFit) -> tuple[ToolClassifier | None, ClassifierFit]:
    """A classifier refitted on the stored successes, or None (and why) when there is nothing new to
    learn: fewer than MIN_RECORDS successes, or none newer than the last refit's newest and as
    many as it had. `last` is the evidence of the last retrain (stored with the weights).

    When the stored successes look as they did at the last retrain (`successes_seen`) and the
    stored classifier is readable, that retrain's verdict stands without reading them again."""
    started = time.perf_counter()
    seen = successes_seen(rt)
    if current is not None and seen == last.seen:
        return None, ClassifierFit(successes=last.successes, namespaces=last.namespaces, newest=last.newest, seen=seen,
                                   unchanged=last.unchanged or NO_NEW_SUCCESS)
    try:
        return _refit_on_successes(rt, current, last, seen, started)
    finally:
        give_back()  # the successes it read as Python floats, freed, go back to the system (workers/heap.py)


def _refit_on_successes(rt: Runtime, current: ToolClassifier | None, last: ClassifierFit, seen: SuccessesSeen,
                        started: float) -> tuple[ToolClassifier | None, ClassifierFit]:
    """`refit` past its look at what is stored: read the successes and fit them. A function of its
    own so that what it read is freed when it returns, before `give_back`."""
    since = last.newest or 0.0
    points = rt.memory.scroll(EXECUTIONS, filter=SUCCESSES,
                              limit=rt.settings.classifier_max_records, descending_by="timestamp")
    registered = rt.registry.namespaces()
    known = set(registered)
    # An unconfirmed success (a version serving a job it matches weakly and has no record of) says
    # nothing of what it does, as selection's `does_the_job` reads it: learned, one reverser's
    # "success" on a sha256 job made it the classifier's choice there (p 0.98; QA recheck).
    examples = [(p.vector, p.payload["name"]) for p in points
                if p.vector and p.payload.get("name") in known and not p.payload.get("unconfirmed")]
    newest = max((float(p.payload.get("timestamp") or 0.0) for p in points), default=0.0)
    evidence = ClassifierFit(successes=len(examples), namespaces=len(registered), newest=newest, seen=seen)
    if len(examples) < MIN_RECORDS:
        evidence.unchanged = f"{len(examples)} successes, fewer than {MIN_RECORDS}"
        return None, evidence
    if current is not None:
        # Only namespaces registered since the last refit need their description embedded: the
        # others have a column (embedding all of them each beat would cost ~3 ms per tool).
        start = current.with_names(description_vectors(rt, [ns for ns in registered if ns not in current.index]))
    else:
        start = ToolClassifier.from_descriptions(description_vectors(rt, registered))
    usable = [(v, n) for v, n in own_words(rt, known) + examples if n in start.index]  # a namespace without an original has no column
    if not usable:
        evidence.unchanged = "no success of a namespace with a description"
        return None, evidence
    if current is not None and newest <= since and len(usable) == current.examples:
        evidence.unchanged = NO_NEW_SUCCESS
        return None, evidence
    vectors, names = zip(*usable, strict=True)
    # One BLAS thread: OpenBLAS's threads spin for a while after each product, and beside a worker's
    # selections that took their core. In the bench the plan right after a refit took 20-33 ms with
    # them and 10-17 ms without; the refit of 10,000 successes takes 1.0 s instead of 0.65 s.
    with threadpool_limits(limits=1, user_api="blas"):
        fitted = start.learn_many(list(vectors), list(names), max_names=rt.settings.classifier_max_namespaces)
    evidence.revision = fitted.revision
    evidence.fit_s = round(time.perf_counter() - started, 2)
    evidence.namespaces_fitted = min(len(start.names), rt.settings.classifier_max_namespaces)
    return fitted, evidence

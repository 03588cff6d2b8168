"""Evolution jobs, on the memory worker's side: what it gathers before an evolution, and what it
keeps after one, and after each call.

The evolution worker never opens the embedder or the embedded vector store, so this module, run
by the process that owns them, does both ends:
- `build_job`: the failure evidence of a call (or of a namespace, for a manual or quality trigger):
  its failing inputs, similar past failures (FAILURES), mutations that failed before for a
  similar reason (vector match on EVOLUTIONS: those that failed verification, and those verified
  whose version was rolled back since), and the parent's recent successful runs (its nearest
  ancestor's, for a version with no history of its own);
- `apply_evolution_record` (`fittest.record_evolution`): registers the new version for selection
  and stores the evolution pattern of every verified or failed candidate as a vector;
- `apply_evolution_outcomes` (from `fittest.record_outcome`): remembers successful runs for later
  jobs to replay, credits description variants, and has the trials count the call
  (workers/trials.py);
- `maybe_evolve_for_quality` (from `fittest.mark_failure`): evolution off the call path when a
  served version's quality falls below the threshold, at most once per namespace per cool-down.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from evolution.models import (
    Evidence,
    EvolutionJob,
    EvolutionRecord,
    FailedMutation,
    FailedRun,
    PastFailure,
    SuccessfulRun,
    Trigger,
)
from evolution.promotions import ROLLED_BACK_BY_HAND
from evolution.served_version import head_version, served_original
from selection.call_endings import targeted
from selection.manifest import ManifestError, load_manifest, split_key, tool_key
from selection.models import CallPlan, FailureClass, FailureMark, OutcomeRecord, Promotion
from selection.ports import EVOLUTIONS, FAILURES, FORGIVEN, FailureApplied, Match, VectorFilter, VectorHit, VectorPoint
from workers.feedback_store import judgements_known
from workers.pending import upsert_or_keep
from workers.sandbox import SANDBOX_NOT_STARTED
from workers.tool_catalog import evolved_dir
from workers.trials import account_trials, traffic_namespace
from workers.variants import credit_variants

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.evolution")

SIMILAR_FAILURE = 0.5  # past failures at least this similar are shown to mutators
PAST_FAILURES = 5  # failing inputs taken from memory when no call brought any
FAILURE_SCAN = 200


class EvolutionUnavailable(ValueError):
    """Nothing to evolve: the namespace or version is unknown."""


def pattern_text(failures: list[FailedRun], fallback: str) -> str:
    """The failure in words, as embedded for the evolution pattern: the most frequent class and its
    most frequent message, ties broken by name, not by the failures' order. Taken first-come, the
    same failures in another order made another pattern, too unlike the one a mutation failed for
    to skip it again (QA 55b L4: a failed mutation was made again 8 s after one was skipped)."""
    if not failures:
        return fallback
    classes = Counter(f.error_class for f in failures)
    top = min(classes, key=lambda c: (-classes[c], c.value))
    messages = Counter(f.error_message[:400] for f in failures if f.error_class is top)
    message = min(messages, key=lambda m: (-messages[m], m))
    return f"{top.value}: {message}"


def call_failures(plan: CallPlan, served: str | None) -> tuple[str, str | None, list[FailedRun]]:
    """(namespace, parent version, failures) of a call whose candidates all failed.

    The namespace is the one the call asked for, else the tool tried first; but when a version
    that matched was held back by its circuit breaker, and every tool tried refused the input or
    the first one was not the call's (selection/call_endings.py `targeted`: it matched worse than one
    held back), that one: the tools tried were fallbacks, not the job's (QA: with vat_price's
    breaker open, convert_units refused a VAT job's input and was evolved for it, "no mutator
    could propose"). When none of its versions ran, the parent is left to the caller and the
    failures come from memory.
    """
    failed = plan.failed_attempts
    namespace = plan.namespace or (failed[0].tool if failed else None)
    if not plan.namespace and plan.held_back and failed and (
            not targeted(plan, failed[0]) or (all(a.error_class is FailureClass.bad_input for a in failed)
                                              and _held_back_match(plan) >= _match(plan, failed[0].key))):
        namespace = split_key(plan.held_back[0])[0]
    if namespace is None:
        raise EvolutionUnavailable(f"call {plan.request.call_id} has no failed attempt to learn from")
    mine = [a for a in failed if a.tool == namespace]
    if not mine:
        return namespace, None, []
    parent = served if any(a.version == served for a in mine) else mine[0].version
    runs = [
        FailedRun(version=a.version, input=plan.request.input, error_class=a.error_class,
                  error_message=a.error_message or "", scenario=plan.request.scenario)
        for a in mine
    ]
    return namespace, parent, runs


def _match(plan: CallPlan, key: str) -> float:
    """How well candidate `key` matched the call's scenario (0 for a version not ranked)."""
    return next((c.breakdown.similarity for c in plan.candidates if c.key == key), 0.0)


def _held_back_match(plan: CallPlan) -> float:
    """How well the first version held back by its breaker matched the call: a refusal by a tool
    that matched better is no sign the job was the held-back one's (QA 48: a hashing call whose
    hashing tool, 0.77 similar, refused its input evolved a string reverser, 0.41, held back)."""
    return max(_match(plan, plan.held_back[0]), plan.held_back_match if plan.held_back[0] not in
               {c.key for c in plan.candidates} else 0.0)


def _remembered_failures(rt: Runtime, key: str) -> tuple[list[FailedRun], int]:
    """Recent failures of a version with their inputs, of its most frequent failure class; and how
    many more it had whose input was too large to keep (no replay can check a fix of those).

    Only failures of calls meant for the tool count: as a fallback on another tool's job it was
    given an input that is not its to fix (a mutator would "fix" the tool for the wrong job). Nor
    do the failures of an outage it recovered from (workers/outage.py): the tool works again on
    those inputs, and a mutation made to "fix" them would fix what was never broken in its code.
    """
    points = rt.memory.scroll(FAILURES, VectorFilter(must=[Match(key="tool", any_of=[key])], must_not=[FORGIVEN]),
                              limit=FAILURE_SCAN)
    points = sorted(points, key=lambda p: p.payload.get("timestamp", 0.0), reverse=True)
    meant = [p for p in points if p.payload.get("targeted", True)]
    runs = [
        FailedRun(version=p.payload.get("version", ""), input=p.payload["input"], error_class=FailureClass(p.payload["error_class"]),
                  error_message=p.payload.get("message", ""), scenario=p.payload.get("scenario", ""))
        for p in meant
        if isinstance(p.payload.get("input"), dict)
    ]
    unkept = len(meant) - len(runs)
    if not runs:
        return [], unkept
    top = Counter(r.error_class for r in runs).most_common(1)[0][0]
    return [r for r in runs if r.error_class is top][:PAST_FAILURES], unkept


# What an evolution says of a candidate the machine could not write (a full or read-only
# FITTEST_DATA_DIR): it was never tried, so it is no failed mutation (QA 59d M1: skipped as failed
# before, for good, once the disk had room again).
CANDIDATE_NOT_WRITTEN = "the candidate could not be written under FITTEST_DATA_DIR"


def failed_mutations(hits: Sequence[VectorHit], history: Sequence[Promotion]) -> list[FailedMutation]:
    """The mutations among evolution patterns (`hits`) that failed for that failure.

    Those that failed verification, with the failing inputs that alone failed them (`failed_on`);
    and those verified whose version was rolled back since, by hand or on trial, as the last word
    of the namespace's promotion `history` (oldest first) on it. A rollback is a failure of its
    own: the version did worse on the namespace's traffic, or an operator refused it, whichever
    inputs fail now, so it is not made again for any similar failure. A payload written before
    identities and inputs were kept stands for its mutation text, failed for a reason of its own.
    """
    last_word = {p.evolved_version: p for p in history}
    found = []
    for hit in hits:
        payload = hit.payload
        reason, failed_on = payload.get("reason", ""), payload.get("failed_on", [])
        if SANDBOX_NOT_STARTED in reason or CANDIDATE_NOT_WRITTEN in reason:  # never tried (QA 57d M4, QA 59d M1)
            continue
        if payload.get("outcome") == "verified":
            promotion = last_word.get(payload.get("version") or "")
            if promotion is None or promotion.status != "rolled_back":
                continue
            reason, failed_on = f"{payload.get('version')} rolled back: {promotion.reason}", []
            if promotion.reason == ROLLED_BACK_BY_HAND:  # QA 62a: a healthy version, taken out by an operator
                reason += f" (`fittest promote {promotion.namespace} {payload.get('version')}` serves it again)"
        found.append(FailedMutation(
            mutator=payload.get("mutator", ""), mutation=payload.get("mutation", ""),
            identity=payload.get("identity") or payload.get("mutation", ""),
            reason=reason, failed_on=failed_on, similarity=hit.score, failed_tests=payload.get("failed_tests") or "",
        ))
    return found


def build_job(
    rt: Runtime,
    trigger: Trigger,
    *,
    plan: CallPlan | None = None,
    namespace: str | None = None,
    version: str | None = None,
    reason: str = "",
) -> EvolutionJob:
    """The evolution job of a failed call (`plan`) or of a namespace (manual, quality)."""
    scenario = ""
    exclude_call = ""
    failures: list[FailedRun] = []
    # The namespace's promotion is read once: read again, the parent and the served version the
    # job records could come from two promotions, with a change between them (QA P).
    promotions: dict[str, Promotion | None] = {}

    def served_in(ns: str) -> str | None:
        if ns not in promotions:
            promotions[ns] = rt.state.promotion(ns)
        return head_version(promotions[ns])

    if plan is not None:
        served = served_in(plan.namespace) if plan.namespace else None
        namespace, version, failures = call_failures(plan, served)
        scenario = plan.request.scenario
        exclude_call = plan.request.call_id
        reason = reason or f"all {len(plan.attempts)} attempts of call {plan.request.call_id} failed"
    if namespace is None:
        raise EvolutionUnavailable("a namespace or a call is needed")
    original = rt.registry.original(namespace)
    if original is None:
        raise EvolutionUnavailable(rt.registry.no_tool_named(namespace))
    parent_version = (version or served_in(namespace) or served_original(promotions[namespace], rt.registry, namespace)
                      or original.version)
    if rt.selector.index.ensure_version(namespace, parent_version) is None:
        raise EvolutionUnavailable(f"{namespace} has no version {parent_version}")
    parent = tool_key(namespace, parent_version)
    lineage = _lineage(rt, parent)
    own_failures, unkept, successes = _lineage_evidence(rt, lineage)
    failures = failures or own_failures
    pattern = pattern_text(failures, f"{trigger}: {reason}")
    pattern_vector = rt.embedder.embed_one(pattern)
    similar = rt.memory.search(
        FAILURES, rt.embedder.embed_one(scenario) if scenario else pattern_vector, limit=10,
        filter=VectorFilter(must=[Match(key="name", any_of=[namespace])], must_not=[FORGIVEN]), score_threshold=SIMILAR_FAILURE,
    )
    earlier = rt.memory.search(
        EVOLUTIONS, pattern_vector, limit=20,
        filter=VectorFilter.where(name=namespace), score_threshold=rt.settings.evolution_similar_reason,
    )
    evidence = Evidence(
        failures=failures,
        unkept_failures=unkept,
        similar_failures=[
            PastFailure(version=h.payload.get("version", ""), scenario=h.payload.get("scenario", ""),
                        error_class=FailureClass(h.payload["error_class"]), message=h.payload.get("message", ""), similarity=h.score)
            for h in similar
            if h.payload.get("call_id") != exclude_call
        ],
        failed_mutations=failed_mutations(earlier, rt.state.promotion_history(namespace)),
        successes=successes,
    )
    return EvolutionJob(
        namespace=namespace,
        parent_version=parent_version,
        served_version=served_in(namespace),
        trigger=trigger,
        reason=reason,
        pattern=pattern,
        evidence=evidence,
        plan=plan,
    )


LINEAGE_DEPTH = 16  # ancestors looked at for evidence; a longer chain of untried versions is not met


def _lineage(rt: Runtime, key: str) -> list[str]:
    """`key` and its ancestors by `parent_version`, nearest first."""
    chain: list[str] = []
    current: str | None = key
    while current is not None and current not in chain and len(chain) < LINEAGE_DEPTH:
        chain.append(current)
        manifest = rt.registry.get(current)
        parent = manifest.parent_version if manifest is not None else None
        current = tool_key(manifest.name, parent) if manifest is not None and parent else None
    return chain


def _lineage_evidence(rt: Runtime, lineage: list[str]) -> tuple[list[FailedRun], int, list[SuccessfulRun]]:
    """(remembered failures, those remembered without their input, recent successes) an evolution
    of `lineage[0]` replays (or, for the second, knows of and cannot replay).

    A version's own, else its nearest ancestor's: a version made a moment ago (a new description, a
    version on trial that has not served yet) has no history, and an evolution of it replayed
    nothing, so a rewrite that still crashed on the very input that failed its parent went on trial
    (QA evolution F1: "replay ✓ checked 0"). Failures come from the nearest version that has a
    record of either kind (one that ran and never failed has nothing to fix, and its parent's
    failures may be what it fixed); successes from the nearest that has any, as every version of
    the lineage must keep the answers its ancestors gave."""
    failures: list[FailedRun] | None = None
    unkept = 0
    successes: list[SuccessfulRun] | None = None
    for key in lineage:
        own = judged_right(rt, key, rt.evolution.recent_successes(key))
        if failures is None:
            remembered, unkept = _remembered_failures(rt, key)
            if remembered or unkept or own:
                failures = remembered
        if successes is None and own:
            successes = own
        if failures is not None and successes is not None:
            break
    return failures or [], unkept, successes or []


def judged_right(rt: Runtime, key: str, successes: list[SuccessfulRun]) -> list[SuccessfulRun]:
    """`key`'s recent successes but those whose output a person judged wrong (`fittest feedback add
    ... --call`): an evolution would take such a scenario as an example of what the tool does, and
    hold a candidate that answers it differently to the wrong answer in replay (QA U: a judged-wrong
    word_stats call became an example of the evolved version's manifest)."""
    judged = judgements_known(rt, [s.call_id for s in successes if s.call_id])
    return [s for s in successes if judged.get((key, s.call_id)) != "negative"]


def apply_evolution_record(rt: Runtime, record: EvolutionRecord) -> None:
    """Serve the new version from now on and remember every verdict as an evolution pattern."""
    if record.promoted_version and record.manifest_path:
        root = evolved_dir(rt.settings).resolve()
        path = (root / record.manifest_path).resolve()
        if not path.is_relative_to(root):
            raise ValueError(f"manifest path {record.manifest_path!r} leads outside {root}")
        try:
            rt.selector.index.ensure_tool(load_manifest(path))
        except ManifestError as exc:
            log.error("evolved manifest refused: %s", exc)
    judged = [(i, c) for i, c in enumerate(record.candidates) if c.outcome in ("verified", "failed")]
    if judged:
        # Embedded when written; kept in the pending list and replayed when the store is down.
        upsert_or_keep(rt, EVOLUTIONS, [
            VectorPoint(
                id=f"{record.job_id}:{i}",
                vector=[],
                payload={"name": record.namespace, "outcome": c.outcome, "mutator": c.mutator, "mutation": c.mutation,
                         "identity": c.identity, "failed_on": c.failed_on, "failed_tests": c.failed_tests,
                         "reason": c.reason[:500], "pattern": record.pattern[:500], "job_id": record.job_id,
                         "version": record.promoted_version if c.outcome == "verified" else None},
            )
            for i, c in judged
        ], texts=[record.pattern] * len(judged))


def apply_evolution_outcomes(rt: Runtime, records: Sequence[OutcomeRecord]) -> None:
    """What evolution learns from finished calls: trials, replayable successes, variant credit.
    The namespaces' promotions are read once for all the calls."""
    promotions = rt.state.promotions([ns for r in records if (ns := traffic_namespace(r)) is not None])
    runs = []
    for record in records:
        account_trials(rt, record, promotions)
        set_aside = record.set_aside()  # a success on a caller's bad input is no example of the job
        runs += [(a.key, a.attempt_id, SuccessfulRun.of(record.scenario, record.input, a.result, record.call_id))
                 for a in record.attempts if a.success and a.attempt_id not in set_aside]
        credit_variants(rt, record)
    rt.evolution.push_successes(runs)


def maybe_evolve_for_quality(rt: Runtime, mark: FailureMark, applied: FailureApplied,
                             send: Callable[[EvolutionJob], None]) -> EvolutionJob | None:
    """Start an evolution of a served version whose quality fell below the threshold.

    Only the failure that takes it under the threshold starts one: a version below it already
    (one that inherited a low quality from its parent, or whose evolution found nothing) would
    otherwise be evolved again at every failure past each cool-down, however well it serves
    (QA saw a version at 0.32 after 21 successes and no failure evolved on one bad input)."""
    settings = rt.settings
    if not (settings.evolution_enabled and applied.fell_below(settings.evolution_quality_threshold)):
        return None
    if not mark.targeted:
        # A fallback that refused another tool's job: nothing of its own to fix (its remembered
        # failures leave such inputs out), so the evolution could only re-describe it (QA O: a burst
        # of word_count calls put description versions of inventory_api and temp_convert on trial).
        return None
    promotion = rt.state.promotion(mark.tool)
    if promotion is not None and promotion.status == "on_trial":
        return None  # the trial decides about it
    served = head_version(promotion) or served_original(promotion, rt.registry, mark.tool)
    if mark.version != served or not rt.evolution.cooldown(f"evolve:{mark.tool}", settings.evolution_cooldown_s):
        return None
    reason = f"quality of {mark.key} fell to {applied.quality:.2f} (threshold {settings.evolution_quality_threshold:.2f})"
    try:
        job = build_job(rt, "quality", namespace=mark.tool, version=mark.version, reason=reason)
        send(job)
    except Exception:  # the failure itself is applied; a lost trigger waits for the next cool-down
        log.exception("quality-triggered evolution of %s could not be started", mark.key)
        return None
    return job

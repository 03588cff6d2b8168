"""Trials of a promoted version: counting the calls a version on trial and its parent serve, and
concluding the trial when the counts decide it (evolution/trial.py holds the rules, `decide`;
evolution/promotions.py what activating or rolling back writes).

Run by the memory worker, after each call's outcome (`account_trials`, from
`apply_evolution_outcomes`) and after a person's judgement of an output (`judge_trial`, from
`fittest.record_feedback`): the outcome and the judgement can come in either order, and either may be the
one that decides the trial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from evolution.promotions import MANIFEST_MUTATION, conclude_trial, trial_new_manifests
from evolution.trial import JudgedTrial, TrialCounts, TrialRules, decide, parent_rate
from selection.manifest import split_key, tool_key
from selection.models import OutcomeRecord, Promotion, Sentiment, ToolExecutionResult
from workers.feedback_store import judgements_known

if TYPE_CHECKING:
    from workers.runtime import Runtime


def traffic_namespace(record: OutcomeRecord) -> str | None:
    """The namespace whose traffic a call was: the one it asked for, else the tool tried first."""
    return record.namespace or (record.attempts[0].tool if record.attempts else None)


def account_trials(rt: Runtime, record: OutcomeRecord, promotions: dict[str, Promotion | None]) -> None:
    """Count each attempt of a version on trial, or of its parent, and act on the verdict.

    Only the namespace's own traffic counts: calls that asked for it, or scenario-only calls whose
    first attempt selection gave to it. A version tried as a fallback for another job would be
    judged on work it was never meant for, and its parent would not be. An output a person judged
    wrong before the outcome came counts as a failure (`judge_trial` moves those judged after).
    `promotions` holds the namespace's current promotion, and is updated here when a verdict
    changes it.

    Not the retry of a call after its evolution: it runs the new version on the very input its
    verification replayed, so a trial could be won by the retries of the calls whose failure made
    the version, before any other call ran it (QA evolution: 3/3 successes on trial from the 4
    concurrent calls that had failed). Nor a call that named a version: its caller chose it.
    """
    namespace = traffic_namespace(record)
    if namespace is None or record.after_evolution or record.version:
        return
    judged: dict[tuple[str, str], Sentiment] | None = None
    set_aside = record.set_aside()  # a caller's bad input judges neither version (review: it was a parent failure)
    for attempt in record.attempts:
        if attempt.tool != namespace or attempt.attempt_id in set_aside:
            continue
        promotion = promotions[attempt.tool]
        role = trial_role(promotion, attempt.version)
        if promotion is None or role is None:
            continue
        if attempt.success and judged is None:  # read only for an output a trial counts
            judged = judgements_known(rt, [record.call_id])
        sentiment = (judged or {}).get((attempt.key, record.call_id))
        counted, counts = rt.evolution.trial_record(attempt.tool, promotion.evolved_version, role, attempt.success,
                                                    attempt.attempt_id, record.call_id, sentiment)
        if counted and _act_on_trial(rt, promotion, counts, attempt if role == "evolved" and not attempt.success else None):
            promotions.update(rt.state.promotions([namespace]))


def trial_role(promotion: Promotion | None, version: str, decided: bool = False) -> Literal["evolved", "parent"] | None:
    """What `version` is in its namespace's trial, if one runs (`decided`: in the trial its verdict
    ended, if the promotion is one): the version on trial or its parent."""
    if promotion is None or promotion.status != "on_trial" and not (decided and promotion.by == "fittest"):
        return None
    if version == promotion.evolved_version:
        return "evolved"
    return "parent" if version == (promotion.parent_version or promotion.original_version) else None


def _act_on_trial(rt: Runtime, promotion: Promotion, counts: TrialCounts, failed: ToolExecutionResult | None = None) -> bool:
    """Conclude the trial if its counts now decide it; whether it was concluded. `failed`: the
    version on trial's failure that was counted last, which a rollback's reason quotes (QA 64c: a
    version that read a key no caller sends was rolled back on "0/5 successes", its KeyError unsaid)."""
    rules = TrialRules(successes=rt.settings.trial_successes)
    parent = tool_key(promotion.namespace, promotion.parent_version or promotion.original_version)
    history = rt.state.stats([parent])[parent]
    rate = parent_rate(counts, history.successes, history.failures, rules)
    verdict = decide(counts, rate, rules)
    runs = counts.evolved_successes + counts.evolved_failures
    # a manifest's new version has no parent, and one evolved from a version on trial is tried against
    # what that trial was against (QA 64d, QA 65b): the version it is tried against, named
    evolved = rt.registry.get(tool_key(promotion.namespace, promotion.evolved_version))
    of_parent = promotion.mutation != MANIFEST_MUTATION and (evolved is None or evolved.parent_version == promotion.parent_version)
    against = f"the parent's rate of {rate:.2f}" if of_parent else f"{parent}'s rate of {rate:.2f} (the version it is tried against)"
    reason = f"{counts.evolved_successes}/{runs} successes on trial against {against}"
    if verdict == "rollback" and failed is not None and failed.error_class is not None:
        said = f": {failed.error_message[:200]}" if failed.error_message else ""
        reason += f"; its last failure: {failed.error_class.value}{said}"
    if not conclude_trial(rt.state, rt.evolution, promotion, verdict, reason):
        return False
    trial_new_manifests(rt.state, rt.evolution, rt.registry, [promotion.namespace])  # one that waited for this trial
    return True


def judge_trial(rt: Runtime, key: str, call_id: str, sentiment: Sentiment) -> JudgedTrial | None:
    """A person's judgement of the output `key` gave `call_id`, in the trial its namespace runs, if
    the trial counted that call: an output judged wrong is a failure of the version on trial (or of
    its parent), and the verdict is taken again (before, a version on trial whose outputs people
    judged wrong counted them as successes, and could be activated on them). Of a call the trial
    counted after its verdict ended it, the trial as it was decided, `decided_before` (QA 65c-A:
    judged within a second of the deciding call, "activated 5/5" stood and nothing was said). None:
    no trial counted the call."""
    namespace, version = split_key(key)
    promotion = rt.state.promotion(namespace)
    role = trial_role(promotion, version)
    if promotion is not None and role is None and (role := trial_role(promotion, version, decided=True)) is not None:
        changed, counts = rt.evolution.trial_judge(namespace, promotion.evolved_version, role, call_id, sentiment)
        return (JudgedTrial(namespace=namespace, evolved_version=promotion.evolved_version, role=role, status=promotion.status,
                            counts=counts, decided_before=True) if changed else None)
    if promotion is None or role is None:
        return None
    changed, counts = rt.evolution.trial_judge(namespace, promotion.evolved_version, role, call_id, sentiment)
    evolved = promotion.evolved_version
    if changed and _act_on_trial(rt, promotion, counts):
        promotion = rt.state.promotion(namespace) or promotion
    return JudgedTrial(namespace=namespace, evolved_version=evolved, role=role, status=promotion.status, counts=counts)

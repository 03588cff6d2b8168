"""How a call ends, once its attempts ran or none could: which of them say what about the tools
that made them, and what the caller is told.

A call's attempts are judged after the fact, by rules ranking does not ask: whether the call was
meant for the tool that failed (`targeted`, which decides what evolution may fix), whether a tool
that does the job refused the input as the caller's mistake (`refused_input`), whether a success
says nothing of what its version does (`serves_unconfirmed`), and why a call that names a
namespace stops at it (`refused_for_its_namespace`). The caller reads the outcome in the sentences
built here, as one who did not see the ranking: who refused what and why, who served the call in
the end, and why a call had no candidate to try at all (`no_candidates_result`). The executor and
the memory worker ask them (workers/tasks/execution.py, workers/outcomes.py,
workers/evolution_jobs.py); selection/serving.py decides the ranking before any of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from selection.manifest import split_key, tool_key
from selection.models import Candidate, CallPlan, CallResult, FailureClass, ToolExecutionResult
from selection.registry import ToolRegistry
from selection.job_record import CLEAR_MATCH, REFUSED_IN_A_ROW, RELIABLE_RUNS


def refused_input(plan: CallPlan) -> ToolExecutionResult | None:
    """The attempt of the call in which a version that does the job, or is its clear best match,
    refused the input, if any."""
    return next((a for a in plan.attempts if a.refused_its_job or a.callers_mistake), None)


def why_it_failed(plan: CallPlan) -> str:
    """What a failed call's metrics count it under: `input_refused` when a tool that does the job
    refused its input (the caller has something to mend), `tools_failed` otherwise (the tools do).
    Both end with status failed; an operator watching the failure rate needs them apart (QA 61c-5)."""
    return "input_refused" if refused_input(plan) is not None or refused_for_its_namespace(plan) else "tools_failed"


def refuser(plan: CallPlan) -> Candidate | None:
    """The candidate whose refusal made the call's input suspect (`refused_input`), if any."""
    refusal = refused_input(plan)
    return None if refusal is None else next((c for c in plan.candidates if c.key == refusal.key), None)


def _why_it_counts(c: Candidate | None, namespace: str | None = None) -> str:
    """Why a version's refusal says the input is wrong: it does such jobs, or it is their clear best
    match, or the tool the call names, with its successes."""
    if c is None or c.does_the_job:
        return f"does such jobs ({RELIABLE_RUNS} or more like this one succeeded)"
    if c.proven:  # not "like this one": they were recorded under other words (review 51)
        why = "the call names it" if c.manifest.name == namespace else f"it matches such jobs best ({c.breakdown.similarity:.2f})"
        return f"has succeeded {RELIABLE_RUNS} times or more, and {why}"
    return f"matches such jobs best ({c.breakdown.similarity:.2f})"


def refused_by_a_doer(plan: CallPlan) -> bool:
    """Whether the call's input was refused as the caller's mistake by a version that does such jobs
    by its record, or whose record anywhere stands for the job (`Candidate.proven`), in any of the
    call's attempts: the one refusal no evolution is for (QA ops: 73 of 73 such calls evolved the
    tool that does the job, each a no_fix). A refusal by the job's clear best match that has not
    done such jobs yet, nor succeeded RELIABLE_RUNS times at anything, is the caller's mistake too
    (it demotes nothing, and no tool that takes anything is tried with the input), but the version
    may be the one that is wrong: the call still evolves it (input coercion and defaults). Five
    refusals in a row (`refuses_everything`) make a version's refusals count, and evolve it, again."""
    by_key = {c.key: c for c in plan.candidates}
    # any such refusal of the call: a version on trial refused first, then the version it is tried
    # against, which does the job, refused the same input (QA 51c: the call evolved the one on trial)
    return any((refused_by := by_key.get(a.key)) is None or refused_by.does_the_job or refused_by.proven
               for a in plan.attempts if a.callers_mistake)


def _refused(plan: CallPlan, refusal: ToolExecutionResult) -> str:
    """The refusal as the caller reads it: by whom, why its refusal counts (it does such jobs, or
    it is their clear best match), and whose mistake it is taken for."""
    refused_by = refuser(plan)
    which = ("which does such jobs" if refused_by is None or refused_by.does_the_job
             else f"which {_why_it_counts(refused_by, plan.request.namespace)}")
    said = f"{refusal.key}, {which}, refused the input ({refusal.error_message or 'bad_input'})"
    if refusal.callers_mistake:
        return said
    return f"{said}, as it did the last {REFUSED_IN_A_ROW} inputs or more: it may be broken"


def input_refused_message(plan: CallPlan) -> str | None:
    """Why a call whose input a tool doing the job refused ends failed, or None when none did."""
    refusal = refused_input(plan)
    if refusal is None:
        return None
    after = plan.attempts[plan.attempts.index(refusal) + 1:]
    how = "refused it too" if all(a.error_class is FailureClass.bad_input for a in after) else "failed with it too"
    tried = f"; the other tools tried with it {how} ({', '.join(a.key for a in after)})" if after else ""
    # QA recheck: "as they do not do such jobs" of a tool that could have (its description matched less).
    passed = (f"; not tried with it, having done no such job and matching it less than {CLEAR_MATCH}: "
              f"{', '.join(plan.passed_over)} (a call that names one tries it)") if plan.passed_over else ""
    check = ": check the input" if refusal.callers_mistake else ""
    # CI of stop 63: a payment tool's refusal, tried first, kept the other candidates from running as
    # a tool with side effects; the message said "check the input" and not why no other was tried.
    return f"{_refused(plan, refusal)}{check}{tried}{passed}{kept_to_the_change(plan)}"


# The failures of a run that may have done its job all the same: cut off (timeout), ended
# without a clean refusal (crash: an exception, an exit status, a signal), or done and then
# answered wrongly (bad_output). A refusal of the input and an unreachable upstream did nothing.
EFFECT_UNKNOWN = frozenset({FailureClass.timeout, FailureClass.crash, FailureClass.bad_output})


def effect_unknown(plan: CallPlan) -> ToolExecutionResult | None:
    """The call's attempt of a version with side effects (`side_effects: true`) that failed in a way
    that may have done its job all the same (EFFECT_UNKNOWN), if any: the call stops there. Another
    tool with side effects would do the job a second time, and so would an evolved version of it
    (QA 63a: a payment tool, cut off by its adaptive timeout after its write, was evolved and run
    again by the same call, which wrote the payment twice and answered success; another call fell
    back to an audit ledger 0.42 similar, which wrote it there); one without side effects cannot
    do the job, and "succeeds" at it (QA 63e: a refund preview, 0.37 similar, answered 8 calls to
    notify customers with success, and became their first choice)."""
    return next((a for a in _failed_changes(plan) if a.error_class in EFFECT_UNKNOWN), None)


def _failed_changes(plan: CallPlan) -> list[ToolExecutionResult]:
    """The call's failed attempts of versions with side effects, in the order tried."""
    changers = {c.key for c in plan.candidates if c.manifest.side_effects}
    return [a for a in plan.attempts if not a.success and a.error_class is not None and a.key in changers]


def failed_change(plan: CallPlan) -> ToolExecutionResult | None:
    """The call's first failed attempt of a version with side effects, however it failed: after it the
    call tries that tool's versions alone. Another tool would make another change (QA 63h: a refund
    poster and a shipment notifier match an email job 0.58 and 0.63), and one without side effects
    cannot make it, and "succeeds" (QA 63h: after one SMTP outage an email drafter, 0.85 like the
    job, answered 8 of 8 later calls to send email, which it never sent, and became their first
    choice). When its failure may have done the job (`effect_unknown`), the call tries nothing more."""
    return next(iter(_failed_changes(plan)), None)


def kept_to_the_change(plan: CallPlan) -> str:
    """What a failed call's message adds when `failed_change` kept other tools from running after it."""
    changer = failed_change(plan)
    if changer is None or effect_unknown(plan) is not None:
        return ""
    tried = {a.key for a in plan.attempts}
    if not any(c.manifest.name != changer.tool and c.key not in tried for c in plan.candidates):
        return ""
    return (f"; no other tool was tried after {changer.key}, which has side effects (side_effects: true): another "
            "would make another change, and one without side effects cannot make it")


def effect_unknown_message(attempt: ToolExecutionResult) -> str:
    """Why the call ended failed, once `effect_unknown` found the attempt."""
    how = {FailureClass.timeout: "timed out", FailureClass.crash: "crashed",
           FailureClass.bad_output: "answered with a bad output"}.get(attempt.error_class or FailureClass.crash, "failed")
    return (f"{attempt.key} has side effects (side_effects: true) and {how}: it may have done its job all the same, "
            "so the call tried nothing after it, neither another tool nor an evolved version; check whether it did "
            "before sending the job again")


def took_a_refused_input_note(plan: CallPlan, result: ToolExecutionResult) -> str | None:
    """What the caller should know of a success on an input a tool doing the job refused, by a
    version that has not done such jobs (`ToolExecutionResult.took_a_refused_input`)."""
    refusal = refused_input(plan)
    if refusal is None or not result.took_a_refused_input:
        return None
    check = "check its output, and the input" if refusal.callers_mistake else "check its output"
    return f"{_refused(plan, refusal)}; {result.key}, which took it, has done no such job: {check}"


def targeted(plan: CallPlan, result: ToolExecutionResult) -> bool:
    """Whether the call was meant for the tool that failed: it asked for its namespace, or, by
    scenario, it was the call's first attempt that ran, and either it does such jobs by its record
    or it matches the scenario clearly (CLEAR_MATCH) and at least as well as every version held
    back by its breaker (when the call was planned, or at its turn). A failure on a job that is
    not the tool's is not one evolution should try to fix, nor a refusal of its input one that says
    the tool is worse at its own (QA new user: with the Fibonacci tool held back, the sorting tool
    ran first; its refusals of {"n": 10} demoted it, then evolved it to take them; QA recheck: with
    no translation tool, the word counter, 0.34 similar, was evolved to take "sentence")."""
    if plan.namespace:
        return plan.namespace == result.tool
    if not plan.attempts or plan.attempts[0].attempt_id != result.attempt_id:
        return False
    at = next((i for i, c in enumerate(plan.candidates) if c.key == result.key), None)
    if at is None:
        return True  # not ranked by this plan (an older worker's): the first that ran, as before
    ran = plan.candidates[at]
    skipped = [c.breakdown.similarity for c in plan.candidates[:at]]  # held back or passed over at their turn
    return ran.does_the_job or ran.breakdown.similarity >= max([CLEAR_MATCH, plan.held_back_match, *skipped])


def no_tool_meant_for_it(plan: CallPlan) -> str | None:
    """Why a call whose every candidate failed evolves nothing, when no tool tried is known for its job:
    it named no namespace, none was held back by its breaker, and the first tool that ran was not
    the call's (`targeted`). Evolving a tool meant for another job would make it answer this one
    wrongly (QA recheck: with no translation tool, the word counter was evolved to take a
    "sentence", won its trial on translation calls, and answered them with word counts).
    The closest is named among the tools tried: the best of every candidate named one the call
    never ran, and told the caller to add a tool while one matched 1.00 (QA onboarding L3); a
    closer candidate the call did not reach (its `max_attempts` spent first) is named as such, and
    is what to try, not a new tool."""
    failed = plan.failed_attempts
    if plan.namespace or plan.held_back or not failed or targeted(plan, failed[0]):
        return None
    tried = {a.key for a in plan.attempts}
    best = max((c for c in plan.candidates if c.key in tried), key=lambda c: c.breakdown.similarity, default=None)
    floor = best.breakdown.similarity if best is not None else -1.0
    closer = max((c for c in plan.candidates if c.key not in tried and c.breakdown.similarity > floor),
                 key=lambda c: c.breakdown.similarity, default=None)
    closest = f" (the closest, {best.key}, matches it {best.breakdown.similarity:.2f})" if best is not None else ""
    said = f"no tool tried matches this job clearly{closest} or has done it, so none was evolved for it"
    if closer is None:
        return f"{said}: add a tool for it, or name one (`--namespace`) to have it evolved"
    if closer.key in plan.code_missing:  # neither more attempts nor its name would run it (QA 57a M5)
        return (f"{said}; {closer.key}, which matches it {closer.breakdown.similarity:.2f}, was not run: its code is "
                "not there (the call's notes say where it was)")
    made, limit = len(plan.attempts), plan.request.max_attempts
    why = (f"the call stopped at its max_attempts ({limit})" if made >= limit
           else f"the call stopped after {made} attempt{'s' if made != 1 else ''}")
    return (f"{said}; {closer.key}, which matches it {closer.breakdown.similarity:.2f}, was not tried ({why}): "
            f"raise max_attempts, or name it (`--namespace {closer.manifest.name}`)")


def serves_unconfirmed(plan: CallPlan, served: Candidate, result: ToolExecutionResult) -> bool:
    """Whether a success says nothing of whether its version does such jobs: the version matches
    the job only weakly (under CLEAR_MATCH), has no record of doing it, and the call did not name
    it. It ran without an error, which is not the same as doing what was asked; it still counts,
    and ranks the version for such jobs, but only a success where it matched clearly, or a person's
    judgement of its output (`feedback add ... positive --call`), makes it one that does them."""
    return (result.success and not result.took_a_refused_input and not served.does_the_job
            and served.manifest.name != plan.request.namespace and served.breakdown.similarity < CLEAR_MATCH)


# How the note ends that a call gets when the tool it named was held back by its breaker as the call
# was planned (workers/selector.py `_notes`).
HELD_BACK_WHEN_PLANNED = "held back by its circuit breaker: the call was ranked by its scenario alone"


def named_held_back(plan: CallPlan) -> str:
    """What a failed call's message adds when the namespace it named was not tried, held back by its
    breaker: the attempts it lists were other tools' (QA 63a: "the one attempt failed; evolution: no
    mutator could propose a version of crashy@1.0.0", where crashy had not run and a fallback had)."""
    held = [key for key in plan.held_back if plan.namespace and split_key(key)[0] == plan.namespace]
    return f" ({', '.join(held)}, which the call names, held back by its circuit breaker, not tried)" if held else ""


def served_by_whom_note(plan: CallPlan, served: Candidate, result: ToolExecutionResult) -> str | None:
    """What the caller should know of the tool that served the call, if it is not plainly the one
    asked for: another tool than the namespace the call named, or one whose success is unconfirmed
    (`ToolExecutionResult.unconfirmed`, as `serves_unconfirmed` set it): its success makes it the job's first choice next time (QA new user: a
    vowel counter, 0.22 similar, "served" a string reversal after the reversing tool crashed,
    without a word, and was first for it from then on; QA recheck: the note came once, as a
    fallback, and never as the first choice it then was)."""
    named = plan.namespace
    check = (f"matching it {served.breakdown.similarity:.2f}: check its output (`fittest feedback add "
             f"{served.manifest.name} positive|negative --call {plan.request.call_id}` says whether it does)")
    if named and served.manifest.name != named:
        if any(a.tool == named and not a.success for a in plan.attempts):
            return f"the call named {named}, which failed; {served.key}, another tool, served it, {check}"
        if any(split_key(key)[0] == named for key in plan.code_missing):  # QA 51c: a plain success, no word
            return f"the call named {named}, whose tool folder is gone; {served.key}, another tool, served it, {check}"
        # Passed over as the call ran (its breaker opened since the call was planned, or another call
        # probes it): the plan's note, made before, could not say so (QA 49: a weather job named its
        # tool and got a beehive sensor's output, 0.26 similar, with no note).
        held = [key for key in plan.held_back if split_key(key)[0] == named]
        if held:  # which the plan's note said already, when it was held back as the call was planned
            said = "" if any(note.endswith(HELD_BACK_WHEN_PLANNED) for note in plan.notes) else (
                f"the call named {named}, held back by its circuit breaker ({', '.join(held)}); ")
            return f"{said}{served.key}, another tool, served it, {check}"
    if named or not result.unconfirmed:
        return None  # (a name no tool has is noted apart: the call was ranked by its scenario alone)
    how = "as the first choice" if plan.attempts[:1] == [result] else "as a fallback"
    return f"{served.key} served this call {how}, with no record of doing such jobs, {check}"


def refused_for_its_namespace(plan: CallPlan) -> str | None:
    """Why a call that names a namespace ends at its last attempt rather than handing its input on
    to the tools outside the namespace, or None when it goes on: a version of the namespace refused
    the input (bad_input) and the next candidate is another tool's. The input was shaped for the
    namespace's tool; the others refused it too, each demoted and given a failure for a job it was
    never meant for, or took it and answered something else (QA AD: `run_tool("fast_sort",
    {"numbers": "x"})` went on to four other tools, three of them text tools)."""
    namespace = plan.request.namespace
    if not namespace or not plan.attempts:
        return None
    last = plan.attempts[-1]
    tried = int(last.metadata.get("attempt", len(plan.attempts) - 1))
    if last.success or last.tool != namespace or last.error_class is not FailureClass.bad_input:
        return None
    later = plan.candidates[tried + 1:]
    if not later or any(c.manifest.name == namespace for c in later):  # its other versions are still tried
        return None
    refusal = refused_input(plan)  # the first refusal by a version that does such jobs, or matches them best
    why = ""
    if refusal is not None and refusal.callers_mistake:
        why = f"; {'it' if refusal is last else refusal.key} {_why_it_counts(refuser(plan), namespace)}: check the input"
    # with the tool's own words, as a call by scenario gives them (QA 52a L3: "(bad_input)" alone)
    return (f"{tool_key(namespace, last.version)} refused the input ({last.error_message or 'bad_input'}): the tools "
            f"outside {namespace} were not tried with it{why}")


TAGS_SHOWN = 20  # of the tags there are, named in the message of a call that asked for one no tool has


def tools_dir_gone_message(tools_dir: Path, keys: Iterable[str]) -> str:
    """What a call says of the versions it did not run because their tools directory is gone
    (workers/tasks/execution.py `code_gone`)."""
    return (f"FITTEST_TOOLS_DIR ({tools_dir}) is not a directory: the versions whose code is in it are not run until "
            f"it is back ({', '.join(sorted(keys))})")


def folders_gone_message(plan: CallPlan, keys: Iterable[str]) -> str:
    """What a call says of the versions it did not run because their tool folder is gone
    (workers/tasks/execution.py `code_gone`)."""
    folders = ", ".join(f"{c.key} ({c.manifest.tool_dir})" for c in plan.candidates if c.key in set(keys))
    return f"not run, as their tool folder is gone: {folders}"


def no_candidates_result(plan: CallPlan, registry: ToolRegistry, tools_dir: Path) -> CallResult:
    """The result of a plan that has no candidate, saying why: none matched, the version or a tag
    asked for does not exist (QA: that was "no tool matches", for a tool that exists), or every one
    that matched is held back by its circuit breaker. `registry` and `tools_dir` (FITTEST_TOOLS_DIR):
    what the versions and tags asked for are looked up in, and where code that is gone was."""
    request = plan.request
    result = CallResult.from_plan(plan, "no_candidates", message=plan.no_candidates_message())
    result.no_candidates_reason = "held_back" if plan.held_back else "no_match"
    if request.namespace and request.version and not plan.held_back:
        known = [m.version for m in registry.versions(request.namespace)]
        if not known:  # QA AB: "no tool matches", and exit code 1 where a version of a known tool gets 2
            hint = registry.did_you_mean(f"{request.namespace}@{request.version}")
            result.message = (f"{request.namespace} has no version {request.version}: no tool is named {request.namespace!r}"
                              + (f" ({hint})" if hint else ""))
            result.no_candidates_reason = "no_such_version"
        elif request.version not in known:
            result.message = f"{request.namespace} has no version {request.version} (it has {', '.join(known)})"
            result.no_candidates_reason = "no_such_version"
    if plan.code_missing and not plan.held_back:  # workers/tasks/execution.py `code_gone`
        result.message = (tools_dir_gone_message(tools_dir, plan.code_missing) if not tools_dir.is_dir()
                          else folders_gone_message(plan, plan.code_missing))
        result.no_candidates_reason = "held_back"
    if result.no_candidates_reason == "no_match" and request.tags:  # QA new user: "no tool matches", exit 1
        tags = sorted({t for m in registry.all() for t in m.tags})
        unknown = [t for t in request.tags if t not in tags]
        if unknown:
            shown = ", ".join(tags[:TAGS_SHOWN]) + (f", … ({len(tags)} in all)" if len(tags) > TAGS_SHOWN else "")
            result.message = f"no tool has the tag {', '.join(map(repr, unknown))} (the tags: {shown or 'none'})"
            result.no_candidates_reason = "no_such_tag"
    if result.no_candidates_reason == "no_match" and not tools_dir.is_dir():  # QA 57a L4: `up` run from elsewhere
        result.message += f": FITTEST_TOOLS_DIR ({tools_dir}) is not a directory, so no tool of it is served"
    return result

"""What a version's record says about the call's job: whether it does such jobs, did them, is
proven, refuses everything of late, or is judged wrong on them, and the thresholds these read.

Ranking orders the candidates by these answers (selection/serving.py, workers/selector.py), and
the rules of a call's end read them again from the plan (selection/call_endings.py,
workers/tasks/execution.py): whether a refused input was the caller's mistake, who may still be
tried with it, and who is charged for a crash. They are decided once, when the call is planned,
from the evidence selection found nearby, so that the tasks that apply one call's failure marks
and its outcome read the same answers (workers/outcomes.py).
"""

from __future__ import annotations

from collections.abc import Collection

from selection.evidence import CandidateEvidence
from selection.feedback import JudgedOutput
from selection.models import Candidate

# A description that matches the job at least this well matches it clearly: a tool's own jobs
# reach 0.7-1.0, where vague ones ("process this file") matched QA K's ini2json at 0.34-0.48 and
# used up its newcomer's trial on jobs it could not do. Below it, and without a record of doing the
# job, a tool is not the one a call was meant for (selection/call_endings.py `targeted`) nor one to
# hand a suspect input to (`does_such_jobs`), and its success is noted.
CLEAR_MATCH = 0.5
# A past call whose scenario is at least this similar was the same job, in other words (unrelated
# jobs stay below 0.6): what a half-open version did before, or what people judged it wrong on.
SAME_JOB = 0.8
# A version that succeeded at a job this many times (in other calls) does it reliably: one success
# may be a fallback's luck (an outage, workers/outage.py, and a refused input, `does_the_job`).
RELIABLE_RUNS = 3
# A version that refused this many inputs in a row as callers' mistakes, with no success between
# them, may be broken (a KeyError of its own on every input) rather than every caller wrong: its
# refusals count again, and so demote it and evolve it.
REFUSED_IN_A_ROW = 5
# A version people judged wrong on a job this many times at least (and more often than right, and
# the last time) yields first place to another tool on a share of its calls: one judgement may be
# a person's slip; two that agree say the job goes wrong...
JUDGED_WRONG_MIN = 2
# ...among their latest judgements on the job: what they said before it broke, or before it was
# fixed, is history (QA Z: 35 judged right after a fix, then one wrong, and the 91 wrong from when
# it was broken brought the second opinions back).
JUDGED_RECENT = 5


def _latest_judgements(e: CandidateEvidence) -> list[JudgedOutput]:
    """People's latest JUDGED_RECENT judgements of the version's outputs on jobs like this one."""
    return sorted((j for j in e.judged_outputs if j.similarity >= SAME_JOB), key=lambda j: j.timestamp)[-JUDGED_RECENT:]


def judged_wrong_here(e: CandidateEvidence) -> bool:
    """Whether people judge this version's outputs on jobs like this one wrong: of their latest
    JUDGED_RECENT judgements there, at least JUDGED_WRONG_MIN, more than judged right, and the
    latest one (one who judged it right again after it was fixed has their say)."""
    near = _latest_judgements(e)
    wrong = sum(j.wrong for j in near)
    return wrong >= JUDGED_WRONG_MIN and wrong > len(near) - wrong and near[-1].wrong


def judged_wrong_throughout(e: CandidateEvidence) -> bool:
    """Whether people judged each of the version's latest JUDGED_RECENT outputs on jobs like this
    one wrong: no slip and no mixed record, a verdict. Another tool is then tried first on every
    such call, not on a share (QA 63b: ten outputs in a row judged wrong, and the version still went
    first on three calls in four, each answering wrong)."""
    near = _latest_judgements(e)
    return len(near) >= JUDGED_RECENT and all(j.wrong for j in near)


def namespace_did_the_job(e: CandidateEvidence) -> bool:
    """Whether the version's namespace, any of its versions, succeeded at jobs like this one (a
    success SAME_JOB similar): once is enough, where `does_the_job` asks RELIABLE_RUNS of the
    version itself."""
    return max(e.namespace_success_similarities, default=0.0) >= SAME_JOB


def does_the_job(e: CandidateEvidence) -> bool:
    """Whether this version does jobs like this one: RELIABLE_RUNS of its successes (not set aside,
    nor unconfirmed: selection/call_endings.py `serves_unconfirmed`; outputs a person judged right count too) are at least
    SAME_JOB similar. Its refusal of the call's input (bad_input) makes the input
    suspect (`ToolExecutionResult.refused_its_job`), and is the caller's mistake
    (`ToolExecutionResult.callers_mistake`), not evidence of what the version is fit for, unless it
    refuses everything of late (`refuses_everything`).

    QA AD: a caller left a key out of a sha1 job. hash_text, which had served 10 such jobs, refused
    the input; the refusal counted against hash_text on the job, and a lowercasing tool (0.37
    similar) that took the input without an error "succeeded": every later call of the job, with
    the right input, went to the lowercasing tool. Decided when the call is planned, from the
    successes selection found nearby, so that the failure mark and the call's outcome, applied by
    separate tasks, read the same answer (workers/outcomes.py). A version that did not do the job
    has its refusals counted: that it refuses such inputs is what they teach (a text tool tried on
    a sort job). QA evolution: a word counter, 0.43 similar, answered vowel-count calls with word
    counts, and after three such successes "did the job": its refusals were the callers' mistakes,
    and a crash of it there would have been evolved for vowel counting."""
    return sum(s >= SAME_JOB for s in e.doing_similarities) >= RELIABLE_RUNS


def may_change_things_for_it(e: CandidateEvidence, namespace: str | None) -> bool:
    """Whether a version may be tried on this job, as far as what it changes goes: one without side
    effects may; one with side effects (`side_effects: true`) only where the call names its
    namespace, or its description matches the job clearly (CLEAR_MATCH), or it does such jobs. A
    fallback that changes something outside itself on a job it was not meant for makes a change
    nobody asked for (QA 63f: a lookup of a customer's tier that crashed fell back to a shipment
    notifier, 0.20 like the job, which sent a shipment notice; an email job, to it at 0.45, which
    sent 20 notices and, "successful", became the email jobs' first choice)."""
    return (not e.manifest.side_effects or e.manifest.name == namespace or e.similarity >= CLEAR_MATCH
            or does_the_job(e))


def proven(e: CandidateEvidence, namespace: str | None, best: Collection[str] = ()) -> bool:
    """Whether a version's record anywhere stands for the job: RELIABLE_RUNS successes of a version
    of the namespace the call names, or of the job's clear best match (`best`). The caller chose
    the tool, or its description is plainly the job, whatever words its successes were recorded
    under: a `call_tool` without a scenario is recorded under the tool's description, which the jobs
    it did, and the calls by scenario after them, match less than SAME_JOB. Its refusal that is the
    caller's mistake evolves nothing (selection/call_endings.py `refused_by_a_doer`; QA 51c: one
    caller's typo evolved a version with 46 successes; QA 51d: so did a typo in a call by scenario
    of a tool whose 25 successes were all calls by name). Nothing else reads it: a success of
    another tool on an input it refused still counts (review 51), as evidence of the job."""
    return (e.manifest.name == namespace or e.key in best) and e.successes >= RELIABLE_RUNS


def refuses_everything(e: CandidateEvidence) -> bool:
    """Whether this version refused REFUSED_IN_A_ROW inputs since its last success: it may be
    broken (a KeyError of its own on every input) rather than every caller wrong, so its refusals
    count again, and a call it fails may evolve it. The input it refused stays suspect: it goes on
    only to tools that do such jobs too (QA final: with every safeguard lifted at once, a tool 0.07
    similar took over a word-reversing job from a broken one with base64, and kept it once the tool
    was mended)."""
    return e.refused_in_a_row >= REFUSED_IN_A_ROW


def does_such_jobs(c: Candidate, namespace: str | None = None) -> bool:
    """Whether a candidate does the call's kind of job: a version of the namespace the call names,
    or one that does such jobs by its record or clearly by its description (at least CLEAR_MATCH).

    Two rules ask it. Only such a candidate is still tried with an input that a tool doing the job
    refused as the caller's mistake: it may take what the first one cannot (a lenient parser after
    a strict one), where any other took such inputs without an error and answered something else,
    or refused them in its turn (QA ops: a lowercasing tool returned a "sha256 checksum"; 11 tools
    refused 176 such inputs in 85 calls, each refusal demoting a tool that never did the job). And
    only such a candidate is charged for crashing as a fallback (`FailureMark.does_such_jobs`).
    The same question as `does_such_jobs_here`, of the plan's candidate, with its answers kept from
    the evidence (`Candidate.does_the_job`, `Candidate.namespace_did_the_job`)."""
    return (c.manifest.name == namespace or c.does_the_job or c.namespace_did_the_job
            or c.breakdown.similarity >= CLEAR_MATCH)


def does_such_jobs_here(e: CandidateEvidence) -> bool:
    """Whether a candidate's evidence, before it is ranked, says it does the call's kind of job: its
    description matches the job clearly, or its namespace or it did such jobs (`does_such_jobs`
    asks it of a ranked candidate, which also counts the namespace a call names)."""
    return e.similarity >= CLEAR_MATCH or namespace_did_the_job(e) or does_the_job(e)


def failed_the_job(e: CandidateEvidence) -> bool:
    """Whether this version failed at jobs like this one (refused them, say) and never did one: a
    version that did them too, and failed them since, is what people's judgements decide
    (`judged_wrong_here`; QA Y: a tool fixed and judged right again was never asked again)."""
    return max(e.failure_similarities, default=0.0) >= SAME_JOB and max(e.success_similarities, default=0.0) < SAME_JOB

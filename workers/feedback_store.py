"""Feedback as stored (FEEDBACK): record a judgement of an exact tool version, score a version for a
scenario, list a tool's entries with their trend. The math is selection/feedback.py; this module
only reads and writes the vector memory (through the pending list when it is unavailable)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from evolution.served_version import meant_version
from selection.feedback import (PERIOD_S, FeedbackRecord, TrendPeriod, TrendPoint, forgiven, judged_calls, payload_value,
                                replaced, trend)
from selection.learner import JUDGED_WRONG, ExecutionRecord
from selection.manifest import split_key, tool_key
from selection.models import Sentiment
from selection.ports import EXECUTIONS, FEEDBACK, StateVersioning, VectorFilter, VectorMemory, VectorPoint
from workers.pending import upsert_or_keep
from workers.store_failures import is_store_failure

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.feedback")

REPORT_SCAN = 10_000  # entries of one tool read for a report
def write_feedback(rt: Runtime, records: Sequence[FeedbackRecord], vectors: Sequence[list[float]] | None = None) -> bool:
    """Store feedback as vectors; the id makes a rewrite replace, never add. False when the vector
    memory was unavailable and the writes were kept for later (workers/pending.py)."""
    if not records:
        return True
    points = [VectorPoint(id=r.id, vector=vectors[i] if vectors else [], payload=r.payload()) for i, r in enumerate(records)]
    return upsert_or_keep(rt, FEEDBACK, points, texts=[r.scenario for r in records])


class JudgedCall(BaseModel):
    """What a judgement of a call's output needs to know of the call: the versions it ran, in order,
    and its scenario ("" when only an older result, stored without it, was found)."""

    call_id: str
    ran: list[str]  # tool keys
    scenario: str = ""
    failed: list[str] = Field(default_factory=list)  # tool keys none of whose attempts in the call succeeded
    # Of those, the ones whose failure was set aside: a refusal of the caller's input (or, found by
    # the outcome feedback alone, an outage the version recovered from).
    set_aside: list[str] = Field(default_factory=list)


def judged_call(rt: Runtime, call_id: str, result_of: Callable[[str], dict[str, Any] | None]) -> JudgedCall | None:
    """The call `call_id`, from its stored result (`result_of`: the result backend, under the call's
    task id, which is its call id unless the caller chose one) or else from the outcome feedback it
    left (a chosen call id); None when neither knows it."""
    result = result_of(call_id)
    if isinstance(result, dict) and isinstance(result.get("attempts"), list):
        attempts = [a for a in result["attempts"] if isinstance(a, dict) and "tool" in a]
        ran = [tool_key(a["tool"], a["version"]) for a in attempts]
        succeeded = {tool_key(a["tool"], a["version"]) for a in attempts if a.get("outcome") == "success"}
        # Found under the task id of a call whose caller chose its call id: the judgement is of that
        # call id, which its outcome and execution records carry (QA I: judged by the task id that
        # `fittest result` asks for, the call's positive outcome still counted beside it).
        own = result.get("call_id")
        refused = {tool_key(a["tool"], a["version"]) for a in attempts if a.get("callers_mistake")}
        return JudgedCall(call_id=own if isinstance(own, str) and own else call_id, ran=ran,
                          scenario=str(result.get("scenario") or ""), failed=sorted(set(ran) - succeeded),
                          set_aside=sorted(refused - succeeded))
    points = rt.memory.scroll(FEEDBACK, filter=VectorFilter.where(call_id=call_id, source="outcome"), limit=50)
    if not points:
        return None
    records = sorted((FeedbackRecord.from_payload(p.id, p.payload) for p in points), key=lambda r: r.timestamp)
    ran = [r.key for r in records]
    failed = set(ran) - {r.key for r in records if r.value > 0}  # an outcome's failure is negative
    return JudgedCall(call_id=call_id, ran=ran, scenario=records[0].scenario, failed=sorted(failed),
                      set_aside=sorted(failed & {r.key for r in records if r.forgiven}))


class UnknownVersion(LookupError):
    """A judgement of a version its tool does not have: refused under `version`, not `tool` (QA
    integrator 10: `version="9.9.9"` was said to be wrong in the field `tool`)."""


def record_tool_feedback(rt: Runtime, tool: str, version: str | None, scenario: str | None,
                         sentiment: Sentiment, reason: str = "", quality: float = 1.0,
                         call: JudgedCall | None = None) -> FeedbackRecord:
    """A person's judgement of `tool@version` in `scenario`; of the output of `call`, if given (it then
    counts in place of that call's outcome feedback: selection/feedback.py).

    Without `call`, the version defaults to the served one and the scenario to the tool's
    description (the tool in general). With it, the version must be one the call ran (default: the
    one of that tool it ran last) and the scenario defaults to the call's: a person who marks a
    call's output wrong means that job, not the tool in general. Raises LookupError for a tool or
    version that does not exist, ValueError for one the call did not run."""
    if call is not None:
        mine = [key for key in call.ran if split_key(key)[0] == tool]
        if not mine:
            ran = ", ".join(call.ran) or "no tool"
            raise ValueError(f"call {call.call_id} ran {ran}, not {tool}")
        if version is not None and tool_key(tool, version) not in mine:
            raise ValueError(f"call {call.call_id} ran {', '.join(mine)}, not {tool_key(tool, version)}")
        version = version or split_key(mine[-1])[1]
        key = tool_key(tool, version)
        if key in call.failed:
            # QA: a positive judgement of a crashed attempt replaced the crash's negative outcome; a
            # negative one counted the failure twice (QA X), as five votes and a failure more.
            # QA ops: "counts against it already" of a refusal set aside as the caller's mistake.
            counted = ("its failure was set aside, as the caller's input's (or an outage's), not the tool's"
                       if key in call.set_aside else "its failure counts against it already")
            raise ValueError(f"{key}'s attempt in call {call.call_id} failed: it gave no output to judge "
                             f"({counted}; to judge the tool for such jobs, leave out the call: --call, or call_id)")
        scenario = scenario or call.scenario or None
    # Without a version: the one serving most of the namespace's calls, during a trial the one it
    # is tried against (QA F8: `feedback add NAME` judged the version serving 25 % of the calls).
    version = version or meant_version(rt.state.promotion(tool), rt.registry, tool, rt.settings.trial_share)
    if version is None:
        raise LookupError(rt.registry.no_tool_named(tool))
    manifest = rt.registry.get(tool_key(tool, version))
    if manifest is None:  # with the versions it has, as `feedback show` and `explain` say it (QA selection F10)
        known = ", ".join(m.version for m in rt.registry.versions(tool))
        if not known:
            raise LookupError(rt.registry.no_tool_named(tool, tool_key(tool, version)))
        raise UnknownVersion(f"{tool} has no version {version!r} (it has {known})")
    # In general: the description stands for the scenario (its vector), marked as such (QA AD: shown
    # as if a job had been worded so, its trailing newline a blank row).
    record = FeedbackRecord.manual(tool, version, scenario or manifest.description.strip(), sentiment, reason, quality,
                                   call.call_id if call else None, general=not scenario)
    if call is not None:  # one judgement per call and version: a second one replaces the first (QA: they added up)
        record.id = f"manual:{call.call_id}:{record.key}"
    write_feedback(rt, [record])
    if call is not None:
        # fittest.record_outcome hands a call's execution records to the learner once it has applied
        # the call's outcome: when they are found, the outcome's feedback entry is stored too, if the
        # call left one (a success below quality 0.5 leaves none), so that one is not waited for
        # (QA: 2.6 s per judgement of such a call, waiting for an entry that never came).
        apply_judgement(rt, call.call_id, record.key, judged_as(record), in_force=bool(record.value))
        # ...and in its version's counters, an output judged wrong is a failure (`fittest tools`)
        rt.state.judge_output(record.key, call.call_id, judged_as(record))  # a success: failed attempts are refused above
    rt.state.note_judgement()  # every selector's cached searches predate it
    return record


def judged_as(record: FeedbackRecord) -> Sentiment:
    """How a judgement of a call's output counts in the counters, the records and a trial: one of
    quality 0 counts for nothing, so the output counts as it ran, as after a positive one (QA AB: a
    negative one of quality 0 still moved a trial from 2/2 to 1/2)."""
    return "negative" if record.value < 0 else "positive"


OUTCOME_WAIT_S = 2.5  # a call's outcome is applied in batches, within about a second of its result


def as_judged(point: VectorPoint, sentiment: Sentiment) -> VectorPoint | None:
    """An execution record as a person's judgement of its output makes it: an output judged wrong is
    no success (it would bring its tool in for similar jobs, count among its namespace's successes
    nearby and in its SPARC history, and teach the tool classifier), and one judged right again is
    its own outcome once more. The outcome as it ran stays in `outcome_success`. None: it says so
    already."""
    ran_ok = bool(point.payload.get("outcome_success", point.payload.get("success")))
    success = ran_ok and sentiment == "positive"
    if point.payload.get("success") == success and point.payload.get("judged") == sentiment:
        return None
    return point.model_copy(update={"payload": {**point.payload, "success": success, "outcome_success": ran_ok,
                                                "judged": sentiment}})


def apply_judgement(rt: Runtime, call_id: str, key: str, sentiment: Sentiment, in_force: bool = True) -> int:
    """What a judgement of `call_id`'s output by `key` changes besides being stored:
    - the call's execution record says what a person judged (`as_judged`; QA: 108 negative
      judgements of a converter's wrong answers, its feedback at -46, and it still served every
      similar call: its judged outputs counted as successes nearby);
    - the outcome feedback the call gave `key` is flagged as replaced, so that it stops counting
      wherever the judgement's own scenario lies: selection sees a judgement only among the entries
      near the scenario it ranks for, and one given under another scenario never was (QA: the
      outcome it replaced went on counting, +25). A judgement not `in_force` (of quality 0, which
      counts for nothing) gives the outcome entry back its place.
    The execution record is looked for up to OUTCOME_WAIT_S while the call's records are stored (in
    batches); the outcome entry is stored before it, so it is not waited for (a success below
    quality 0.5 leaves none), and records stored after that are changed as they are written
    (workers/outcomes.py). The number of records and entries changed."""
    deadline = time.monotonic() + OUTCOME_WAIT_S
    try:
        ran = VectorFilter.where(call_id=call_id, tool=key)
        while not (records := rt.memory.scroll(EXECUTIONS, filter=ran, limit=50)) and time.monotonic() < deadline:
            time.sleep(0.25)
        marked = [judged for p in records if (judged := as_judged(p, sentiment)) is not None]
        if marked:
            rt.memory.upsert(EXECUTIONS, marked)
        outcome = VectorFilter.where(call_id=call_id, source="outcome", tool=key)
        flagged = [p.model_copy(update={"payload": {**p.payload, "replaced": in_force}})
                   for p in rt.memory.scroll(FEEDBACK, filter=outcome, limit=50) if bool(p.payload.get("replaced")) != in_force]
        if flagged:
            rt.memory.upsert(FEEDBACK, flagged)
    except Exception as exc:  # the judgement is stored; near the call's scenario it still replaces the outcome
        if not is_store_failure(exc):
            raise
        log.warning("could not apply the judgement of call %s to its records: %s", call_id, exc,
                    extra={"event": "judgement_unapplied", "call_id": call_id})
        return 0
    return len(marked) + len(flagged)


def _sentiments(judgements: list[VectorPoint]) -> dict[tuple[str, str], Sentiment]:
    """(tool version, call) -> what a person judged of its output, from stored judgements; one of
    quality 0 says nothing (before, it read as negative, `positive` being stored as value > 0)."""
    return {(str(p.payload.get("tool")), str(p.payload["call_id"])): "negative" if value < 0 else "positive"
            for p in judgements if p.payload.get("call_id") and (value := payload_value(p.payload))}


def judgements_of(memory: VectorMemory, call_ids: Sequence[str]) -> dict[tuple[str, str], Sentiment]:
    """What a person judged of each (tool version, call) among `call_ids`: one read of the few
    judgements (the `source` index), whichever came first, the judgement or the call's records."""
    calls = sorted(set(call_ids))
    if not calls:
        return {}
    return _sentiments(memory.scroll(FEEDBACK, filter=VectorFilter.where(source="manual", call_id=calls), limit=len(calls) * 5))


def judgements_known(rt: Runtime, call_ids: Sequence[str]) -> dict[tuple[str, str], Sentiment]:
    """`judgements_of` in the store of `rt`, or none when the store cannot be read (the call's
    records are then kept as they ran; a judgement still replaces its outcome near its scenario,
    and the memory worker's next start applies it, `apply_stored_judgements`)."""
    try:
        return judgements_of(rt.memory, call_ids)
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        return {}


def as_people_judged(records: list[ExecutionRecord], judged: dict[tuple[str, str], Sentiment]) -> list[ExecutionRecord]:
    """`records` (the learner's window, which Redis keeps as the calls ran) with each output a
    person judged wrong (`judged`: `judgements_of` their calls) counted as no success, as its
    stored execution record says (`as_judged`), with the error class `judged_wrong`: the weights
    learn what predicts a right output, and `fittest recommend` names the versions whose outputs
    people reject."""
    return [r.model_copy(update={"success": False, "error_class": JUDGED_WRONG})
            if r.success and judged.get((r.key, r.call_id)) == "negative" else r
            for r in records]


def apply_stored_judgements(memory: VectorMemory, state: StateVersioning | None = None) -> tuple[int, int]:
    """What the judgements already stored should have done, done where it was not: flag the outcome
    entries they replaced, and mark the execution records they judged (`as_judged`). A store an
    earlier release wrote holds judgements made before either existed (QA: after an upgrade, an old
    judgement given under another scenario left its call's outcome counting +40 where one made
    after the upgrade gave +37). Run as the memory worker starts; a person's judgements are few, so
    one scan of their calls' entries. The numbers of outcome entries flagged and records marked.
    With `state`, a store holding judgements that `state` has not counted is counted as judged,
    so that selection looks for them (workers/selector.py `_feedback_nearby`)."""
    judgements = memory.scroll(FEEDBACK, filter=VectorFilter.where(source="manual"), limit=REPORT_SCAN * 10)
    if judgements and state is not None and state.versions().judgements == 0:
        state.note_judgement()  # made before judgements were counted, or counted by a Redis that lost them
    sentiments = _sentiments(judgements)
    if not sentiments:
        return 0, 0
    calls = sorted({call_id for _, call_id in sentiments})
    outcomes = memory.scroll(FEEDBACK, filter=VectorFilter.where(source="outcome", call_id=calls), limit=len(calls) * 50)
    fresh = [p for p in outcomes
             if not p.payload.get("replaced") and (str(p.payload.get("tool")), str(p.payload.get("call_id"))) in sentiments]
    if fresh:
        memory.upsert(FEEDBACK, [p.model_copy(update={"payload": {**p.payload, "replaced": True}}) for p in fresh])
    records = memory.scroll(EXECUTIONS, filter=VectorFilter.where(call_id=calls), limit=len(calls) * 50)
    marked = [point for p in records if (key := (str(p.payload.get("tool")), str(p.payload.get("call_id")))) in sentiments
              and (point := as_judged(p, sentiments[key])) is not None]
    if marked:
        memory.upsert(EXECUTIONS, marked)
    if fresh or marked:
        log.info("applied judgements stored before this release: %d outcome entries flagged, %d execution records marked",
                 len(fresh), len(marked), extra={"event": "stored_judgements_applied", "flagged": len(fresh), "marked": len(marked)})
    return len(fresh), len(marked)


def feedback_score(rt: Runtime, tool: str, version: str, scenario: str) -> float:
    """The feedback points of `tool@version` for `scenario`, in [-50, 50], as selection computes them."""
    key = tool_key(tool, version)
    return rt.selector.feedback_points([key], rt.embedder.embed_one(scenario)).get(key, 0.0)


class FeedbackReport(BaseModel):
    tool: str
    entries: list[FeedbackRecord]  # newest first
    total: int  # entries in force
    replaced: int = 0  # outcome entries a judgement of their call took the place of (not listed, not in the trend)
    forgiven: int = 0  # negative outcome entries of an outage the tool recovered from, or of a refused input of a
    # job it does (selection/job_record.py `does_the_job`): not listed, not in the trend
    trend: list[TrendPoint]  # oldest first, one per period with entries
    per: TrendPeriod = "day"  # the trend's period; absent from a worker of an earlier release
    # `replaced` and `forgiven` per version (QA ops: `feedback show NAME@VERSION` gave the tool's as
    # the version's); absent from a worker of an earlier release
    replaced_by_version: dict[str, int] = Field(default_factory=dict)
    forgiven_by_version: dict[str, int] = Field(default_factory=dict)


class FeedbackShown(FeedbackReport):
    """`fittest feedback show --json`: the report, with each version's quality, under POSITIVE_QUALITY
    of which its successes give no entry (QA final)."""

    quality: dict[str, float]


def feedback_report(rt: Runtime, tool: str, limit: int = 50, per: TrendPeriod = "day") -> FeedbackReport:
    """The entries that count in selection's scores: an outcome entry whose call a person judged is
    left out, as selection leaves it out."""
    points = rt.memory.scroll(FEEDBACK, filter=VectorFilter.where(name=tool), limit=REPORT_SCAN)
    judged = judged_calls(p.payload for p in points)
    left_out = [p for p in points if replaced(p.payload, judged)]
    kept = [p for p in points if not replaced(p.payload, judged)]
    set_aside = [p for p in kept if forgiven(p.payload)]
    in_force = [p for p in kept if not forgiven(p.payload)]
    records = sorted((FeedbackRecord.from_payload(p.id, p.payload) for p in in_force), key=lambda r: -r.timestamp)
    return FeedbackReport(tool=tool, entries=records[:limit], total=len(records), replaced=len(left_out),
                          forgiven=len(set_aside), trend=trend(records, PERIOD_S[per]), per=per,
                          replaced_by_version=dict(Counter(version_of(p) for p in left_out)),
                          forgiven_by_version=dict(Counter(version_of(p) for p in set_aside)))


def version_of(point: VectorPoint) -> str:
    """The version of a feedback point's tool (its payload's `tool` is NAME@VERSION)."""
    return str(point.payload.get("version") or split_key(str(point.payload.get("tool", "")))[1])

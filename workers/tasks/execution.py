"""The `execution` queue: run one candidate of a plan, then hand the call on.

A call never waits on a subtask: success returns the result, a failure reports itself to the
feedback queue (high priority) and replaces this task with the next attempt, or with evolution,
or ends the call with every attempt listed. An attempt whose tool killed the processes running it
too often is recorded as a crash without running it again (workers/attempt_deaths.py counts the
deaths, and says which attempts run their python tool in a process of their own).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from celery import Task

from selection.call_endings import (effect_unknown, effect_unknown_message, failed_change, folders_gone_message, input_refused_message,
                                    kept_to_the_change, named_held_back, no_tool_meant_for_it, refused_for_its_namespace,
                                    refused_by_a_doer, refused_input, refuser, served_by_whom_note, serves_unconfirmed, targeted, tools_dir_gone_message,
                                    took_a_refused_input_note, why_it_failed)
from selection.job_record import does_such_jobs
from selection.manifest import ToolManifest
from selection.models import AttemptSummary, CallPlan, CallResult, CallStatus, Candidate, FailureClass, FailureCount, FailureMark, OutcomeRecord, ToolExecutionResult
from selection.ports import StateStore
from selection.registry import ToolRegistry
from workers.app import PRIORITY_HIGH, PRIORITY_LOW, app
from workers.attempt_deaths import (ExecuteRequest, earlier_deliveries, end_if_orphaned, isolation_reason, mark_run,
                                    too_many_deaths)
from workers.call_ends import call_ended, no_candidates
from workers.rescue import CallStep, delivered_again, hand_on, send_recorded
from workers.runners import RunLimits, RunOutcome, run_tool
from workers.runtime import runtime
from workers.selector import attempt_timeout
from workers.state.inflight import AttemptDeaths

log = logging.getLogger("fittest.attempt")

_added_originals: dict[str, ToolManifest] = {}
_looked_for: dict[str, float] = {}  # namespace -> when the tools directory was last read for it in vain
LOOK_AGAIN_S = 60.0  # a tools directory of thousands of manifests takes seconds to read


def original_of(manifest: ToolManifest, registry: ToolRegistry, tools_dir: Path) -> ToolManifest | None:
    """The original of an evolved version's namespace (None for a version no evolution made), which
    tells whether it runs that code unchanged, in the process (workers/runners/isolated.py). This
    process read the tools directory as it started: the original of a tool the tools watch added
    since is read from the directory now, once (QA: an evolved version of such a tool ran in a
    subprocess, 124 ms a call against 1.9 ms after a restart)."""
    if manifest.parent_version is None:
        return None
    original = registry.original(manifest.name) or _added_originals.get(manifest.name)
    if original is None and time.monotonic() - _looked_for.get(manifest.name, -LOOK_AGAIN_S) >= LOOK_AGAIN_S:
        if (original := ToolRegistry.load([tools_dir]).original(manifest.name)) is not None:
            _added_originals[manifest.name] = original
        else:  # not there (removed since): run isolated, and read the directory again only after a while
            _looked_for[manifest.name] = time.monotonic()
    return original


def run_attempt(plan: CallPlan, index: int, mark: Callable[[str], None] | None = None,
                isolated: str | None = None) -> ToolExecutionResult:
    """Run the candidate's tool; `mark` (workers/attempt_deaths.py `mark_run`) is given its attempt
    id first. With `isolated` (why: `isolation_reason`), a python tool runs in a process of its own."""
    rt = runtime()
    settings = rt.settings
    candidate = plan.candidates[index]
    manifest = candidate.manifest
    timeout_s = candidate.timeout_s
    if timeout_s is None:  # a degraded plan, or one queued by a worker from before the timeout travelled in it
        stats, _ = rt.state.stats_and_breakers([candidate.key])
        timeout_s = attempt_timeout(settings, rt.registry, manifest, stats[candidate.key])
    aid = plan.attempt_id(index)
    if mark is not None:
        mark(aid)
    try:
        outcome = run_tool(manifest, plan.request.input, timeout_s=timeout_s, limits=RunLimits.from_settings(settings),
                           original=original_of(manifest, rt.registry, settings.tools_dir), isolated=isolated is not None,
                           parent_http=candidate.parent_http)
    finally:
        end_if_orphaned(aid)
    if isolated is None or manifest.implementation.kind != "python":
        return record_attempt(plan, index, outcome, timeout_s=round(timeout_s, 3))
    # A crash where nothing else ran, after a process running it died: the tool's doing, the process's
    # death too. Its breaker opens, as when its deaths are too many (`crashed_attempt`).
    crashed = outcome.error_class is FailureClass.crash
    if crashed:
        outcome.error_message = f"{outcome.error_message} (run in a process of its own: {isolated})"
    return record_attempt(plan, index, outcome, opens_breaker=crashed, timeout_s=round(timeout_s, 3), isolated=True)


def crashed_attempt(plan: CallPlan, index: int, deaths: AttemptDeaths, ran_isolated: bool = False) -> ToolExecutionResult:
    """The attempt whose tool killed the process running it `deaths.count` times, recorded as a
    crash without running it again (its run time: that of the last run, cut short). Its breaker
    opens at once: each further call of it would cost a worker process, or a whole worker, again
    (QA recheck 47: three calls of a tool that killed its executor's main process, each costing two
    restarts, stopped a `fittest up` stack while its breaker waited for five failures)."""
    times = "once" if deaths.count == 1 else f"{deaths.count} times"
    outcome = RunOutcome.fail(
        FailureClass.crash,
        f"the worker process running this attempt died {times} (last: {deaths.reason}); "
        "not run again (a signal or os._exit in the tool?)",
    ).model_copy(update={"elapsed_ms": deaths.ms})
    isolation = {"isolated": True} if ran_isolated else {}
    return record_attempt(plan, index, outcome, opens_breaker=True, deaths=deaths.count, **isolation)


def record_attempt(plan: CallPlan, index: int, outcome: RunOutcome, *, opens_breaker: bool = False,
                   **metadata: Any) -> ToolExecutionResult:
    """The attempt's result, with its run time and breaker outcome recorded (once per attempt id);
    with `opens_breaker`, its failure opens the breaker whatever FITTEST_BREAKER_THRESHOLD says."""
    rt = runtime()
    settings = rt.settings
    candidate = plan.candidates[index]
    manifest = candidate.manifest
    refusal = refused_input(plan)  # an earlier refusal of this input by a tool that does such jobs
    # A success on it is set aside when a version that does such jobs by its record refused it; one
    # that only matches them best may be the one that is wrong (a version evolved to take the input
    # succeeds after its parent refused it, and that success counts among its own).
    refused_by = refuser(plan)
    declared = outcome.error_class is FailureClass.bad_input and manifest.declares_refused(plan.request.input)
    result = ToolExecutionResult(
        attempt_id=plan.attempt_id(index),
        call_id=plan.request.call_id,
        tool=manifest.name,
        version=manifest.version,
        success=outcome.success,
        result=outcome.output if outcome.success else None,
        error_class=outcome.error_class,
        error_message=outcome.error_message,
        execution_time_ms=outcome.elapsed_ms,
        complexity=float(plan.features.get("complexity", 0.0) or 0.0),
        metadata={"attempt": index, **metadata, "policy": plan.policy},
        refused_its_job=candidate.refused_its_job(outcome.error_class),
        # An input taken for the caller's mistake is the caller's mistake for every tool after it.
        callers_mistake=candidate.callers_mistake(outcome.error_class) or declared
        or (outcome.error_class is FailureClass.bad_input and refusal is not None and refusal.callers_mistake),
        refused_as_declared=declared,
        took_a_refused_input=outcome.success and not candidate.does_the_job and refused_by is not None and refused_by.does_the_job,
    )
    # The caller's fault is not the tool's; a redelivered attempt feeds the breaker once.
    feeds_breaker = outcome.error_class is not FailureClass.bad_input
    threshold = 1 if opens_breaker else settings.breaker_threshold
    if opens_breaker:
        rt.run_marks.note_killer(candidate.key)
    breaker = rt.state.record_run(candidate.key, outcome.elapsed_ms, outcome.success if feeds_breaker else None,
                                  threshold, settings.breaker_cooldown_s, attempt_id=result.attempt_id)
    # A probe whose outcome the breaker has now (closed or open again), or that said nothing of the
    # tool, lets the next cool-down's probe through (QA X: one was held back a cool-down).
    if not feeds_breaker or plan.is_probe(candidate.key):
        rt.state.release_lock(probe_lock(candidate.key), plan.request.call_id)
    if breaker is not None:  # "recovered": the memory worker forgives the outage (workers/outage.py)
        result.metadata["breaker"] = breaker
    apart = not result.success and failure_mark(plan, result).counts_as() is not FailureCount.failure
    rt.metrics.attempt(result, quality=candidate.breakdown.quality, counted_apart=apart)
    log_attempt(result, plan.policy, candidate.probability, breaker)
    return result


def log_attempt(result: ToolExecutionResult, policy: str, probability: float, breaker: str | None) -> None:
    """One line per attempt. A tool's failure is a warning that says what failed, so that an operator
    alerting on warnings sees it and reads why from the log (QA ops: "attempt" at info level, the
    tool's error, its traceback's last line or a timeout, only in the caller's result); a refusal
    of the caller's mistake is not the tool's failure, and stays at info."""
    level = logging.WARNING if result.error_class is not None and not result.callers_mistake else logging.INFO
    if result.success:
        said = f"{result.key} succeeded"
    else:
        said = f"{result.key} failed ({result.error_class.value if result.error_class else 'no class'}): " \
               f"{result.error_message or 'no message'}"
    log.log(level, "attempt %s of call %s: %s", result.attempt_id, result.call_id, said, extra={
        "event": "attempt",
        "call_id": result.call_id,
        "attempt_id": result.attempt_id,
        "tool": result.tool,
        "version": result.version,
        "outcome": "success" if result.success else "failure",
        "error_class": result.error_class.value if result.error_class else None,
        "error_message": result.error_message,
        "callers_mistake": result.callers_mistake,
        "execution_time_ms": round(result.execution_time_ms, 2),
        "policy": policy,
        "probability": probability,  # with which the policy put this candidate in this place
        "breaker": breaker,  # its circuit breaker after this outcome ("open": it is held back now; "recovered": closed again)
    })


def send_outcome(plan: CallPlan) -> None:
    from workers.tasks.feedback import record_outcome

    send_recorded(record_outcome, [outcome_record(plan).model_dump(mode="json")], priority=PRIORITY_LOW)  # resent if lost


def outcome_record(plan: CallPlan) -> OutcomeRecord:
    """The finished call's record, with the failures its failure marks count apart as another tool's job."""
    record = OutcomeRecord.from_plan(plan)
    record.not_its_job = [a.attempt_id for a in plan.attempts
                          if not a.success and failure_mark(plan, a).counts_as() is FailureCount.not_its_job]
    return record


def send_failure(plan: CallPlan, result: ToolExecutionResult) -> None:
    from workers.tasks.feedback import mark_failure

    send_recorded(mark_failure, [failure_mark(plan, result).model_dump(mode="json")], priority=PRIORITY_HIGH)  # resent if lost


def failure_mark(plan: CallPlan, result: ToolExecutionResult) -> FailureMark:
    """What a failed attempt tells the memory worker, which counts it as the tool's failure or apart."""
    return FailureMark(
        attempt_id=result.attempt_id,
        call_id=result.call_id,
        tool=result.tool,
        version=result.version,
        scenario=plan.request.scenario,
        error_class=result.error_class,
        error_message=result.error_message or "",
        input=plan.request.input,
        features=plan.features,
        targeted=targeted(plan, result),
        does_such_jobs=does_such_jobs(plan.candidates[result.metadata.get("attempt", 0)], plan.request.namespace),
        callers_mistake=result.callers_mistake,
        refused_as_declared=result.refused_as_declared,
    )


def finish(plan: CallPlan, status: CallStatus, message: str = "") -> dict[str, Any]:
    send_outcome(plan)
    result = CallResult.from_plan(plan, status, message=message)
    call_ended(result.call_id, result.status, why_it_failed(plan) if result.status == "failed" else "",
               len(attempts_before_evolution(plan)) + len(result.attempts), result.elapsed_ms, result.tool, result.version)
    return result.model_dump(mode="json")


def attempts_before_evolution(plan: CallPlan) -> list[AttemptSummary]:
    """The round a call retried after its evolution made first (its report carries it), so that
    counts of the call's attempts take both rounds (QA: the report and the metrics counted 1)."""
    if not plan.request.after_evolution or plan.evolution_report is None:
        return []
    return list(plan.evolution_report.failed_attempts)


def _died_then_passed_over(task: Task, plan: CallPlan, index: int, turn: int | None) -> ToolExecutionResult | None:
    """The crash of this message's own attempt when it ran in this call, killed the processes running
    it, and is passed over now (its breaker opened meanwhile, by another call of it): the call had
    listed it among the versions not tried, with no attempt and no failure counted (QA 48 recheck)."""
    if turn == index or index >= len(plan.candidates) or delivered_again(task) is None:
        return None
    deaths = runtime().inflight.deaths(plan.attempt_id(index))
    if deaths.count == 0:
        return None
    key = plan.candidates[index].key
    for skipped in (plan.held_back, plan.passed_over, plan.code_missing):
        if key in skipped:
            skipped.remove(key)
    return crashed_attempt(plan, index, deaths)


@app.task(bind=True, base=CallStep, name="fittest.execute", Request=ExecuteRequest)
def execute(self: Task, plan_data: dict[str, Any], index: int) -> Any:
    plan = CallPlan.model_validate(plan_data)
    # A redelivered attempt finds its own result already in the plan only if a previous delivery
    # replaced itself; otherwise it runs again under the same attempt id (effects apply once),
    # unless its call has ended meanwhile (CallStep ignores it then), or its tool killed the
    # process running it too often (recorded as a crash instead, once per attempt id too).
    plan.attempts = [a for a in plan.attempts if a.metadata.get("attempt", -1) < index]
    settings = runtime().settings
    turn = next_to_run(plan, index, runtime().state, settings.breaker_cooldown_s, code_gone(plan), settings.max_timeout_s)
    if (died := _died_then_passed_over(self, plan, index, turn)) is not None:
        result = died
    elif turn is None:
        return after_last_attempt(self, plan)
    else:
        index = turn
        returned = earlier_deliveries(self, plan, index)
        if returned is not None and too_many_deaths(plan, index, returned.deaths):
            # its last run was isolated when a death came before it, or as a killer's probe
            ran_isolated = returned.deaths.count > 1 or isolation_reason(plan, index, None) is not None
            result = crashed_attempt(plan, index, returned.deaths, ran_isolated)
        else:
            result = run_attempt(plan, index, mark_run(self), isolated=isolation_reason(plan, index, returned))
    plan.attempts.append(result)
    if result.success:
        result.unconfirmed = serves_unconfirmed(plan, plan.candidates[index], result)
        for note in (took_a_refused_input_note(plan, result), served_by_whom_note(plan, plan.candidates[index], result)):
            if note is not None:
                plan.notes.append(note)
        return finish(plan, "success")

    send_failure(plan, result)
    if index < last_index(plan) and refused_for_its_namespace(plan) is None and effect_unknown(plan) is None:
        return hand_on(self, execute.si(plan.model_dump(mode="json"), index + 1))
    return after_last_attempt(self, plan)


def probe_lock(key: str) -> str:
    """The lock a call holds while it probes `key`'s half-open breaker (one probe at a time)."""
    return f"probe:{key}"


PROBE_MARGIN_S = 30.0  # past an attempt's timeout: its tool's kill, and its outcome's record


def probe_hold_s(candidate: Candidate, cooldown_s: float, max_timeout_s: float | None) -> float:
    """How long a probe's lock lasts unless its outcome releases it (`record_attempt`): its
    attempt's longest run, when that is longer than the cool-down. Held one cool-down, a hanging
    tool (the usual reason a breaker opens on timeouts) got a new probe every cool-down while the
    earlier ones still hung, each holding an executor (QA 59b F3: three at once)."""
    timeout_s = candidate.timeout_s or max_timeout_s
    return cooldown_s if timeout_s is None else max(cooldown_s, timeout_s + PROBE_MARGIN_S)


def last_index(plan: CallPlan) -> int:
    """The index of the call's last candidate to try: `max_attempts` counts the attempts that ran,
    so each candidate passed over for its open breaker lets one more through (the versions that
    selection held back are not candidates, and use up nothing), and so does each one passed over
    with an input refused as the caller's mistake (`next_to_run`). Nor does a half-open version
    run as its breaker's probe (`plan.is_probe`: placed first by selection, run or passed over, or
    taken where the call came to it): a call the next candidate would have served is served by it
    (QA X: with `max_attempts` 1, a probe that failed failed the call, and started an evolution)."""
    held = {*plan.held_back, *plan.passed_over, *plan.code_missing}
    free = sum(1 for c in plan.candidates if c.key in held or plan.is_probe(c.key))
    return min(len(plan.candidates), plan.request.max_attempts + free) - 1


def code_gone(plan: CallPlan) -> set[str]:
    """The candidates whose code is not there to run: those in FITTEST_TOOLS_DIR while it is not
    there (moved away for a deploy, say), which the watch keeps registered as last read
    (workers/tool_watch.py), and any other version whose tool folder is gone, such as an evolved
    version's in the data directory, which no watch drops. They cannot run until it is back, which
    is not their fault (QA recheck: 13 attempts of 3 calls failed with "No module named ..." or
    "can't open file", and took a tool from 1.00 to 0.90; QA evolution: an evolved version whose
    folder was removed crashed on every call, 0.94 -> 0.64)."""
    rt = runtime()
    tools_dir = rt.settings.tools_dir
    inside: set[str] = set()
    if not tools_dir.is_dir():
        inside = {c.key for c in plan.candidates
                  if (source := rt.registry.source(c.key)) is not None and Path(source).is_relative_to(tools_dir)}
        if inside and (note := tools_dir_gone_message(tools_dir, inside)) not in plan.notes:
            plan.notes.append(note)
    elsewhere = {c.key for c in plan.candidates if c.key not in inside and c.manifest.implementation.kind != "http"
                 and c.manifest.tool_dir is not None and not Path(c.manifest.tool_dir).is_dir()}
    if elsewhere and (note := folders_gone_message(plan, elsewhere)) not in plan.notes:
        plan.notes.append(note)
    return inside | elsewhere


def next_to_run(plan: CallPlan, index: int, state: StateStore, cooldown_s: float,
                cannot_run: Collection[str] = (), max_timeout_s: float | None = None) -> int | None:
    """The index of the first candidate from `index` on that may run now, each one held back by its
    breaker added to `plan.held_back`; None when none is left to try. After a tool that does the
    job refused the input as the caller's mistake, only the tools that do such jobs too are tried
    with it (selection/job_record.py `does_such_jobs`): the others go to `plan.passed_over`, and
    those that `cannot_run` (`code_gone`) to `plan.code_missing`.

    Selection leaves out the versions whose breaker is open, but the calls planned before it opened
    (a burst of calls to a failing tool, ranked together) would each still run it: reading the
    breakers again at each turn is one read of the store, and stops the burst once the threshold is
    reached. A half-open breaker (its cool-down over) lets one call through, the probe whose
    outcome closes or re-opens it: the call that comes to run it takes the probe (a lock, which a
    redelivery of the same call takes again, held while the attempt may run: `probe_hold_s`), and
    the others pass it over."""
    if index > last_index(plan):
        return None
    _, breakers = state.stats_and_breakers([c.key for c in plan.candidates[index:]])
    refused = refused_input(plan) is not None
    changer = failed_change(plan)
    while index <= last_index(plan):
        key = plan.candidates[index].key
        if changer is not None and plan.candidates[index].manifest.name != changer.tool:
            index += 1  # another tool would make another change (`failed_change`)
            continue
        skipped = plan.code_missing if key in cannot_run else plan.passed_over
        if key in cannot_run or (refused and not does_such_jobs(plan.candidates[index], plan.request.namespace)):
            if key not in skipped:  # a redelivered step passes it over again
                skipped.append(key)
            index += 1
            continue
        breaker = breakers.get(key, "closed")
        if breaker == "closed":
            return index
        hold_s = probe_hold_s(plan.candidates[index], cooldown_s, max_timeout_s)
        if breaker == "half_open" and state.acquire_lock(probe_lock(key), plan.request.call_id, hold_s, reclaim=True):
            if not plan.is_probe(key):
                plan.probed.append(key)
            return index
        plan.held_back.append(key)
        why = "is open" if breaker == "open" else "is half-open and another call probes it"
        log.info("call %s: %s passed over, its circuit breaker %s", plan.request.call_id, key, why,
                 extra={"event": "attempt_held_back", "call_id": plan.request.call_id, "tool": key, "attempt": index,
                        "breaker": breaker})
        index += 1
    return None


def after_last_attempt(task: Task, plan: CallPlan) -> Any:
    """The call after its last candidate failed or was held back: evolution, or its end."""
    if not plan.attempts:  # every candidate left was held back by its breaker: nothing ran
        return no_candidates(plan)
    settings = runtime().settings
    # An input refused as the caller's mistake is not for an evolution to make a version take (QA
    # ops: 73 of 73 such calls evolved the tool that does the job, each a no_fix in its changelog);
    # a version that refuses every input of late may be broken, and is.
    evolves = settings.evolution_enabled and not plan.request.after_evolution and not plan.evolved
    nobodys = no_tool_meant_for_it(plan)
    if (unknown := effect_unknown(plan)) is not None:  # another tool, or an evolved version, would do the job again
        return finish(plan, "failed", message=f"{effect_unknown_message(unknown)} ({attempts_made(plan)}{named_held_back(plan)})")
    if evolves and not refused_by_a_doer(plan) and nobodys is None:
        from workers.tasks.evolution import end_without_evolution, prepare_evolution

        ended = end_without_evolution(plan)  # no mutator answers its failures: no round trip for that
        return ended if ended is not None else hand_on(task, prepare_evolution.si(plan.model_dump(mode="json")))
    failed = f"every candidate failed ({attempts_made(plan)}){named_held_back(plan)}{kept_to_the_change(plan)}"
    return finish(plan, "failed", message=refused_for_its_namespace(plan) or input_refused_message(plan)
                  or (f"{failed}; {nobodys}" if nobodys and evolves else failed))


def _attempts(n: int) -> str:
    return f"{n} attempt{'s' if n != 1 else ''}"


def attempts_made(plan: CallPlan) -> str:
    """How many attempts the call made, the round before its evolution included: the result
    shows that round too (its `evolution.failed_attempts`), and the count should match it."""
    before = len(attempts_before_evolution(plan))
    after = len(plan.attempts)
    if not before:
        return _attempts(after)
    report = plan.evolution_report
    if report is not None and report.status == "reused":  # no evolution ran: a version served was not tried (QA evolution L4)
        return f"{_attempts(before)}, then {_attempts(after)} retried with {report.version}"
    return f"{_attempts(before)} before the evolution, {_attempts(after)} after it"

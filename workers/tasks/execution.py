"""The `execution` queue: run one candidate of a plan, then hand the call on.

A call never waits on a subtask: success returns the result, a failure reports itself to the
feedback queue (high priority) and replaces this task with the next attempt, or with evolution,
or ends the call with every attempt listed.

A python tool runs inside the pool process (workers/runners/python.py), so a tool that kills its
process (a segfault, `os._exit`) takes the attempt's message with it: the broker gives it back
(task_reject_on_worker_lost) and the next delivery would run the tool again, and die again, for
ever. So the worker counts each death of the pool process running an attempt (`ExecuteRequest`,
in the worker's main process), and an attempt delivered again after CRASH_AFTER_DEATHS of them is
not run: it is recorded as failed with the class `crash`, and the call goes on as after any
failed attempt. A tool that kills the worker's main process leaves no process to count its death:
the mark of its run, left behind (workers/state/run_marks.py), counts it at the next delivery. An
attempt whose process died, or whose worker died while it ran, runs its python tool in a process
of its own when it comes back, so that a tool killing its parent or its process group takes only
that process, or the pool process, whose death is then its own.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, NamedTuple

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import WorkerLostError
from celery import Task
from celery.signals import worker_process_init, worker_shutting_down
from celery.worker.request import Request

from selection.call_endings import (folders_gone_message, input_refused_message, no_tool_meant_for_it, refused_for_its_namespace,
                                    refused_by_a_doer, refused_input, refuser, served_by_whom_note, serves_unconfirmed, targeted, tools_dir_gone_message,
                                    took_a_refused_input_note)
from selection.manifest import ToolManifest
from selection.models import AttemptSummary, CallPlan, CallResult, CallStatus, FailureClass, FailureCount, FailureMark, OutcomeRecord, ToolExecutionResult
from selection.ports import StateStore
from selection.registry import ToolRegistry
from selection.job_record import does_such_jobs
from workers.app import PRIORITY_HIGH, PRIORITY_LOW, app
from workers.dying import is_dying
from workers.group_stop import shutdown_began
from workers.rescue import CallStep, delivered_again, hand_on, send_recorded
from workers.runners import RunLimits, RunOutcome, run_tool
from workers.runners.executable import remove_left_behind
from workers.runtime import runtime
from workers.selector import attempt_timeout
from workers.state.inflight import AttemptDeaths
from workers.state.run_marks import RunMark, message_key, worker_key
from workers.tasks.common import no_candidates

log = logging.getLogger("fittest.attempt")

# An attempt whose pool process died this often is not run again. One death is not the tool's
# doing for sure (an operator or the OOM killer may kill a pool process; the step must then just
# run again, as the chaos bench expects); the same attempt killing its process twice is. A breaker's
# probe is one run that asks whether a version that failed again and again is back: one death answers.
CRASH_AFTER_DEATHS = 2
PROBE_CRASH_AFTER_DEATHS = 1


def attempt_id(plan: CallPlan, index: int) -> str:
    """Stable across redeliveries of the same attempt, so its effects apply once; the retry of a
    call after its evolution numbers its attempts apart (`e0`, `e1`, ...)."""
    round_ = "e" if plan.request.after_evolution else ""
    return f"{plan.request.call_id}:{round_}{index}"


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
    """Run the candidate's tool; `mark` (`_mark_run`) is given its attempt id first. With `isolated`
    (why: `_isolated`), a python tool runs in a process of its own."""
    rt = runtime()
    settings = rt.settings
    candidate = plan.candidates[index]
    manifest = candidate.manifest
    timeout_s = candidate.timeout_s
    if timeout_s is None:  # a degraded plan, or one queued by a worker from before the timeout travelled in it
        stats, _ = rt.state.stats_and_breakers([candidate.key])
        timeout_s = attempt_timeout(settings, rt.registry, manifest, stats[candidate.key])
    aid = attempt_id(plan, index)
    if mark is not None:
        mark(aid)
    try:
        outcome = run_tool(manifest, plan.request.input, timeout_s=timeout_s, limits=RunLimits.from_settings(settings),
                           original=original_of(manifest, rt.registry, settings.tools_dir), isolated=isolated is not None)
    finally:
        _end_if_orphaned(aid)
    if isolated is None or manifest.implementation.kind != "python":
        return record_attempt(plan, index, outcome, timeout_s=round(timeout_s, 3))
    # A crash where nothing else ran, after a process running it died: the tool's doing, the process's
    # death too. Its breaker opens, as when its deaths are too many (`crashed_attempt`).
    crashed = outcome.error_class is FailureClass.crash
    if crashed:
        outcome.error_message = f"{outcome.error_message} (run in a process of its own: {isolated})"
    return record_attempt(plan, index, outcome, opens_breaker=crashed, timeout_s=round(timeout_s, 3), isolated=True)


_pool_parent: int | None = None  # the worker's main process, in a pool process of a prefork worker


@worker_shutting_down.connect
def _note_stopping(sender: Any = None, **_: Any) -> None:
    """Tell Redis this worker is being stopped, from a thread: the signal handler this runs in may
    have interrupted a Redis call of the main thread, whose connection it must not share."""
    worker = worker_key(str(sender), os.getpid())
    threading.Thread(target=_write_stopping, args=(worker,), name="fittest-stopping", daemon=True).start()


def _write_stopping(worker: str) -> None:
    try:
        runtime().run_marks.stopping(worker)
    except Exception as error:  # Redis away: a kill that ends the stop counts as a death, as before
        log.warning("worker %s: its stop not noted: %s: %s", worker, type(error).__name__, error)


@worker_process_init.connect
def _note_pool_parent(**_: Any) -> None:
    global _pool_parent
    _pool_parent = os.getppid()
    # A pool process starts after one died, or its worker did: what their runs left goes.
    remove_left_behind()


def _end_if_orphaned(aid: str) -> None:
    """End this pool process, recording nothing, when its worker's main process died while the tool
    ran (a tool that kills it, QA live F3): the worker's message is given back, and its next
    delivery counts the death (workers/state/run_marks.py). Recorded by this orphan, the attempt's
    outcome (applied once per attempt id) would stand for the attempt in place of its crash. A
    parent killed a moment ago is still this process's parent: its death is read from /proc."""
    if _pool_parent is not None and (os.getppid() != _pool_parent or is_dying(_pool_parent)):
        log.warning("attempt %s: the worker running it died while its tool ran; this pool process ends", aid,
                    extra={"event": "attempt_orphaned", "attempt_id": aid})
        os._exit(70)


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
    result = ToolExecutionResult(
        attempt_id=attempt_id(plan, index),
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
        callers_mistake=candidate.callers_mistake(outcome.error_class)
        or (outcome.error_class is FailureClass.bad_input and refusal is not None and refusal.callers_mistake),
        took_a_refused_input=outcome.success and not candidate.does_the_job and refused_by is not None and refused_by.does_the_job,
    )
    # The caller's fault is not the tool's; a redelivered attempt feeds the breaker once.
    feeds_breaker = outcome.error_class is not FailureClass.bad_input
    threshold = 1 if opens_breaker else settings.breaker_threshold
    if opens_breaker:
        rt.run_marks.note_killer(candidate.key)
    breaker = rt.state.record_run(candidate.key, outcome.elapsed_ms, outcome.success if feeds_breaker else None,
                                  threshold, settings.breaker_cooldown_s, attempt_id=result.attempt_id)
    if not feeds_breaker:  # a probe that said nothing of the tool: the next call probes it (QA X: held back a cool-down)
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

    record = OutcomeRecord.from_plan(plan)
    send_recorded(record_outcome, [record.model_dump(mode="json")], priority=PRIORITY_LOW)  # resent if lost


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
    )


def finish(plan: CallPlan, status: CallStatus, message: str = "") -> dict[str, Any]:
    send_outcome(plan)
    result = CallResult.from_plan(plan, status, message=message)
    runtime().metrics.call(result.status, len(attempts_before_evolution(plan)) + len(result.attempts),
                           result.elapsed_ms, result.tool)
    return result.model_dump(mode="json")


def attempts_before_evolution(plan: CallPlan) -> list[AttemptSummary]:
    """The round a call retried after its evolution made first (its report carries it), so that
    counts of the call's attempts take both rounds (QA: the report and the metrics counted 1)."""
    if not plan.request.after_evolution or plan.evolution_report is None:
        return []
    return list(plan.evolution_report.failed_attempts)


class ExecuteRequest(Request):
    """An execute step as the worker's main process holds it: when the pool process running it
    dies (WorkerLostError; Celery then gives the message back to the broker), the death is counted
    for its attempt before the message goes back, so that its next delivery reads it."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> Any:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):  # how billiard hands over the pool's errors
            exc = exc.exc
        if isinstance(exc, WorkerLostError):
            self._count_death(exc)
        return super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    # However a step ends, its message is acknowledged or rejected by the main process (Celery's
    # request class for the pool overrides `on_success` without calling this one's).
    def acknowledge(self) -> None:
        self._run_ended(at_once=False)
        super().acknowledge()

    def reject(self, requeue: bool = False) -> None:
        self._run_ended(at_once=requeue)  # back to its queue: its next delivery must not read the mark
        super().reject(requeue)

    def _run_ended(self, at_once: bool) -> None:
        """The worker is done with this message: its tool's run, if it ran one, did not take the
        worker with it (workers/state/run_marks.py)."""
        marks = runtime().run_marks
        try:
            # as the pool process's mark names them (`_mark_run`)
            keys = message_key(self.id, str(self.message.delivery_tag)), worker_key(self.hostname, os.getpid())
            (marks.cleared if at_once else marks.ended)(*keys)
        except Exception as error:  # never in the way of the step's end: the mark expires
            log.warning("call %s: its run's mark not cleared: %s: %s", self.id, type(error).__name__, error)

    def _count_death(self, exc: WorkerLostError) -> None:
        # billiard says "Worker exited prematurely: signal 11 (SIGSEGV) Job: 7."; the middle is the news.
        how = re.sub(r"^Worker exited prematurely: |\s*Job: \d+\.?$", "", str(exc)) or type(exc).__name__
        ran_ms = (time.time() - self.time_start) * 1000 if self.time_start else 0.0
        try:
            args = dict(zip(("plan_data", "index"), self.args)) | dict(self.kwargs)
            plan, index = CallPlan.model_validate(args["plan_data"]), int(args["index"])
            # The attempt that ran, as its pool process marked it: not the message's own when that one's
            # breaker had opened and the next candidate ran in its place (its deaths were then counted
            # against the one passed over, and the killer ran again at every delivery).
            message = message_key(self.id, str(self.message.delivery_tag))
            mark = runtime().run_marks.last_run(message)
            aid = mark.attempt_id if mark is not None else attempt_id(plan, index)
            if shutdown_began() and runtime().run_marks.first_stop(aid, mark.run if mark is not None else message):
                # its worker is being stopped (a cold shutdown ends its pool): the stop's doing, once
                log.info("call %s: its pool process ended (%s) as its worker stopped: not counted", self.id, how,
                         extra={"event": "attempt_process_stopped", "task_id": self.id, "attempt_id": aid, "reason": how})
                return
            deaths = runtime().inflight.died(aid, how, max(ran_ms, 0.0))  # its mark goes as the message goes back
        except Exception as error:  # Redis away, a foreign message: it runs again, as before
            log.warning("call %s: its pool process died (%s), not counted: %s: %s", self.id, how,
                        type(error).__name__, error)
            return
        tool = _tool_of(plan, aid)
        log.warning("call %s: the pool process running attempt %s (%s) died (%s), %d time(s)", self.id, aid, tool, how,
                    deaths,
                    extra={"event": "attempt_process_died", "task_id": self.id, "attempt_id": aid, "reason": how,
                           "deaths": deaths, "call_id": plan.request.call_id,  # QA ops: followed by call_id like the rest
                           "tool": tool,
                           # logged by the worker's main process, outside the task: named here (QA recheck)
                           "worker": self.hostname, "task_name": self.task_name})


def _tool_of(plan: CallPlan, aid: str) -> str | None:
    """The version that an attempt of this call ran, named in the lines that say its process died:
    the operator reading why an executor restarted learns which tool took it down."""
    return next((c.key for i, c in enumerate(plan.candidates) if attempt_id(plan, i) == aid), None)


def _message(task: Task) -> str | None:
    """The message this step came in, by its task id and the broker's tag (the same at each
    redelivery of it); None for a step that did not come as a message."""
    tag = (getattr(task.request, "properties", None) or {}).get("delivery_tag")
    return None if tag is None or not task.request.id else message_key(task.request.id, str(tag))


def _this_worker(task: Task) -> str:
    """This worker, as its main process names itself in `ExecuteRequest._run_ended`."""
    return worker_key(task.request.hostname, _main_pid())


def _main_pid() -> int:
    """The pid of this worker's main process (this one, outside a prefork pool)."""
    return _pool_parent if _pool_parent is not None else os.getpid()


def _mark_run(task: Task) -> Callable[[str], None] | None:
    """What marks this step's message as running an attempt's tool, in this worker's pool process
    (workers/state/run_marks.py); None for a step that did not come as a message."""
    message = _message(task)
    if message is None:
        return None
    holder = f"{task.request.hostname or 'a worker'} (pid {_main_pid()}, its pool process {os.getpid()})"
    worker = _this_worker(task)
    return lambda aid: runtime().run_marks.running(message, RunMark(attempt_id=aid, holder=holder, worker=worker))


class Returned(NamedTuple):
    """What an attempt delivered again brings from its earlier deliveries."""

    deaths: AttemptDeaths  # of the processes that ran it, counted against it
    worker_died: bool  # a whole worker died while it ran, beside other runs or alone

    @property
    def suspect(self) -> bool:
        """Whether a process running it died: its python tool runs isolated now, where its deaths
        are its own to count (workers/state/run_marks.py)."""
        return self.deaths.count > 0 or self.worker_died


def _returned(task: Task, plan: CallPlan, index: int) -> Returned | None:
    """What this attempt's earlier deliveries left, a death of its whole worker counted now (when it
    ran alone in it); None on a first delivery, which no death can precede. Only a delivery that
    comes again (given back by the broker, or sent again by the rescue sweep) can follow a death."""
    if delivered_again(task) is None:
        return None
    rt, message = runtime(), _message(task)
    left = None if message is None else rt.run_marks.left_behind(message)
    if message is not None and left is not None:
        mark, beside = left
        tool = _tool_of(plan, mark.attempt_id)
        if rt.run_marks.was_stopping(mark.worker) and rt.run_marks.first_stop(mark.attempt_id, mark.run):
            # Killed while it was being stopped (`fittest up` kills a worker that still runs a tool 5 s
            # after its stop): the stop's doing, not the tool's (QA 49 recheck R1). Once per attempt:
            # a tool that SIGTERMs its worker's group, stopping it, and then kills it, is the killer
            # the next time (QA 49 recheck 2: else it killed the executor every 10 s, never counted).
            log.info("call %s: attempt %s (%s) ran in a worker killed as it stopped: not counted", task.request.id,
                     mark.attempt_id, tool,
                     extra={"event": "attempt_worker_stopped", "task_id": task.request.id, "attempt_id": mark.attempt_id})
            left = None
        elif not beside:
            # Its whole worker died while the tool ran (QA live F3: a tool that kills the executor's
            # main process had it killed again at every redelivery, for ever, and the call never ended).
            count = rt.inflight.died(mark.attempt_id, f"its worker {mark.holder} died while running it", 0.0,
                                     once=f"run:{mark.run}")
            log.warning("call %s: the worker running attempt %s (%s) died, %d time(s): %s", task.request.id,
                        mark.attempt_id, tool, count, mark.holder,
                        extra={"event": "attempt_worker_died", "task_id": task.request.id, "attempt_id": mark.attempt_id,
                               "tool": tool, "holder": mark.holder, "deaths": count, "call_id": plan.request.call_id})
        else:  # whose doing it was is not known: counted for none; each of them runs isolated now
            log.warning("call %s: the worker running attempt %s (%s) died beside %d other run(s), not counted: %s",
                        task.request.id, mark.attempt_id, tool, len(beside), mark.holder,
                        extra={"event": "attempt_worker_died_beside", "task_id": task.request.id,
                               "attempt_id": mark.attempt_id, "tool": tool, "beside": len(beside),
                               "holder": mark.holder, "call_id": plan.request.call_id})
        rt.run_marks.counted(message)  # after the count: a delivery given back before this reads it again, counting nothing more
    return Returned(rt.inflight.deaths(attempt_id(plan, index)), worker_died=left is not None)


def _isolated(plan: CallPlan, index: int, returned: Returned | None) -> str | None:
    """Why this attempt runs its python tool in a process of its own, if it does: a process running
    it died, or it is the breaker's probe of a version that killed the processes running it."""
    if returned is not None and returned.suspect:
        return "a worker process running this attempt had died"
    candidate = plan.candidates[index]
    if plan.is_probe(candidate.key) and candidate.manifest.implementation.kind == "python" \
            and runtime().run_marks.killer(candidate.key):
        return "its breaker's probe, of a version that killed the processes running it"
    return None


def _died_then_passed_over(task: Task, plan: CallPlan, index: int, turn: int | None) -> ToolExecutionResult | None:
    """The crash of this message's own attempt when it ran in this call, killed the processes running
    it, and is passed over now (its breaker opened meanwhile, by another call of it): the call had
    listed it among the versions not tried, with no attempt and no failure counted (QA 48 recheck)."""
    if turn == index or index >= len(plan.candidates) or delivered_again(task) is None:
        return None
    deaths = runtime().inflight.deaths(attempt_id(plan, index))
    if deaths.count == 0:
        return None
    key = plan.candidates[index].key
    for skipped in (plan.held_back, plan.passed_over, plan.code_missing):
        if key in skipped:
            skipped.remove(key)
    return crashed_attempt(plan, index, deaths)


def _too_many(plan: CallPlan, index: int, deaths: AttemptDeaths) -> bool:
    """Whether the attempt's deaths are too many to run it again (a crash then)."""
    too_many = PROBE_CRASH_AFTER_DEATHS if plan.is_probe(plan.candidates[index].key) else CRASH_AFTER_DEATHS
    return deaths.count >= too_many


@app.task(bind=True, base=CallStep, name="fittest.execute", Request=ExecuteRequest)
def execute(self: Task, plan_data: dict[str, Any], index: int) -> Any:
    plan = CallPlan.model_validate(plan_data)
    # A redelivered attempt finds its own result already in the plan only if a previous delivery
    # replaced itself; otherwise it runs again under the same attempt id (effects apply once),
    # unless its call has ended meanwhile (CallStep ignores it then), or its tool killed the
    # process running it too often (recorded as a crash instead, once per attempt id too).
    plan.attempts = [a for a in plan.attempts if a.metadata.get("attempt", -1) < index]
    turn = next_to_run(plan, index, runtime().state, runtime().settings.breaker_cooldown_s, code_gone(plan))
    if (died := _died_then_passed_over(self, plan, index, turn)) is not None:
        result = died
    elif turn is None:
        return after_last_attempt(self, plan)
    else:
        index = turn
        returned = _returned(self, plan, index)
        if returned is not None and _too_many(plan, index, returned.deaths):
            # its last run was isolated when a death came before it, or as a killer's probe
            ran_isolated = returned.deaths.count > 1 or _isolated(plan, index, None) is not None
            result = crashed_attempt(plan, index, returned.deaths, ran_isolated)
        else:
            result = run_attempt(plan, index, _mark_run(self), isolated=_isolated(plan, index, returned))
    plan.attempts.append(result)
    if result.success:
        result.unconfirmed = serves_unconfirmed(plan, plan.candidates[index], result)
        for note in (took_a_refused_input_note(plan, result), served_by_whom_note(plan, plan.candidates[index], result)):
            if note is not None:
                plan.notes.append(note)
        return finish(plan, "success")

    send_failure(plan, result)
    if index < last_index(plan) and refused_for_its_namespace(plan) is None:
        return hand_on(self, execute.si(plan.model_dump(mode="json"), index + 1))
    return after_last_attempt(self, plan)


def probe_lock(key: str) -> str:
    """The lock a call holds while it probes `key`'s half-open breaker (one probe at a time)."""
    return f"probe:{key}"


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
                cannot_run: Collection[str] = ()) -> int | None:
    """The index of the first candidate from `index` on that may run now, each one held back by its
    breaker added to `plan.held_back`; None when none is left to try. After a tool that does the
    job refused the input as the caller's mistake, only the tools that do such jobs too are tried
    with it (selection/job_record.py `does_such_jobs`): the others go to `plan.passed_over`, and
    those that `cannot_run` (`code_gone`) to `plan.code_missing`.

    Selection leaves out the versions whose breaker is open, but the calls planned before it opened
    (a burst of calls to a failing tool, ranked together) would each still run it: reading the
    breakers again at each turn is one read of the store, and stops the burst once the threshold is
    reached. A half-open breaker (its cool-down over) lets one call through, the probe whose
    outcome closes or re-opens it: the call that comes to run it takes the probe (a lock for one
    cool-down, which a redelivery of the same call takes again), and the others pass it over."""
    if index > last_index(plan):
        return None
    _, breakers = state.stats_and_breakers([c.key for c in plan.candidates[index:]])
    refused = refused_input(plan) is not None
    while index <= last_index(plan):
        key = plan.candidates[index].key
        skipped = plan.code_missing if key in cannot_run else plan.passed_over
        if key in cannot_run or (refused and not does_such_jobs(plan.candidates[index], plan.request.namespace)):
            if key not in skipped:  # a redelivered step passes it over again
                skipped.append(key)
            index += 1
            continue
        breaker = breakers.get(key, "closed")
        if breaker == "closed":
            return index
        if breaker == "half_open" and state.acquire_lock(probe_lock(key), plan.request.call_id, cooldown_s, reclaim=True):
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
    if evolves and not refused_by_a_doer(plan) and nobodys is None:
        from workers.tasks.evolution import end_without_evolution, prepare_evolution

        ended = end_without_evolution(plan)  # no mutator answers its failures: no round trip for that
        return ended if ended is not None else hand_on(task, prepare_evolution.si(plan.model_dump(mode="json")))
    failed = f"every candidate failed ({attempts_made(plan)})"
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

"""The deaths of the processes that run attempts, counted against the attempts that killed them.

A python tool runs inside the pool process (workers/runners/python.py), so a tool that kills its
process (a segfault, `os._exit`) takes the attempt's message with it: the broker gives it back
(task_reject_on_worker_lost) and the next delivery would run the tool again, and die again, for
ever. So the worker counts each death of the pool process running an attempt (`ExecuteRequest`,
in the worker's main process), and an attempt delivered again after CRASH_AFTER_DEATHS of them is
not run (`too_many_deaths`): the execute step (workers/tasks/execution.py) records it as failed
with the class `crash`, and the call goes on as after any failed attempt. A tool that kills the
worker's main process leaves no process to count its death: the mark of its run, left behind
(workers/state/run_marks.py, `mark_run`), counts it at the next delivery (`earlier_deliveries`).
An attempt whose process died, or whose worker died while it ran, runs its python tool in a
process of its own when it comes back (`isolation_reason`), so that a tool killing its parent or
its process group takes only that process, or the pool process, whose death is then its own.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import WorkerLostError
from celery import Task
from celery.signals import worker_process_init, worker_shutting_down
from celery.worker.request import Request

from selection.manifest import split_key
from selection.models import CallPlan
from workers.dying import is_dying
from workers.group_stop import shutdown_began
from workers.pool_process import main_pid, pool_parent
from workers.rescue import delivered_again
from workers.runners.executable import remove_left_behind
from workers.runtime import runtime
from workers.state.inflight import AttemptDeaths
from workers.state.run_marks import RunMark, message_key, worker_key

log = logging.getLogger("fittest.attempt")

# An attempt whose pool process died this often is not run again. One death is not the tool's
# doing for sure (an operator or the OOM killer may kill a pool process; the step must then just
# run again, as the chaos bench expects); the same attempt killing its process twice is. A breaker's
# probe is one run that asks whether a version that failed again and again is back: one death answers.
CRASH_AFTER_DEATHS = 2
PROBE_CRASH_AFTER_DEATHS = 1


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
def _remove_left_behind(**_: Any) -> None:
    """A pool process starts after one died, or its worker did: what their runs left goes."""
    remove_left_behind()


def end_if_orphaned(aid: str) -> None:
    """End this pool process, recording nothing, when its worker's main process died while the tool
    ran (a tool that kills it, QA live F3): the worker's message is given back, and its next
    delivery counts the death (workers/state/run_marks.py). Recorded by this orphan, the attempt's
    outcome (applied once per attempt id) would stand for the attempt in place of its crash. A
    parent killed a moment ago is still this process's parent: its death is read from /proc."""
    parent = pool_parent()
    if parent is not None and (os.getppid() != parent or is_dying(parent)):
        log.warning("attempt %s: the worker running it died while its tool ran; this pool process ends", aid,
                    extra={"event": "attempt_orphaned", "attempt_id": aid})
        os._exit(70)


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
            # as the pool process's mark names them (`mark_run`)
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
            aid = mark.attempt_id if mark is not None else plan.attempt_id(index)
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
                           **_tool_fields(tool),
                           # logged by the worker's main process, outside the task: named here (QA recheck)
                           "worker": self.hostname, "task_name": self.task_name})


def _tool_of(plan: CallPlan, aid: str) -> str | None:
    """The version that an attempt of this call ran, named in the lines that say its process died:
    the operator reading why an executor restarted learns which tool took it down."""
    return next((c.key for i, c in enumerate(plan.candidates) if plan.attempt_id(i) == aid), None)


def _tool_fields(key: str | None) -> dict[str, str | None]:
    """A version's key as the `attempt` lines log it, `tool` and `version` apart, so that one query
    finds a tool's attempts and the deaths of the processes that ran it (QA 61c: "csv@1.0.0" here)."""
    name, version = split_key(key) if key else (None, None)
    return {"tool": name, "version": version}


def _message(task: Task) -> str | None:
    """The message this step came in, by its task id and the broker's tag (the same at each
    redelivery of it); None for a step that did not come as a message."""
    tag = (getattr(task.request, "properties", None) or {}).get("delivery_tag")
    return None if tag is None or not task.request.id else message_key(task.request.id, str(tag))


def _this_worker(task: Task) -> str:
    """This worker, as its main process names itself in `ExecuteRequest._run_ended`."""
    return worker_key(task.request.hostname, main_pid())


def mark_run(task: Task) -> Callable[[str], None] | None:
    """What marks this step's message as running an attempt's tool, in this worker's pool process
    (workers/state/run_marks.py); None for a step that did not come as a message."""
    message = _message(task)
    if message is None:
        return None
    holder = f"{task.request.hostname or 'a worker'} (pid {main_pid()}, its pool process {os.getpid()})"
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


def earlier_deliveries(task: Task, plan: CallPlan, index: int) -> Returned | None:
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
                               **_tool_fields(tool), "holder": mark.holder, "deaths": count, "call_id": plan.request.call_id})
        else:  # whose doing it was is not known: counted for none; each of them runs isolated now
            log.warning("call %s: the worker running attempt %s (%s) died beside %d other run(s), not counted: %s",
                        task.request.id, mark.attempt_id, tool, len(beside), mark.holder,
                        extra={"event": "attempt_worker_died_beside", "task_id": task.request.id,
                               "attempt_id": mark.attempt_id, **_tool_fields(tool), "beside": len(beside),
                               "holder": mark.holder, "call_id": plan.request.call_id})
        rt.run_marks.counted(message)  # after the count: a delivery given back before this reads it again, counting nothing more
    return Returned(rt.inflight.deaths(plan.attempt_id(index)), worker_died=left is not None)


def isolation_reason(plan: CallPlan, index: int, returned: Returned | None) -> str | None:
    """Why this attempt runs its python tool in a process of its own, if it does: a process running
    it died, or it is the breaker's probe of a version that killed the processes running it."""
    if returned is not None and returned.suspect:
        return "a worker process running this attempt had died"
    candidate = plan.candidates[index]
    if plan.is_probe(candidate.key) and candidate.manifest.implementation.kind == "python" \
            and runtime().run_marks.killer(candidate.key):
        return "its breaker's probe, of a version that killed the processes running it"
    return None


def too_many_deaths(plan: CallPlan, index: int, deaths: AttemptDeaths) -> bool:
    """Whether the attempt's deaths are too many to run it again (a crash then)."""
    too_many = PROBE_CRASH_AFTER_DEATHS if plan.is_probe(plan.candidates[index].key) else CRASH_AFTER_DEATHS
    return deaths.count >= too_many

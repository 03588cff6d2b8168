"""A SIGTERM sent to a worker's whole process group stops the worker warm, its pool included.

Why: a prefork worker's pool processes share its process group, so a SIGTERM to the group (a tool
that signals its parent's group, systemd's control-group stop, `kill -TERM -PGID`) reached each of
them as well as the main process. The main process began its warm shutdown, which lets the running
tasks finish, but the pool processes died under them, each counted as a death of the attempt it
ran: after two, an innocent tool running beside the signaller was recorded a `crash` with its
breaker opened (QA 49: a ledger tool, 1.00 -> 0.90, beside a tool that SIGTERMs its executor's group).

Which signal is which is told by the main process: it notes here, in memory shared with the pool
processes it forks, that a shutdown began, how (celery's `worker_shutting_down`) and when. A pool
process given SIGTERM waits up to GROUP_WAIT_S for that note: a warm shutdown noted within
GROUP_WINDOW_S of the signal means the signal came to the whole group, and the pool process
carries on with its task, which the warm shutdown waits for, until a cold shutdown is noted after
it. Anything else (`celery control terminate`, a kill of the pool process alone, the cold
shutdown's terminate, a SIGTERM with no task running) ends it as SIGTERM always did, a moment
later. Celery says a cold shutdown began only after it has cancelled the running tasks, so the
worker's consumer (workers/consumer.py `ColdNotingConsumer`) notes it before it cancels them
(review 51: a SIGQUIT 0.3 s after the group's SIGTERM, within its window, had the task run on to
its end), and a task outlived as the group's ends once it is noted. A hard time limit's SIGTERM
is followed by billiard's SIGKILL 0.1 s later, which ends the pool process first, so its `finally`
blocks do not run.
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import struct
import threading
import time
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_shutting_down

from workers.pool_process import pool_parent

log = logging.getLogger(__name__)

GROUP_WAIT_S = 0.5  # how long a pool process given SIGTERM waits for its main process's note
# How far apart a group's SIGTERM reaches the main process and a pool process, as their Python
# handlers run (one busy in a C call runs its own later); a terminate meant for the task comes later,
# as a person escalates the stop or controls it.
GROUP_WINDOW_S = 1.0
RUNNING, WARM, COLD = 0, 1, 2

# How the main process is shutting down, and since when (CLOCK_MONOTONIC, which every process of
# the host reads alike), mapped before the pool processes are forked and shared with each of them.
_NOTE = struct.Struct("=Bd")
_shutdown = mmap.mmap(-1, _NOTE.size)


def shutdown_began() -> int:
    """RUNNING, or how this worker's main process is shutting down (WARM, COLD): what a pool
    process reads to tell a SIGTERM its whole group was given from one meant for it."""
    return _NOTE.unpack(_shutdown[:_NOTE.size])[0]


def group_sigterm(at: float) -> bool:
    """Whether a SIGTERM given to a pool process at `at` (time.monotonic) came to its whole group:
    the main process noted its warm shutdown within GROUP_WINDOW_S of it. A later SIGTERM is a
    terminate meant for the task (a second Ctrl-C, SIGQUIT, `celery control terminate`)."""
    if _shutdown[0] != WARM:  # the state first: its time is written before it
        return False
    (noted_at,) = struct.unpack_from("=d", _shutdown, 1)
    return abs(at - noted_at) <= GROUP_WINDOW_S


def note_shutdown(how: str) -> None:
    """In the main process: a shutdown began, "Warm" or "Cold" (as celery names them). The first is
    written, and a cold one after it: a task outlived as the group's SIGTERM ends then."""
    began = shutdown_began()
    if began == RUNNING or (how == "Cold" and began != COLD):
        note = _NOTE.pack(COLD if how == "Cold" else WARM, time.monotonic())
        _shutdown[1:_NOTE.size] = note[1:]  # its time before its state, which a pool process reads first
        _shutdown[0] = note[0]


@worker_shutting_down.connect
def _noted(how: str = "Warm", **_: Any) -> None:
    note_shutdown(how)


_task_running = False  # in a pool process: between a task's start and its end
_not_the_groups = threading.Event()  # a SIGTERM found not to be the group's: the next one is handed on
_default: Any = signal.SIG_DFL  # the pool process's own SIGTERM handler (billiard's, which exits)


def _sigterm_in_pool(signum: int, frame: Any) -> None:
    """Not the pool process's end while its task runs, until its main process has had the time to
    tell a SIGTERM to the whole group (a warm shutdown); its own handler's, a moment later, else."""
    at = time.monotonic()
    if not _task_running or _not_the_groups.is_set() or shutdown_began() != RUNNING and not group_sigterm(at):
        _hand_on(signum, frame)
    else:  # decided in a thread: waiting (and logging) in the handler held up the main thread, where the task runs
        threading.Thread(target=_decide, args=(signum, at), name="fittest-sigterm", daemon=True).start()


def _decide(signum: int, at: float) -> None:
    deadline = at + GROUP_WAIT_S
    while shutdown_began() == RUNNING and time.monotonic() < deadline:
        time.sleep(0.01)
    if group_sigterm(at):
        _outlived()
        while _task_running and shutdown_began() != COLD:  # until a cold shutdown's note ends the task
            time.sleep(0.05)
        if not _task_running:
            return
    _not_the_groups.set()  # sent again, to be handled as it was, in the main thread
    os.kill(os.getpid(), signum)


def _outlived() -> None:
    log.warning("pool process %d: SIGTERM came to the whole worker, which stops warm: its task goes on", os.getpid(),
                extra={"event": "group_sigterm_outlived", "pid": os.getpid()})


def _hand_on(signum: int, frame: Any) -> None:
    """The SIGTERM handled by the pool process's own handler (billiard's exits), as without this one."""
    if callable(_default):
        _default(signum, frame)
    elif _default is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


@task_prerun.connect
def _outlive_group_sigterm(**_: Any) -> None:
    """Installed as a pool process runs its first task: billiard sets its own handler after
    `worker_process_init`, which this one hands the signal on to when it is not the group's."""
    global _default, _task_running
    _task_running = True
    if pool_parent() is not None and (current := signal.getsignal(signal.SIGTERM)) is not _sigterm_in_pool:
        _default = current
        signal.signal(signal.SIGTERM, _sigterm_in_pool)


@task_postrun.connect
def _task_ended(**_: Any) -> None:
    """Past its task, a pool process ends on SIGTERM again: the warm shutdown's own, which hurries
    one that is leaving, among them."""
    global _task_running
    _task_running = False

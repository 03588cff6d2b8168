"""Whether a process lives, or is dying, as Linux tells it in /proc, before its children can see
it gone.

Why: a python tool that sends SIGKILL to its executor's main process and returns at once had its
pool process record the tool's success before that process saw its parent gone (`os.getppid()`
changes only once the parent has exited), and the attempt's one record stood for it in place of
the crash its deaths made it (QA 48: the breaker stayed closed, the killer's output was a call's
result). From the moment `kill()` returns, the kernel shows the signal pending, then the process
exiting, then a zombie, then no process: each of these counts as dying.
"""

from __future__ import annotations

import os
import signal

PF_EXITING = 0x4  # include/linux/sched.h: the process is in do_exit
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists: one of another user's too (a signal to it is refused), so
    that what it owns is not taken for left over."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_dying(pid: int) -> bool:
    """Whether process `pid` is gone, a zombie, exiting, or has a SIGKILL pending."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            status = f.read()
    except OSError:  # no such process any more (or no /proc: not Linux, where nothing is known)
        return _proc_exists()
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if len(fields) < 7:
        return False
    state, flags = fields[0], int(fields[6])
    if state in ("Z", "X", "x") or flags & PF_EXITING:
        return True
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in ("SigPnd", "ShdPnd") and int(value.strip(), 16) & SIGKILL_BIT:
            return True
    return False


def _proc_exists() -> bool:
    """Whether /proc tells processes here (a process missing from it is then gone)."""
    try:
        with open("/proc/self/stat", encoding="ascii"):
            return True
    except OSError:
        return False

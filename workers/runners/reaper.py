"""Every process a run starts dies with its attempt, also one that left the run's process group.

The executable runner kills the tool's process group, but a process that called setsid() (a
daemon, `setsid sleep`, the classic double fork) is in a group of its own and escapes that kill;
when its parent exits it is re-parented to init and lives on. So while a run is in flight, the
process that runs tools is a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux 3.4+, no
privilege needed): the run's orphans are re-parented to it instead of init. After the run,
leaving `with Run()`, each of them is SIGKILLed with everything below it, and reaped.

Which children of this process are the run's orphans, and why the rule takes nothing else:
- only children that appeared during the run: what this process started before (a test's
  redis-server, say) is left alone;
- only children outside this process's own session: the tool starts in a new session and
  setsid() only ever makes new ones, so nothing of the run can be in it, while a subprocess that
  another thread starts the ordinary way (an abandoned python tool's, say) is;
- never the leader of another run in flight on another thread: each run registers its leader
  under the lock the sweep takes, so none is seen before it is known.
Not told apart: an orphan of another run in flight in this process, re-parented here meanwhile,
is killed when the first of the two runs ends; and so is a child that another thread starts in a
new session during the run. The executor's prefork pool runs one attempt at a time per process
and nothing else there starts new sessions, so neither happens in a worker.

The flag is on only while some run is in flight, so orphans of anything else this process starts
outside runs still go to init (one orphaned during a run, in this process's session, stays a child
of it, a zombie once it ends). Children are found from /proc/<pid>/stat: the lighter
/proc/<pid>/task/<tid>/children needs CONFIG_PROC_CHILDREN, which not every kernel has. Without
prctl or /proc (not Linux) there is no subreaper and the sweep finds nothing: only the process
group kill remains.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from types import TracebackType

from workers.prctl import PR_SET_CHILD_SUBREAPER, prctl

_lock = threading.Lock()  # guards _leaders, _in_flight, and a run's start against a sweep
_leaders: set[int] = set()  # pids of the leaders of runs in flight in this process
_in_flight = 0


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process, zombies included."""
    table = {}
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return {}
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it exited meanwhile
        table[int(entry.name)] = (int(fields[1]), int(fields[3]))
    return table


def _children() -> set[int]:
    me = os.getpid()
    return {pid for pid, (ppid, _) in _process_table().items() if ppid == me}


def _subtrees(roots: list[int], table: dict[int, tuple[int, int]]) -> list[int]:
    """`roots` and all their descendants, parents before children."""
    below: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        below.setdefault(ppid, []).append(pid)
    order, seen = list(roots), set(roots)
    for pid in order:  # grows while it is walked: breadth first
        for child in below.get(pid, []):
            if child not in seen:
                seen.add(child)
                order.append(child)
    return order


class Run:
    """One run of a tool's process, as a context: the subreaper flag is held from entry, and what
    is left of the run is killed at exit. Leave it only once the leader is reaped."""

    def __init__(self) -> None:
        self._before: frozenset[int] = frozenset()
        self._leader: int | None = None

    def __enter__(self) -> Run:
        global _in_flight
        with _lock:
            self._before = frozenset(_children())
            if _in_flight == 0:
                prctl(PR_SET_CHILD_SUBREAPER, 1)
            _in_flight += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._sweep()

    def start(self, popen: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """Start the tool's process, known as this run's leader before any sweep can see it."""
        with _lock:
            proc = popen()
            self._leader = proc.pid
            _leaders.add(proc.pid)
        return proc

    def _orphans(self) -> tuple[list[int], dict[int, tuple[int, int]]]:
        me, session = os.getpid(), os.getsid(0)
        with _lock:
            table = _process_table()
            orphans = [
                pid
                for pid, (ppid, sid) in table.items()
                if ppid == me and sid != session and pid not in self._before and pid not in _leaders
            ]
        return orphans, table

    def _sweep(self) -> None:
        """Kill and reap what is left of the run; then give up the flag if no other run holds it.

        Killing a process re-parents its children here, so this repeats until no orphan is left.
        Orphans are children of this process, unreaped, so their pids cannot be reused before the
        kill; the processes below them are killed by a pid read a moment before, which only a pid
        wrapping around in between could misdirect.
        """
        global _in_flight
        if self._leader is not None:
            with _lock:
                _leaders.discard(self._leader)
        try:
            while True:
                orphans, table = self._orphans()
                if not orphans:
                    break
                for pid in _subtrees(orphans, table):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                for pid in orphans:
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass  # reaped by another thread's sweep meanwhile
        finally:
            with _lock:
                _in_flight -= 1
                if _in_flight == 0:
                    prctl(PR_SET_CHILD_SUBREAPER, 0)

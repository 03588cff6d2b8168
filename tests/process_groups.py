"""Process groups as the tests see them: which members are still alive, and which are reaped."""

from __future__ import annotations

import time
from pathlib import Path


def live_members(pgid: int) -> list[int]:
    """Processes of a process group that are still alive (zombies are dead, awaiting reaping by init)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def gone(pgid: int, within_s: float = 2.0) -> bool:
    """Whether the group has no live member, allowing for SIGKILL's asynchronous delivery:
    a killed process can still be on its way out for a moment after kill() returns."""
    deadline = time.monotonic() + within_s
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def reaped(pid: int, within_s: float = 2.0) -> bool:
    """Whether the process is gone from the process table, not even a zombie: killed and reaped."""
    deadline = time.monotonic() + within_s
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True

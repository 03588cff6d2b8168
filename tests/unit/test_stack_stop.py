"""Stopping a stack: every role gets its warm shutdown at once, and none outlives the deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from workers.settings import Settings
from workers.stack import Stack

# A role that ignores SIGTERM and has a child in its process group, as a worker's pool would.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""
# A role that takes a moment to shut down once asked, as a worker finishing its tasks does.
WARM = """
import signal, sys, time
def shut_down(*_):
    open(sys.argv[1], "w").write(repr(time.time()))
    time.sleep(0.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, shut_down)
print("ready", flush=True)
time.sleep(60)
"""


def _role(code: str, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    first_line = proc.stdout.readline().strip()  # type: ignore[union-attr]
    return proc, first_line


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for good; only its parent's wait is missing
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _gone_soon(pid: int, within_s: float = 5.0) -> bool:
    """A SIGKILL is delivered at once but acted on by the kernel a moment later."""
    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stop_all_lets_each_role_shut_down_and_kills_what_outlives_the_deadline(tmp_path: Path) -> None:
    stubborn, child_pid = _role(STUBBORN)
    warm_a, _ = _role(WARM, str(tmp_path / "a"))
    warm_b, _ = _role(WARM, str(tmp_path / "b"))
    stack = Stack(Settings(data_dir=tmp_path), procs={"memory": warm_a, "executor": stubborn, "evolver": warm_b})
    asked = time.time()
    stack.stop_all(timeout=4.0)
    assert stack.procs == {}
    assert (warm_a.returncode, warm_b.returncode) == (0, 0)  # their own shutdown, not a kill
    assert stubborn.returncode == -9
    assert _gone_soon(int(child_pid))  # the role's whole group went with it
    # Every role is asked at once: the last one is not kept waiting behind the stubborn one's
    # 4 s, as it was when the roles were stopped one after the other.
    assert float((tmp_path / "b").read_text()) - asked < 2.5

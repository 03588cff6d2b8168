"""`is_dying`: a pool process tells its worker's main process is dying the moment a tool's SIGKILL
to it returns, before `os.getppid()` changes (QA 48: the orphan recorded the tool's success first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from workers.dying import is_dying

# A "main process" (busy on a core, as a worker's may be) whose child kills it and asks at once.
RACE = textwrap.dedent("""
    import json, os, signal, time
    from workers.dying import is_dying

    seen = {"dying": 0, "reparented": 0, "alive": 0}
    for _ in range(60):
        r, w = os.pipe()
        main = os.fork()
        if main == 0:
            if os.fork() == 0:
                parent = os.getppid()
                os.kill(parent, signal.SIGKILL)
                said = "reparented" if os.getppid() != parent else "dying" if is_dying(parent) else "alive"
                os.write(w, said.encode())
                os._exit(0)
            started = time.monotonic()
            while time.monotonic() - started < 5:
                pass
            os._exit(0)
        os.close(w)
        os.waitpid(main, 0)
        seen[os.read(r, 20).decode()] += 1
        os.close(r)
    print(json.dumps(seen))
""")


def test_a_parent_killed_a_moment_ago_is_dying_every_time() -> None:
    run = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["alive"] == 0 and seen["dying"] + seen["reparented"] == 60, seen


def test_a_live_process_is_not_dying_and_a_gone_one_is() -> None:
    assert not is_dying(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: no such process any more
    assert is_dying(child.pid)

"""Runners against real code: in-process python tools, real subprocesses, real HTTP servers.

Every failure a tool can have must come back as an outcome with the right class, never as an
exception, and an executable's processes must never outlive its attempt.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from selection.manifest import TestCase, ToolManifest
from selection.models import FailureClass
from selection.registry import ToolRegistry
from tests.conftest import EXAMPLE_TOOLS, free_port
from tests.process_groups import gone, reaped
from workers.runners import RunLimits, RunOutcome, run_tool
from workers.runners.base import MAX_MESSAGE_CHARS

LIMITS = RunLimits()


def make_tool(tool_dir: Path, name: str, implementation: dict[str, Any], files: dict[str, str] | None = None) -> ToolManifest:
    """A manifest as the registry would load it: its files written into its own directory."""
    tool_dir.mkdir(parents=True, exist_ok=True)
    for filename, code in (files or {}).items():
        (tool_dir / filename).write_text(textwrap.dedent(code))
    return ToolManifest.model_validate(
        {"name": name, "description": name, "implementation": implementation, "tool_dir": str(tool_dir)}
    )


def assert_failure(outcome: RunOutcome, error_class: FailureClass, *fragments: str) -> None:
    assert not outcome.success, outcome
    assert outcome.error_class == error_class, outcome
    for fragment in fragments:
        assert fragment in (outcome.error_message or ""), outcome.error_message
    assert outcome.output is None


# --------------------------------------------------------------------------- python

PY_TOOLS = """
import json
import time

CALLS = []

def ok(input):
    CALLS.append(1)
    return {"doubled": input["n"] * 2, "calls": len(CALLS)}

def mutate(input):
    input["items"].append("changed")
    return {"seen": list(input["items"])}

def bad_value(input):
    raise ValueError("n must be positive")

def missing_key(input):
    return input["nope"]

def chatty(input):
    import sys
    for i in range(20000):
        print("P" * 98, i)
    print("on stderr", file=sys.stderr)
    return {"ok": True}

def stubborn_printer(input):
    import time
    until = time.monotonic() + 1.5
    while time.monotonic() < until:  # catches ToolStopped: abandoned at its timeout, it prints on
        try:
            time.sleep(0.05)
            print("still here")
        except BaseException:
            pass
    return {}

def crash(input):
    raise RuntimeError("internal bug")

def parses(input):
    return json.loads("not json")

def exits(input):
    raise SystemExit(3)

def refused(input):
    raise ConnectionRefusedError(111, "Connection refused")

def slow(input):
    time.sleep(input.get("seconds", 5))
    return {"done": True}

def spins(input):
    while True:
        try:
            CALLS.append(1)
            CALLS.pop()
        except Exception:  # a tool that swallows its errors is stopped all the same
            pass

def swallows_everything(input):
    end = time.monotonic() + input.get("seconds", 2)
    while time.monotonic() < end:
        try:
            while time.monotonic() < end:
                pass
        except:  # noqa: E722 - a bare except catches ToolStopped too
            pass
    return {"done": True}

def returns_none(input):
    return None

def returns_set(input):
    return {"s": {1, 2}}

def returns_nan(input):
    return {"x": float("nan")}

def sets_a_timer(input):
    import signal
    signal.setitimer(signal.ITIMER_REAL, 300.0)  # as signal.alarm(300): SIGALRM ends the process then
    return {"set": True}

def returns_surrogate(input):
    return {"x": "\\ud800"}

def returns_deep(input):
    value = {}
    for _ in range(input.get("depth", 100_000)):
        value = {"a": value}
    return value

def big(input):
    return {"blob": "x" * input["size"]}

def tuple_out(input):
    return (1, 2)
"""


@pytest.fixture
def py_tool(tmp_path: Path):
    def make(function: str, name: str | None = None) -> ToolManifest:
        return make_tool(
            tmp_path / "pytool",
            name or f"py_{function}",
            {"kind": "python", "entrypoint": f"tools:{function}"},
            {"tools.py": PY_TOOLS},
        )

    return make


def test_python_success_and_module_cached_per_version(py_tool) -> None:
    tool = py_tool("ok")
    first = run_tool(tool, {"n": 21}, timeout_s=5, limits=LIMITS)
    second = run_tool(tool, {"n": 1}, timeout_s=5, limits=LIMITS)
    assert first.success and first.output == {"doubled": 42, "calls": 1}
    assert second.output == {"doubled": 2, "calls": 2}  # same module object: loaded once
    assert first.error_class is None and first.elapsed_ms > 0
    other_version = py_tool("ok", name="py_ok_other")
    assert run_tool(other_version, {"n": 1}, timeout_s=5, limits=LIMITS).output == {"doubled": 2, "calls": 1}


def test_a_version_changed_in_place_to_another_function_runs_that_function(py_tool) -> None:
    assert run_tool(py_tool("ok", name="py_edited"), {"n": 1}, timeout_s=5, limits=LIMITS).output == {"doubled": 2, "calls": 1}
    assert run_tool(py_tool("big", name="py_edited"), {"size": 3}, timeout_s=5, limits=LIMITS).output == {"blob": "xxx"}


def test_a_module_file_edited_in_place_runs_as_it_now_reads(tmp_path: Path) -> None:
    """QA M: pool processes that had loaded a tool's file before it was edited went on running the
    old code (one version, two outputs), where an executable tool's edit counts at once."""
    tool = make_tool(tmp_path / "t", "py_live", {"kind": "python", "entrypoint": "live:run"},
                     {"live.py": "def run(input):\n    return {'edited': False}\n"})
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"edited": False}
    (tmp_path / "t" / "live.py").write_text("def run(input):\n    return {'edited': True}\n")
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"edited": True}


def test_a_module_file_saved_half_edited_leaves_the_version_served_as_it_was(tmp_path: Path) -> None:
    """QA ops M1: a file that does not parse, which the registry refuses, was imported at the next
    call and the tool charged a crash (and evolved for it)."""
    tool = make_tool(tmp_path / "t", "py_half", {"kind": "python", "entrypoint": "half:run"},
                     {"half.py": "def run(input):\n    return {'version': 1}\n"})
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 1}
    (tmp_path / "t" / "half.py").write_text("def run(input) return 1\n")
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 1}  # as it was
    # A process that never loaded it (a new pool process) cannot run it: an outage until it parses.
    fresh = tool.model_copy(update={"name": "py_half_fresh"})
    assert_failure(run_tool(fresh, {}, timeout_s=5, limits=LIMITS), FailureClass.unavailable, "half.py is not valid Python")
    # So with the file saved empty, truncated before it is written (QA recheck N1: charged a crash),
    # or caught mid-write with NUL bytes in it (review: taken for a module it imports, a crash).
    for half_written in (b"", b"def run(input):\n    return {'version'\x00\x00\x00"):
        (tmp_path / "t" / "half.py").write_bytes(half_written)
        assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 1}
        assert_failure(run_tool(fresh, {}, timeout_s=5, limits=LIMITS), FailureClass.unavailable, "half.py")
    # Nothing of a file cut short before its function runs, however often the version is called
    # (review: its top-level code ran again on every call while it stayed so).
    ran = tmp_path / "ran"
    (tmp_path / "t" / "half.py").write_text(f"open({str(ran)!r}, 'a').write('x')\n")
    for _ in range(3):
        assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 1}
    assert not ran.exists()
    # (another size than the first file's: a file rewritten within the file system's clock tick at the
    # same size keeps its stamp, which the runner tells an edit by)
    (tmp_path / "t" / "half.py").write_text("def run(input):\n    return {'version': 2, 'mended': True}\n")
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 2, "mended": True}
    assert run_tool(fresh, {}, timeout_s=5, limits=LIMITS).output == {"version": 2, "mended": True}


def test_a_module_file_gone_leaves_the_version_served_as_it_was(tmp_path: Path) -> None:
    """QA recheck 47: `fittest health` said a version whose module file was removed stays served,
    while every call of it failed as an outage. A process that loaded it runs it as last loaded; one
    that never did cannot, an outage until the file is back."""
    tool = make_tool(tmp_path / "t", "py_gone", {"kind": "python", "entrypoint": "gone:run"},
                     {"gone.py": "def run(input):\n    return {'version': 1}\n"})
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 1}
    (tmp_path / "t" / "gone.py").unlink()
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 1}  # as it was
    fresh = tool.model_copy(update={"name": "py_gone_fresh"})
    assert_failure(run_tool(fresh, {}, timeout_s=5, limits=LIMITS), FailureClass.unavailable, "not found")
    (tmp_path / "t" / "gone.py").write_text("def run(input):\n    return {'version': 2, 'back': True}\n")
    assert run_tool(tool, {}, timeout_s=5, limits=LIMITS).output == {"version": 2, "back": True}
    assert run_tool(fresh, {}, timeout_s=5, limits=LIMITS).output == {"version": 2, "back": True}


def test_what_a_python_tool_prints_is_logged_once_capped_and_naming_it(py_tool, caplog, capsys) -> None:
    """QA 51c: 20,000 print() lines became 20,000 WARNING records of the executor's log (5 MB), none
    naming the tool or the call. The process's own writes pass on unchanged."""
    import logging
    import sys

    from workers.runners.tool_prints import PRINT_KEPT_CHARS

    encoding, isatty = sys.stdout.encoding, sys.stdout.isatty()
    with caplog.at_level(logging.INFO, logger="fittest.runners"):
        outcome = run_tool(py_tool("chatty"), {}, timeout_s=30, limits=LIMITS)
    # the process's streams keep what they say of themselves (review 51: TextIOBase's None and False)
    assert (sys.stdout.encoding, sys.stdout.isatty()) == (encoding, isatty)
    with caplog.at_level(logging.INFO, logger="fittest.runners"):
        print("the worker's own line")
        sys.stderr.write("the worker's own error\n")
    assert outcome.success, outcome
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "tool_printed"]
    assert record.tool == "py_chatty@1.0.0" and record.chars == sum(len(f"{'P' * 98} {i}\n") for i in range(20000)) + len("on stderr\n")
    assert record.getMessage().startswith(f"py_chatty@1.0.0 printed {record.chars} characters (the first {PRINT_KEPT_CHARS} shown): PPP")
    out, err = capsys.readouterr()
    assert out == "the worker's own line\n" and err == "the worker's own error\n"  # nothing of the tool's


def test_what_a_python_tool_abandoned_at_its_timeout_prints_after_its_run_passes_on(py_tool, capsys) -> None:
    """Review 51: kept apart for good, a runaway thread's output vanished, where before it was the
    log's one sign of it."""
    import time

    outcome = run_tool(py_tool("stubborn_printer"), {}, timeout_s=0.3, limits=LIMITS)
    assert outcome.error_class == FailureClass.timeout, outcome
    capsys.readouterr()
    time.sleep(1.6)  # the thread prints on until it returns
    assert "still here" in capsys.readouterr().out


def test_python_tool_gets_its_own_copy_of_the_input(py_tool) -> None:
    data = {"items": ["a"]}
    outcome = run_tool(py_tool("mutate"), data, timeout_s=5, limits=LIMITS)
    assert outcome.output == {"seen": ["a", "changed"]}
    assert data == {"items": ["a"]}


@pytest.mark.parametrize(
    ("function", "error_class", "fragment"),
    [
        ("bad_value", FailureClass.bad_input, "ValueError: n must be positive"),
        ("missing_key", FailureClass.bad_input, "KeyError: 'nope'"),
        ("crash", FailureClass.crash, "RuntimeError: internal bug (at tools.py:"),
        ("parses", FailureClass.bad_input, "JSONDecodeError: Expecting value: line 1 column 1 (char 0) (at tools.py:"),
        ("exits", FailureClass.crash, "SystemExit"),
        ("refused", FailureClass.unavailable, "ConnectionRefusedError"),
        ("returns_none", FailureClass.bad_output, "empty output"),
        ("returns_set", FailureClass.bad_output, "not JSON-serialisable"),
        ("returns_nan", FailureClass.bad_output, "not JSON-serialisable"),
        # QA resilience: "crash: the python runner could not run ...: RecursionError"
        ("returns_deep", FailureClass.bad_output, "output is nested too deeply to encode as JSON"),
        # QA 49: "crash: the python runner could not run ...: UnicodeEncodeError"
        ("returns_surrogate", FailureClass.bad_output, "output is not UTF-8 text: 'utf-8' codec can't encode character"),
    ],
)
def test_python_failures_are_classified(py_tool, function: str, error_class: FailureClass, fragment: str) -> None:
    assert_failure(run_tool(py_tool(function), {"n": 1}, timeout_s=5, limits=LIMITS), error_class, fragment)


def test_a_timer_a_python_tool_leaves_is_cancelled_before_it_kills_the_process(py_tool) -> None:
    """QA resilience: a tool's signal.alarm(1) killed its pool process during the next tool's attempt,
    and the death was charged to that tool."""
    try:
        assert run_tool(py_tool("sets_a_timer"), {}, timeout_s=5, limits=LIMITS).output == {"set": True}
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_an_output_nested_deeper_than_a_call_can_carry_is_bad_output(py_tool, exe_dir: Path) -> None:
    """QA recheck: 400-900 levels passed the output check and broke the recording of the call (its
    result a stored "Maximum serialization depth exceeded", its success lost); an executable's 5,000
    levels were a crash of the runner."""
    assert run_tool(py_tool("returns_deep"), {"depth": 63}, timeout_s=5, limits=LIMITS).success  # 64 levels
    assert_failure(run_tool(py_tool("returns_deep"), {"depth": 499}, timeout_s=5, limits=LIMITS),
                   FailureClass.bad_output, "output is nested 500 levels deep; the limit is 64")
    deep = "[" * 5000 + "]" * 5000
    (exe_dir / "deep.py").write_text(f"print({deep!r})\n")
    assert_failure(run_tool(exe(exe_dir, "{tool_dir}/deep.py"), {}, timeout_s=10, limits=LIMITS),
                   FailureClass.bad_output, "stdout is nested too deeply to decode as JSON")


def test_python_output_cap_and_json_normalisation(py_tool) -> None:
    small = RunLimits(output_limit_bytes=1000)
    assert_failure(run_tool(py_tool("big"), {"size": 5000}, timeout_s=5, limits=small), FailureClass.bad_output, "exceeds the limit")
    assert run_tool(py_tool("big"), {"size": 10}, timeout_s=5, limits=small).success
    assert run_tool(py_tool("tuple_out"), {}, timeout_s=5, limits=LIMITS).output == [1, 2]


def tool_thread(name: str) -> bool:
    return any(t.name == f"tool:{name}@1.0.0" for t in threading.enumerate())


def test_python_timeout_abandons_a_call_blocked_outside_python(py_tool) -> None:
    started = time.monotonic()
    outcome = run_tool(py_tool("slow"), {"seconds": 3}, timeout_s=0.3, limits=LIMITS)
    assert time.monotonic() - started < 1.5
    assert_failure(outcome, FailureClass.timeout, "did not stop: it is blocked outside Python", "abandoned")
    assert tool_thread("py_slow")  # in time.sleep: stopped when it returns, not run on to its end
    deadline = time.monotonic() + 5
    while tool_thread("py_slow") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not tool_thread("py_slow")


def test_python_timeout_of_a_call_that_catches_everything_says_it_may_run_on(py_tool) -> None:
    """QA M: a tool looping under a bare `except:` catches ToolStopped and spins on in the worker;
    the message said it was blocked outside Python."""
    outcome = run_tool(py_tool("swallows_everything"), {"seconds": 1.5}, timeout_s=0.3, limits=LIMITS)
    assert_failure(outcome, FailureClass.timeout, "or it catches ToolStopped (a bare except)", "runs on in the worker")
    deadline = time.monotonic() + 5
    while tool_thread("py_swallows_everything") and time.monotonic() < deadline:
        time.sleep(0.1)


def test_python_timeout_stops_a_call_that_spins(py_tool) -> None:
    """A tool in an endless loop held a core of the worker for good, once per timed-out call."""
    outcome = run_tool(py_tool("spins"), {}, timeout_s=0.3, limits=LIMITS)
    assert_failure(outcome, FailureClass.timeout, "the call's thread was stopped")
    assert not tool_thread("py_spins")
    assert run_tool(py_tool("ok"), {"n": 2}, timeout_s=5, limits=LIMITS).output["doubled"] == 4  # the process serves on


def test_python_load_failures(tmp_path: Path) -> None:
    # A module file that does not parse is not served (the registry refuses it); one edited so after
    # it was (saved half-edited) is an outage of the tool until it parses (QA ops M1), and a module it
    # imports that does not parse is its code's crash.
    broken = make_tool(tmp_path / "b", "broken", {"kind": "python", "entrypoint": "tool:run"}, {"tool.py": "def run(:\n"})
    assert_failure(run_tool(broken, {}, timeout_s=5, limits=LIMITS), FailureClass.unavailable, "tool.py is not valid Python")
    imports_broken = make_tool(tmp_path / "ib", "imports_broken", {"kind": "python", "entrypoint": "tool:run"},
                               {"tool.py": "import helper\ndef run(i): return i\n", "helper.py": "def f(:\n"})
    assert_failure(run_tool(imports_broken, {}, timeout_s=5, limits=LIMITS), FailureClass.crash, "SyntaxError")
    no_func = make_tool(tmp_path / "c", "no_func", {"kind": "python", "entrypoint": "tool:absent"}, {"tool.py": "x = 1\n"})
    assert_failure(run_tool(no_func, {}, timeout_s=5, limits=LIMITS), FailureClass.unavailable, "tool.py defines no 'absent'")
    nowhere = make_tool(tmp_path / "d", "nowhere", {"kind": "python", "entrypoint": "fittest_no_such_module:run"})
    assert_failure(run_tool(nowhere, {}, timeout_s=5, limits=LIMITS), FailureClass.unavailable, "not found")


def test_a_python_tool_imports_the_files_beside_its_own_and_not_another_tools(tmp_path: Path) -> None:
    """QA evolution: `import helper` in a tool's main.py failed in the executor ("module 'main' not
    found: No module named 'helper'", unavailable), so evolution wrapped it in retries; its evolved
    copy, run in a subprocess, had the tool's directory on its path. Two tools with a helper.py of
    their own each get theirs; a tool's import of a module that does not exist is its crash."""
    flat = make_tool(tmp_path / "flat", "flat_imp", {"kind": "python", "entrypoint": "main:run"},
                     {"main.py": "import helper\ndef run(i): return {'nm': helper.km_to_nm(i['km'])}\n",
                      "helper.py": "def km_to_nm(km): return round(km / 1.852, 4)\n"})
    assert run_tool(flat, {"km": 1.852}, timeout_s=5, limits=LIMITS).output == {"nm": 1.0}
    (tmp_path / "pkg" / "lib").mkdir(parents=True)
    package = make_tool(tmp_path / "pkg", "temp_conv", {"kind": "python", "entrypoint": "lib.main:run"},
                        {"lib/main.py": "from lib.helper import c_to_f\ndef run(i): return {'f': c_to_f(i['c'])}\n",
                         "lib/helper.py": "def c_to_f(c): return c * 9 / 5 + 32\n"})
    assert run_tool(package, {"c": 100}, timeout_s=5, limits=LIMITS).output == {"f": 212.0}
    other = make_tool(tmp_path / "other", "other_imp", {"kind": "python", "entrypoint": "main:run"},
                      {"main.py": "import helper\ndef run(i): return {'said': helper.say()}\n",
                       "helper.py": "def say(): return 'mine'\n"})
    assert run_tool(other, {}, timeout_s=5, limits=LIMITS).output == {"said": "mine"}
    assert "helper" not in sys.modules and str(tmp_path / "flat") not in sys.path
    missing = make_tool(tmp_path / "missing", "missing_dep", {"kind": "python", "entrypoint": "main:run"},
                        {"main.py": "import fittest_no_such_dependency\ndef run(i): return i\n"})
    assert_failure(run_tool(missing, {}, timeout_s=5, limits=LIMITS), FailureClass.crash,
                   "importing 'main' failed: ModuleNotFoundError: No module named 'fittest_no_such_dependency'")


def test_python_import_that_hangs_is_a_timeout(tmp_path: Path) -> None:
    tool = make_tool(tmp_path / "h", "hangs", {"kind": "python", "entrypoint": "tool:run"},
                     {"tool.py": "import time\ntime.sleep(3)\ndef run(i): return i\n"})
    assert_failure(run_tool(tool, {}, timeout_s=0.3, limits=LIMITS), FailureClass.timeout)


def test_python_importable_module_when_no_file(tmp_path: Path) -> None:
    tool = make_tool(tmp_path / "e", "importable", {"kind": "python", "entrypoint": "copy:deepcopy"})
    assert run_tool(tool, {"a": [1]}, timeout_s=5, limits=LIMITS).output == {"a": [1]}


def test_non_json_input_is_bad_input_before_anything_runs(py_tool) -> None:
    assert_failure(run_tool(py_tool("ok"), {"n": {1, 2}}, timeout_s=5, limits=LIMITS), FailureClass.bad_input, "input is not JSON")


# --------------------------------------------------------------------------- executable

EXE_TOOLS = {
    "echo.py": """
        import json, sys
        json.dump({"got": json.load(sys.stdin), "argv": sys.argv[1:]}, sys.stdout)
    """,
    "env.py": """
        import json, os, sys
        sys.stdin.read()
        json.dump({"env": dict(os.environ), "cwd": os.getcwd()}, sys.stdout)
    """,
    "fail.py": """
        import sys
        sys.stdin.read()
        print("something broke: details here", file=sys.stderr)
        sys.exit(int(sys.argv[1]))
    """,
    "chatty.py": """
        import sys
        sys.stdin.read()
        for n in range(40):
            print(f"processed chunk {n} of the input, all is well so far", file=sys.stderr)
        print("fatal: THE REAL REASON", file=sys.stderr)
        sys.exit(1)
    """,
    "fork_and_sleep.py": """
        import os, sys, time
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        print(f"pids {os.getpid()} {child}", file=sys.stderr, flush=True)
        time.sleep(120)
    """,
    "daemonize.py": """
        import json, os, sys, time
        if os.fork() == 0:  # a straggler that keeps stdout open after the leader exits
            time.sleep(120)
            os._exit(0)
        json.dump({"leader": os.getpid()}, sys.stdout)
        sys.stdout.flush()
    """,
    "escape.py": """
        import json, os, sys, time
        how, end, pidfile = sys.argv[1:4]
        sys.stdin.read()
        read_end, write_end = os.pipe()
        if os.fork() == 0:
            os.setsid()  # a session and process group of its own: out of reach of the group kill
            if how == "daemon" and os.fork() != 0:
                os._exit(0)  # the double fork: the daemon's parent is gone at once
            os.write(write_end, str(os.getpid()).encode())
            os.execvp("sleep", ["sleep", "300"])
        os.close(write_end)
        escaped = int(os.read(read_end, 32))
        with open(pidfile, "w") as f:
            f.write(str(escaped))
        if end in ("hang", "late"):
            time.sleep(120 if end == "hang" else 1)
        elif end == "fail":
            sys.exit(1)
        print(json.dumps({"escaped": escaped}))
    """,
    "print.py": """
        import sys
        sys.stdout.write(sys.argv[1])
    """,
    "flood.py": """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
    """,
    "ignore_stdin.py": """
        print('{"ignored": true}')
    """,
    "limits.py": """
        import json, os, sys
        what = sys.argv[1]
        if what == "memory":
            blob = bytearray(400 * 1024 * 1024)
        elif what == "file":
            with open("big.bin", "wb") as f:
                f.write(b"x" * (3 * 1024 * 1024))
        elif what == "files":
            handles = [open(os.devnull) for _ in range(200)]
        elif what == "cpu":
            while True:
                pass
        elif what == "processes":
            import subprocess
            procs = [subprocess.Popen(["sleep", "5"]) for _ in range(40)]
        print(json.dumps({"survived": what}))
    """,
}


@pytest.fixture
def exe_dir(tmp_path: Path) -> Path:
    tool_dir = tmp_path / "exetool"
    tool_dir.mkdir()
    for filename, code in EXE_TOOLS.items():
        (tool_dir / filename).write_text(textwrap.dedent(code))
    return tool_dir


def exe(tool_dir: Path, *argv: str, name: str = "exe_tool") -> ToolManifest:
    return make_tool(tool_dir, name, {"kind": "executable", "argv": ["{python}", *argv]})


def test_executable_success(exe_dir: Path) -> None:
    outcome = run_tool(exe(exe_dir, "{tool_dir}/echo.py", "--mode", "{mode}"), {"mode": "fast", "n": [1, 2]}, timeout_s=10, limits=LIMITS)
    assert outcome.success, outcome
    assert outcome.output == {"got": {"mode": "fast", "n": [1, 2]}, "argv": ["--mode", "fast"]}


def test_executable_large_input_and_output_pass_through_pipes(exe_dir: Path) -> None:
    data = {"text": "é" * 600_000}  # far beyond a pipe buffer, both ways
    outcome = run_tool(exe(exe_dir, "{tool_dir}/echo.py"), data, timeout_s=10, limits=RunLimits(output_limit_bytes=5_000_000))
    assert outcome.success and outcome.output["got"] == data


def test_shell_metacharacters_reach_the_program_as_one_literal_argument(exe_dir: Path) -> None:
    payload = "; rm -rf / && echo $(whoami) | cat `id` > /tmp/x {python} 'quoted' \"dq\"\n"
    outcome = run_tool(exe(exe_dir, "{tool_dir}/echo.py", "{payload}", "pre-{payload}"), {"payload": payload}, timeout_s=10, limits=LIMITS)
    assert outcome.success, outcome
    assert outcome.output["argv"] == [payload, "pre-" + payload]


def test_builtin_placeholders_win_over_input_keys(exe_dir: Path) -> None:
    outcome = run_tool(exe(exe_dir, "{tool_dir}/echo.py", "{tool_dir}", "{{literal}}"), {"tool_dir": "/etc"}, timeout_s=10, limits=LIMITS)
    assert outcome.output["argv"] == [str(exe_dir), "{literal}"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["{tool_dir}/echo.py", "{missing}"], "unknown placeholder {missing}"),
        (["{tool_dir}/echo.py", "{evolved_file}"], "placeholder {evolved_file} has no value"),
    ],
)
def test_placeholders_this_input_cannot_fill_are_bad_input(exe_dir: Path, argv: list[str], fragment: str) -> None:
    outcome = run_tool(exe(exe_dir, *argv), {"mode": "x"}, timeout_s=10, limits=LIMITS)
    assert_failure(outcome, FailureClass.bad_input, fragment)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["{tool_dir}/echo.py", "{python.__class__}"], "only plain {name}"),
        (["{tool_dir}/echo.py", "{mode!r}"], "only plain {name}"),
        (["{tool_dir}/echo.py", "{unclosed"], "bad argv template"),
    ],
)
def test_placeholders_no_input_can_fill_are_refused_with_the_manifest(exe_dir: Path, argv: list[str], fragment: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=re.escape(fragment)):
        exe(exe_dir, *argv)


def test_nul_byte_in_a_value_is_bad_input(exe_dir: Path) -> None:
    assert_failure(run_tool(exe(exe_dir, "{tool_dir}/echo.py", "{v}"), {"v": "a\0b"}, timeout_s=10, limits=LIMITS), FailureClass.bad_input, "NUL")


def test_evolved_file_placeholder_resolves_in_the_tool_directory(exe_dir: Path) -> None:
    tool = exe(exe_dir, "{evolved_file}").model_copy(update={"evolved_file": "echo.py"})
    outcome = run_tool(tool, {"a": 1}, timeout_s=10, limits=LIMITS)
    assert outcome.success and outcome.output["got"] == {"a": 1}


def test_environment_is_an_allow_list_and_workdir_is_fresh(exe_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FITTEST_REDIS_URL", "redis://secret@host/0")
    monkeypatch.setenv("FITTEST_QDRANT_API_KEY", "secret")
    monkeypatch.setenv("REDIS_PASSWORD", "secret")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    outcome = run_tool(exe(exe_dir, "{tool_dir}/env.py"), {}, timeout_s=10, limits=LIMITS)
    assert outcome.success, outcome
    env, cwd = outcome.output["env"], outcome.output["cwd"]
    assert not [k for k in env if k.startswith("FITTEST_") or "REDIS" in k or k in ("PYTHONPATH", "AWS_SECRET_ACCESS_KEY")]
    assert "secret" not in json.dumps(env)
    assert env["HOME"] == env["TMPDIR"] == cwd
    assert Path(cwd).name.startswith("fittest-run-") and cwd != str(exe_dir)
    assert not Path(cwd).exists()  # removed after the run
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING"}


@pytest.mark.parametrize(
    ("code", "error_class", "fragment"),
    [
        ("3", FailureClass.crash, "exit status 3"),
        ("1", FailureClass.crash, "something broke: details here"),
        ("65", FailureClass.bad_input, "refused its input (exit 65)"),
    ],
)
def test_non_zero_exit(exe_dir: Path, code: str, error_class: FailureClass, fragment: str) -> None:
    outcome = run_tool(exe(exe_dir, "{tool_dir}/fail.py", code), {}, timeout_s=10, limits=LIMITS)
    assert_failure(outcome, error_class, fragment, "stderr: something broke")


def test_a_long_stderr_keeps_its_last_line(exe_dir: Path) -> None:
    """The tools' README: print why you fail last on stderr. A message cut to travel keeps it."""
    outcome = run_tool(exe(exe_dir, "{tool_dir}/chatty.py"), {}, timeout_s=10, limits=LIMITS)
    assert outcome.error_message is not None and len(outcome.error_message) <= MAX_MESSAGE_CHARS
    assert outcome.error_message.startswith("exit status 1; stderr:")
    assert outcome.error_message.endswith("fatal: THE REAL REASON")

@pytest.mark.parametrize(
    ("text", "fragment"),
    [("hello world", "not JSON"), ("", "empty output"), ("   \n", "empty output"), ("null", "empty output"), ('{"a": 1} trailing', "not JSON")],
)
def test_bad_stdout_is_bad_output(exe_dir: Path, text: str, fragment: str) -> None:
    outcome = run_tool(exe(exe_dir, "{tool_dir}/print.py", "{text}"), {"text": text}, timeout_s=10, limits=LIMITS)
    assert_failure(outcome, FailureClass.bad_output, fragment)


def test_output_cap_kills_the_tool(exe_dir: Path) -> None:
    started = time.monotonic()
    outcome = run_tool(exe(exe_dir, "{tool_dir}/flood.py"), {}, timeout_s=20, limits=RunLimits(output_limit_bytes=100_000))
    assert time.monotonic() - started < 10  # stopped at the cap, not at the timeout
    assert_failure(outcome, FailureClass.bad_output, "exceeded the limit of 100000 bytes")


def test_timeout_kills_the_whole_process_group(exe_dir: Path) -> None:
    started = time.monotonic()
    outcome = run_tool(exe(exe_dir, "{tool_dir}/fork_and_sleep.py"), {}, timeout_s=1.0, limits=LIMITS)
    assert time.monotonic() - started < 5
    assert_failure(outcome, FailureClass.timeout, "process group killed", "pids ")
    leader, child = (int(p) for p in outcome.error_message.split("pids ")[1].split()[:2])  # type: ignore[union-attr]
    assert gone(leader)
    assert reaped(child)


def test_stragglers_do_not_hold_up_a_finished_tool(exe_dir: Path) -> None:
    started = time.monotonic()
    outcome = run_tool(exe(exe_dir, "{tool_dir}/daemonize.py"), {}, timeout_s=10, limits=LIMITS)
    assert outcome.success, outcome
    assert time.monotonic() - started < 5  # did not wait for the timeout
    assert gone(outcome.output["leader"])


@pytest.mark.parametrize("how", ["setsid", "daemon"])
@pytest.mark.parametrize("end", ["ok", "fail", "hang"])
def test_processes_that_left_the_group_do_not_outlive_the_attempt(exe_dir: Path, tmp_path: Path, how: str, end: str) -> None:
    """The group kill misses a process in a session of its own; it is killed and reaped anyway."""
    pidfile = tmp_path / "escaped.pid"
    outcome = run_tool(exe(exe_dir, "{tool_dir}/escape.py", how, end, "{pidfile}"), {"pidfile": str(pidfile)}, timeout_s=2.0, limits=LIMITS)
    expected = {"ok": None, "fail": FailureClass.crash, "hang": FailureClass.timeout}[end]
    assert outcome.error_class is expected, outcome
    assert reaped(int(pidfile.read_text()))


def test_children_the_worker_started_itself_are_left_alone(exe_dir: Path) -> None:
    """Only what appeared during the run is swept: not the worker's own children, not even in
    a session of their own."""
    own = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert run_tool(exe(exe_dir, "{tool_dir}/daemonize.py"), {}, timeout_s=10, limits=LIMITS).success
        assert own.poll() is None
    finally:
        own.kill()
        own.wait()


def test_a_run_on_another_thread_keeps_its_process_through_this_runs_sweep(exe_dir: Path, tmp_path: Path) -> None:
    """Two runs in flight in one process: the one that ends first sweeps its orphans, not the
    leader of the other, started after it, also a child of this process in a session of its own."""
    pidfile = tmp_path / "escaped.pid"
    escaping: list[RunOutcome] = []
    tool = exe(exe_dir, "{tool_dir}/escape.py", "setsid", "late", "{pidfile}")
    other = threading.Thread(target=lambda: escaping.append(run_tool(tool, {"pidfile": str(pidfile)}, timeout_s=10, limits=LIMITS)))
    other.start()
    time.sleep(0.3)  # that run is in flight: this one's leader starts after it, ends after its sweep
    slow = run_tool(exe(exe_dir, "-c", "import time; time.sleep(1.5); print('{{}}')"), {}, timeout_s=10, limits=LIMITS)
    other.join()
    assert escaping[0].success, escaping[0]
    assert slow.success and slow.output == {}, slow
    assert reaped(int(pidfile.read_text()))


def test_a_tool_does_not_outlive_its_worker_killed_with_sigkill(tmp_path: Path) -> None:
    """The timeout is the worker's doing: a worker killed mid-attempt left its tool running past it,
    beside the attempt's redelivery (QA R: 29 s into a 15 s timeout, 200 s to go)."""
    pidfile = tmp_path / "tool.pid"
    tool = make_tool(tmp_path / "hang", "hang", {"kind": "executable", "argv": ["{python}", "{tool_dir}/hang.py", "{pidfile}"]},
                     {"hang.py": """
                         import os, sys, time
                         with open(sys.argv[1], "w") as f:
                             f.write(str(os.getpid()))
                         time.sleep(120)
                     """})
    worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from selection.manifest import ToolManifest
        from workers.runners import RunLimits, run_tool
        run_tool(ToolManifest.model_validate_json({tool.model_dump_json()!r}), {{"pidfile": {str(pidfile)!r}}},
                 timeout_s=60, limits=RunLimits())
    """)])
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline and worker.poll() is None, "the tool did not start"
            time.sleep(0.05)
        worker.kill()
        worker.wait()
        assert gone(int(pidfile.read_text()))
    finally:
        worker.kill()
        if pidfile.exists() and pidfile.read_text() and not gone(int(pidfile.read_text()), within_s=0):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # without the guard: no 120 s leftover


def test_an_evolved_python_version_cannot_leave_a_process_behind(tmp_path: Path) -> None:
    """An evolved version runs through the executable runner (workers/runners/isolated.py), so
    what it starts in a session of its own is swept too."""
    code = """
        import subprocess

        def spawn(input):
            return {"escaped": subprocess.Popen(["sleep", "300"], start_new_session=True).pid}
    """
    original = make_tool(tmp_path / "spawner", "spawner", {"kind": "python", "entrypoint": "tool:spawn"}, {"tool.py": code})
    evolved = original.model_copy(update={"version": "1.1.0", "parent_version": "1.0.0"})
    outcome = run_tool(evolved, {}, timeout_s=10, limits=LIMITS)
    assert outcome.success, outcome
    assert outcome.output["escaped"] != os.getpid() and reaped(outcome.output["escaped"])


def test_tool_that_ignores_stdin(exe_dir: Path) -> None:
    outcome = run_tool(exe(exe_dir, "{tool_dir}/ignore_stdin.py"), {"big": "x" * 500_000}, timeout_s=10, limits=LIMITS)
    assert outcome.success and outcome.output == {"ignored": True}


def test_a_python_executable_that_reads_a_key_its_input_lacks_refused_the_input(exe_dir: Path) -> None:
    """QA recheck: a fallback executable reading a key of another tool's input exits with a KeyError
    traceback, and was charged a crash on a job whose words were near its own (quality 0.00); a
    python tool's KeyError was bad input all along."""
    (exe_dir / "reads.py").write_text("import json, sys\nd = json.load(sys.stdin)\nprint(json.dumps({'u': d['u'].upper()}))\n")
    assert_failure(run_tool(exe(exe_dir, "{tool_dir}/reads.py"), {"text": "x"}, timeout_s=10, limits=LIMITS),
                   FailureClass.bad_input, "the tool read 'u', which the input lacks")
    (exe_dir / "looks_up.py").write_text("import json, sys\nd = json.load(sys.stdin)\nprint({}[next(iter(d))])\n")
    # a key its input has, missing elsewhere: its own bug, a crash
    assert_failure(run_tool(exe(exe_dir, "{tool_dir}/looks_up.py"), {"u": "x"}, timeout_s=10, limits=LIMITS),
                   FailureClass.crash, "exit status 1")


def test_missing_program_is_unavailable(tmp_path: Path) -> None:
    tool = make_tool(tmp_path / "m", "missing", {"kind": "executable", "argv": ["fittest-no-such-program"]})
    assert_failure(run_tool(tool, {}, timeout_s=5, limits=LIMITS), FailureClass.unavailable, "cannot start")


def test_an_input_value_too_long_for_an_argument_is_bad_input_not_unavailable(tmp_path: Path) -> None:
    """QA M: a 200 kB value for hash_text's {algorithm} made exec fail with E2BIG, classed
    unavailable: five such calls opened the tool's circuit breaker for every caller."""
    tool = make_tool(tmp_path / "a", "arg", {"kind": "executable", "argv": ["/bin/echo", "{value}"]})
    assert_failure(run_tool(tool, {"value": "x" * 200_000}, timeout_s=5, limits=LIMITS), FailureClass.bad_input,
                   "Argument list too long", "200000 bytes")


@pytest.mark.parametrize(
    ("what", "limits", "error_class", "fragment"),
    [
        ("memory", RunLimits(memory_mb=200), FailureClass.crash, "MemoryError"),
        ("file", RunLimits(max_file_mb=1), FailureClass.crash, "File too large"),
        ("files", RunLimits(max_open_files=64), FailureClass.crash, "Too many open files"),
        ("cpu", RunLimits(cpu_s=1), FailureClass.timeout, "CPU time limit of 1s exceeded"),
    ],
)
def test_resource_limits(exe_dir: Path, what: str, limits: RunLimits, error_class: FailureClass, fragment: str) -> None:
    outcome = run_tool(exe(exe_dir, "{tool_dir}/limits.py", what), {}, timeout_s=20, limits=limits)
    assert_failure(outcome, error_class, fragment)
    assert run_tool(exe(exe_dir, "{tool_dir}/limits.py", what + "-not"), {}, timeout_s=20, limits=limits).success


SPAWN_SH = """\
for i in $(seq 1 40); do sleep 5 & done
echo '{"spawned": 40}'
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_process_limit_applies_when_the_worker_is_not_root(tmp_path: Path) -> None:
    """RLIMIT_NPROC is ignored for root, so the runner sets it only for other users. A forked
    copy of this test process becomes `nobody` and runs a tool that starts 40 processes under a
    limit of 10."""
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody'")
    tool_dir = Path(tempfile.mkdtemp(prefix="fittest-nproc-"))  # readable by nobody, unlike tmp_path
    try:
        os.chmod(tool_dir, 0o755)
        (tool_dir / "spawn.sh").write_text(SPAWN_SH)
        tool = make_tool(tool_dir, "nproc", {"kind": "executable", "argv": ["/bin/sh", "{tool_dir}/spawn.sh"]})
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            try:
                os.close(read_end)
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                outcomes = [run_tool(tool, {}, timeout_s=20, limits=RunLimits(max_processes=n)) for n in (10, 100)]
                os.write(write_end, json.dumps([o.model_dump(mode="json") for o in outcomes]).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
        limited, roomy = (RunOutcome.model_validate(o) for o in json.loads(data))
        assert_failure(limited, FailureClass.crash, "fork")
        assert roomy.success and roomy.output == {"spawned": 40}
    finally:
        shutil.rmtree(tool_dir, ignore_errors=True)


# --------------------------------------------------------------------------- http


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        routes = {
            "/echo": (200, json.dumps({"got": json.loads(body), "ctype": self.headers["Content-Type"], "token": self.headers.get("X-Token")}).encode()),
            "/500": (500, b'{"error": "database down"}'),
            "/503": (503, b"maintenance"),
            "/400": (400, b'{"error": "bad field x"}'),
            "/429": (429, b"slow down"),
            "/html": (200, b"<html>hello</html>"),
            "/null": (200, b"null"),
            "/big": (200, json.dumps({"blob": "x" * 200_000}).encode()),
        }
        if self.path == "/slow":
            time.sleep(3)
            status, data = 200, b"{}"
        else:
            status, data = routes.get(self.path, (404, b"{}"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def http_base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def http_tool(url: str, **headers: str) -> ToolManifest:
    return ToolManifest.model_validate({"name": "web", "description": "d", "implementation": {"kind": "http", "url": url, "headers": headers}})


def test_http_success(http_base: str) -> None:
    outcome = run_tool(http_tool(f"{http_base}/echo", **{"X-Token": "t1"}), {"q": "ü"}, timeout_s=5, limits=LIMITS)
    assert outcome.success, outcome
    assert outcome.output == {"got": {"q": "ü"}, "ctype": "application/json", "token": "t1"}


@pytest.mark.parametrize(
    ("path", "error_class", "fragment"),
    [
        ("/500", FailureClass.unavailable, "HTTP 500"),
        ("/503", FailureClass.unavailable, "maintenance"),
        ("/429", FailureClass.unavailable, "HTTP 429"),
        ("/400", FailureClass.bad_input, "bad field x"),
        ("/missing", FailureClass.bad_input, "HTTP 404"),
        ("/html", FailureClass.bad_output, "not JSON"),
        ("/null", FailureClass.bad_output, "empty output"),
    ],
)
def test_http_failures_are_classified(http_base: str, path: str, error_class: FailureClass, fragment: str) -> None:
    assert_failure(run_tool(http_tool(http_base + path), {}, timeout_s=5, limits=LIMITS), error_class, fragment)


def test_an_http_tool_may_not_call_the_stacks_own_services(http_base: str) -> None:
    """QA 57c H4: a manifest whose URL was Flower's API on 127.0.0.1 shut the evolver down."""
    from workers.runners.base import own_ports
    from workers.settings import Settings

    port = int(http_base.rsplit(":", 1)[1])
    settings = Settings(flower_port=port, redis_url="redis://localhost:6390/2", qdrant_url="http://10.0.0.5:6333")
    assert own_ports(settings) == {port: "Flower (FITTEST_FLOWER_PORT)", 9808: "the metrics endpoint (FITTEST_METRICS_PORT)",
                                   6390: "Redis (FITTEST_REDIS_URL)"}  # a Qdrant on another host is no port of this one
    limits = RunLimits.from_settings(settings)
    # QA 57d H1: the host spelled otherwise reached Flower all the same (this host's name, `0`, the
    # decimal and IPv4-mapped forms of 127.0.0.1, the host's own address)
    spellings = ["127.0.0.1", "localhost", "0", "2130706433", "[::ffff:127.0.0.1]"]
    try:  # this host's name, and an address of its own that is not loopback, where its name resolves
        named = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        spellings += [socket.gethostname(), *{str(info[4][0]) for info in named if not str(info[4][0]).startswith("127.")}]
    except socket.gaierror:
        pass
    for host in spellings:
        assert_failure(run_tool(http_tool(f"http://{host}:{port}/echo"), {"q": 1}, timeout_s=5, limits=limits),
                       FailureClass.crash, "refused:", "which serves fittest itself: an http tool may not call it")
    assert_failure(run_tool(http_tool("http://localhost:6390/"), {"q": 1}, timeout_s=5, limits=limits), FailureClass.crash,
                   "is Redis (FITTEST_REDIS_URL) on this host")
    assert run_tool(http_tool(f"{http_base}/echo"), {"q": 1}, timeout_s=5, limits=LIMITS).success  # another stack's port


def test_http_response_cap(http_base: str) -> None:
    outcome = run_tool(http_tool(f"{http_base}/big"), {}, timeout_s=5, limits=RunLimits(output_limit_bytes=10_000))
    assert_failure(outcome, FailureClass.bad_output, "exceeds the limit")


def test_http_read_timeout_is_timeout(http_base: str) -> None:
    started = time.monotonic()
    outcome = run_tool(http_tool(f"{http_base}/slow"), {}, timeout_s=0.5, limits=LIMITS)
    assert time.monotonic() - started < 2.5
    assert_failure(outcome, FailureClass.timeout)


def test_a_runner_that_raises_fails_the_attempt_instead_of_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA M: an http header httpx could not encode raised UnicodeEncodeError out of run_tool, so
    the execute step failed: no fallback, no failure recorded, the tool kept ranking first."""
    import workers.runners as runners

    def slips(*args: Any, **kwargs: Any) -> RunOutcome:
        raise UnicodeEncodeError("ascii", "Équipe", 0, 1, "ordinal not in range(128)")

    monkeypatch.setitem(runners.RUNNERS, "http", slips)
    tool = ToolManifest.model_validate({"name": "h", "description": "h", "implementation": {"kind": "http", "url": "http://127.0.0.1:9/x"}})
    assert_failure(run_tool(tool, {}, timeout_s=1, limits=LIMITS), FailureClass.crash,
                   "the http runner could not run h@1.0.0: UnicodeEncodeError")


def test_http_connection_refused_is_unavailable() -> None:
    outcome = run_tool(http_tool(f"http://127.0.0.1:{free_port()}/x"), {}, timeout_s=5, limits=LIMITS)
    assert_failure(outcome, FailureClass.unavailable, "cannot connect")


# --------------------------------------------------------------------------- example tools


@pytest.fixture(scope="module")
def example_service() -> Iterator[int]:
    """examples/tools/http_server.py on a free port, as an operator would start it."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE_TOOLS / "http_server.py")],
        env={**os.environ, "FITTEST_EXAMPLE_HTTP_PORT": str(port)},
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the example HTTP service did not start")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _example_cases() -> list[Any]:
    registry = ToolRegistry.load([EXAMPLE_TOOLS])
    return [
        pytest.param(m, case, id=f"{m.key}-{i}")
        for m in registry.all()
        for i, case in enumerate(m.test_cases)
    ]


def _on_port(manifest: ToolManifest, port: int) -> ToolManifest:
    impl = manifest.implementation
    url = impl.url.replace(":8765/", f":{port}/")  # type: ignore[union-attr]
    return manifest.model_copy(update={"implementation": impl.model_copy(update={"url": url})})


@pytest.mark.parametrize(("manifest", "case"), _example_cases())
def test_example_tools_pass_their_own_test_cases(manifest: ToolManifest, case: TestCase, request: pytest.FixtureRequest) -> None:
    if manifest.implementation.kind == "http":
        manifest = _on_port(manifest, request.getfixturevalue("example_service"))
    outcome = run_tool(manifest, case.input, timeout_s=manifest.timeout_s, limits=LIMITS)
    assert case.check(outcome.success, outcome.output) is None, outcome
    assert outcome.success or outcome.error_class is not None, outcome


def test_slow_sorter_times_out_where_fast_sort_succeeds() -> None:
    """The demo's fallback, for real: a large list is too much for the quadratic sorter."""
    registry = ToolRegistry.load([EXAMPLE_TOOLS])
    numbers = list(range(40_000, 0, -1))
    slow = registry.get("sort_numbers@1.0.0")
    fast = registry.get("fast_sort@1.0.0")
    assert slow is not None and fast is not None
    assert_failure(run_tool(slow, {"numbers": numbers}, timeout_s=slow.timeout_s, limits=LIMITS), FailureClass.timeout)
    outcome = run_tool(fast, {"numbers": numbers}, timeout_s=fast.timeout_s, limits=LIMITS)
    assert outcome.success and outcome.output["numbers"][:3] == [1, 2, 3]


def test_csv_to_json_crashes_on_ragged_rows() -> None:
    tool = ToolRegistry.load([EXAMPLE_TOOLS]).get("csv_to_json@1.0.0")
    assert tool is not None
    outcome = run_tool(tool, {"csv": "a,b\n1,2\n3\n"}, timeout_s=tool.timeout_s, limits=LIMITS)
    assert_failure(outcome, FailureClass.crash, "RaggedRowError", "line 3 has 1 fields")


# --------------------------------------------------------------------------- a worker stopped mid-run

def stopped_while_running(run: Callable[[], RunOutcome], started: Path, stop_after_s: float = 0.3,
                          stop_for_s: float = 4.0) -> RunOutcome:
    """`run()` in a forked process that is stopped (SIGSTOP) `stop_after_s` after its tool wrote
    `started`, for `stop_for_s`, as an executor frozen past its lease, or a paused VM, is."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=lambda: sender.send(run().model_dump(mode="json")), daemon=True)
    worker.start()
    assert worker.pid is not None
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline, "the tool did not start"
            time.sleep(0.02)
        time.sleep(stop_after_s)
        os.kill(worker.pid, signal.SIGSTOP)
        time.sleep(stop_for_s)
        os.kill(worker.pid, signal.SIGCONT)
        assert receiver.poll(30), "the run did not end"
        return RunOutcome.model_validate(receiver.recv())
    finally:
        worker.join(10)


NAPS = """
import json, pathlib, sys, time

def naps(input):
    pathlib.Path(input["started"]).touch()
    for _ in range(input["naps"]):
        time.sleep(0.1)
    return {"done": True}

if __name__ == "__main__":
    print(json.dumps(naps(json.load(sys.stdin))))
"""


def test_the_time_a_worker_is_stopped_is_not_a_tools_timeout(tmp_path: Path) -> None:
    """QA resilience: an executor frozen past its lease woke to find its tool past its wall-clock
    deadline, and charged a correct tool a timeout (1.00 -> 0.95) while the copy of its attempt that
    another executor ran succeeded. Both runners now leave the stopped time out of the deadline."""
    as_exe = make_tool(tmp_path / "exe", "naps", {"kind": "executable", "argv": ["{python}", "{tool_dir}/naps.py"]},
                       {"naps.py": NAPS})
    in_process = make_tool(tmp_path / "py", "naps", {"kind": "python", "entrypoint": "naps:naps"}, {"naps.py": NAPS})
    # An executable runs on while its worker is stopped: 5 s of naps, still running when the worker
    # wakes 4.3 s in, past its 2 s by the clock, ~1 s by the time watched.
    started = tmp_path / "exe.started"
    napping = stopped_while_running(lambda: run_tool(as_exe, {"started": str(started), "naps": 50}, timeout_s=2,
                                                     limits=LIMITS), started)
    assert napping.success and napping.output == {"done": True}, napping
    # Its process ran on meanwhile: its run took the wall time (QA recheck: 1.6 s recorded as 11 ms).
    assert napping.stalled_s == 0 and napping.elapsed_ms > 4000, napping
    # An in-process python tool is stopped with its worker: 1 s of naps, in a run 5 s long by the clock.
    started = tmp_path / "py.started"
    napped = stopped_while_running(lambda: run_tool(in_process, {"started": str(started), "naps": 10}, timeout_s=2,
                                                    limits=LIMITS), started)
    assert napped.success and napped.output == {"done": True} and napped.stalled_s > 3, napped
    # A tool that overruns its timeout in the time it was watched still times out.
    started = tmp_path / "long.started"
    overran = stopped_while_running(lambda: run_tool(as_exe, {"started": str(started), "naps": 300}, timeout_s=1.5,
                                                     limits=LIMITS), started, stop_for_s=3.0)
    assert_failure(overran, FailureClass.timeout, "no result within 1.5s")


def test_the_working_directories_of_runs_whose_process_died_are_removed(tmp_path: Path) -> None:
    """QA 49: a worker process killed mid-run never removed its run's working directory; the next
    worker process to start removes those of dead processes, and no live process's."""
    import subprocess
    import sys

    from workers.runners.executable import WORKDIR_PREFIX, remove_left_behind

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"{WORKDIR_PREFIX}{gone.stdout.strip()}-abc123"
    live = tmp_path / f"{WORKDIR_PREFIX}{os.getpid()}-def456"
    for workdir in (dead, live):
        (workdir / "sub").mkdir(parents=True)
        (workdir / "sub" / "left.txt").write_text("x")
    assert remove_left_behind(tmp_path) == [dead]
    assert not dead.exists() and (live / "sub" / "left.txt").exists()


SNOOP = """#!/bin/sh
# what a hostile tool tries (QA 57c H1, H2): its worker's environment, and its own tool folder
if cat "/proc/$PPID/environ" > /dev/null 2>&1; then environ=true; else environ=false; fi
if touch "$(dirname "$0")/planted" 2> /dev/null; then planted=true; else planted=false; fi
if touch "$HOME/scratch" 2> /dev/null; then scratch=true; else scratch=false; fi
echo "{\\"uid\\": $(id -u), \\"read_worker_environ\\": $environ, \\"wrote_tool_folder\\": $planted, \\"wrote_workdir\\": $scratch}"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a tool as another user needs root")
def test_a_tool_run_as_the_tool_user_cannot_read_the_workers_environment_nor_write_its_folder() -> None:
    """QA 57c H1, H2: a tool running as the worker's user read the Redis password from its worker's
    /proc/PID/environ, and rewrote another tool's code. FITTEST_TOOL_USER runs it as another user."""
    import pwd

    from workers.settings import Settings

    nobody = pwd.getpwnam("nobody")
    root = Path(tempfile.mkdtemp(prefix="fittest-tool-user-", dir="/tmp"))  # pytest's own tmp is root's alone
    try:
        root.chmod(0o755)
        tool = make_tool(root / "snoop", "snoop", {"kind": "executable", "argv": ["{tool_dir}/snoop.sh"]}, {"snoop.sh": SNOOP})
        (root / "snoop").chmod(0o755)
        (root / "snoop" / "snoop.sh").chmod(0o755)
        limits = RunLimits.from_settings(Settings(tool_user="nobody"))
        assert limits.run_as == (nobody.pw_uid, nobody.pw_gid)
        confined = run_tool(tool, {}, timeout_s=10, limits=limits)
        assert confined.success, confined
        assert confined.output == {"uid": nobody.pw_uid, "read_worker_environ": False, "wrote_tool_folder": False,
                                   "wrote_workdir": True}
        as_worker = run_tool(tool, {}, timeout_s=10, limits=LIMITS)  # what it can do as the worker's user
        assert as_worker.output == {"uid": 0, "read_worker_environ": True, "wrote_tool_folder": True, "wrote_workdir": True}
        with pytest.raises(ValueError, match="no user 'no-such-user' on this host"):
            Settings(tool_user="no-such-user")
    finally:
        shutil.rmtree(root)


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a tool as another user needs root")
def test_whether_the_tool_user_can_run_fittests_python_is_found_before_any_tool_needs_it() -> None:
    """QA 57d M1: with the interpreter where the tool user cannot read it (here, under /root), every
    {python} tool, evolved python version and verification failed as its tool's fault, unannounced;
    `fittest up` now says so before it starts the roles."""
    import pwd

    from workers.runners.executable import python_refused

    nobody = pwd.getpwnam("nobody")
    assert python_refused(LIMITS) is None  # no tool user: nothing to ask
    try:  # what the tool user can do, asked of the system directly
        runs = subprocess.run([sys.executable, "-c", "import workers.sandbox"], user=nobody.pw_uid, group=nobody.pw_gid,
                              extra_groups=[], cwd="/", capture_output=True, timeout=60).returncode == 0
    except PermissionError:
        runs = False
    refused = python_refused(RunLimits(run_as=(nobody.pw_uid, nobody.pw_gid)))
    assert (refused is None) == runs, refused

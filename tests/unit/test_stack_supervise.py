"""`fittest up`'s supervisor: a role that ends is started again, the others keep running, and a
role that keeps ending stops the stack with one line saying so."""

from __future__ import annotations

import datetime
import io
import multiprocessing as mp
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from honcho.printer import Printer

from workers.procfile import RoleRelay, Supervisor


@pytest.fixture(autouse=True)
def _keep_signal_handlers() -> Iterator[None]:
    """The supervisor's loop takes SIGINT and SIGTERM, as `up` does: give them back to pytest."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def supervisor(out: io.StringIO, **kwargs: float) -> Supervisor:
    manager = Supervisor(printer=Printer(out), **kwargs)  # type: ignore[arg-type]
    manager._process_ctor = RoleRelay
    return manager


def when(condition: Path, then: object, within_s: float = 20.0) -> threading.Thread:
    """Call `then` once the file `condition` exists (from a thread: the loop holds the main one)."""
    def wait() -> None:
        deadline = time.monotonic() + within_s
        while not condition.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        then()  # type: ignore[operator]

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def in_fresh_process(scenario: Callable[[str], dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    """Run a scenario in a new interpreter: the supervisor forks a relay per role, and a fork of
    this test process, after the suite's integration tests, took ~15 s each."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=_report, args=(scenario, str(tmp_path), results))  # not a pool's: a daemon may not fork
    child.start()
    try:
        return results.get(timeout=60)
    finally:
        child.join(10)


def _report(scenario: Callable[[str], dict[str, Any]], folder: str, results: Any) -> None:
    results.put(scenario(folder))


def restarted(folder: str) -> dict[str, Any]:
    tmp_path = Path(folder)
    out = io.StringIO()
    manager = supervisor(out, backoff_s=0.1)
    # steady notes each start; crashing dies as a SIGKILLed worker would (rc 137) the first time only
    manager.add_process("steady", "echo start >> steady; exec sleep 30", cwd=str(tmp_path))
    manager.add_process("crashing", "if [ -e crashed ]; then touch back; exec sleep 30; fi; touch crashed; exit 137",
                        cwd=str(tmp_path))
    when(tmp_path / "back", manager.terminate)
    started = time.monotonic()
    manager.loop()
    return {"elapsed_s": time.monotonic() - started, "out": out.getvalue()}


def test_a_role_that_ends_is_restarted_and_the_others_keep_running(tmp_path: Path) -> None:
    run = in_fresh_process(restarted, tmp_path)
    out = run["out"]
    assert run["elapsed_s"] < 15, out
    assert (tmp_path / "back").exists(), out  # crashing came back
    assert (tmp_path / "steady").read_text() == "start\n"  # steady was never stopped meanwhile
    assert "crashing stopped (rc=137, SIGKILL): restarting it in 0.1 s (it ran 0 s: failed start 1 of 5 allowed in 300 s)" in out
    assert out.count("restarting it") == 1


def restarted_past_a_child_holding_its_output(folder: str) -> dict[str, Any]:
    tmp_path = Path(folder)
    out = io.StringIO()
    manager = supervisor(out, backoff_s=0.1)
    # the first run leaves a child behind that holds the role's output open for 30 s, as a python
    # tool's fork does, and ends as a killed worker would
    manager.add_process("forking", "if [ -e crashed ]; then touch back; exec sleep 30; fi; touch crashed; "
                        "(sleep 30 &); exit 137", cwd=str(tmp_path))
    when(tmp_path / "back", manager.terminate)
    started = time.monotonic()
    manager.loop()
    return {"elapsed_s": time.monotonic() - started, "out": out.getvalue()}


def test_a_role_is_restarted_when_it_ends_though_a_child_of_it_holds_its_output(tmp_path: Path) -> None:
    """QA resilience: a python tool forked a child; the executor, killed, stayed a zombie until the
    child ended (47 s and 107 s), since the relay read the role's output to its end first."""
    run = in_fresh_process(restarted_past_a_child_holding_its_output, tmp_path)
    assert (tmp_path / "back").exists(), run["out"]
    assert run["elapsed_s"] < 15, run["out"]
    assert "forking stopped (rc=137, SIGKILL): restarting it in 0.1 s" in run["out"]


def given_up(folder: str) -> dict[str, Any]:
    out = io.StringIO()
    manager = supervisor(out, limit=2, backoff_s=0.05)
    manager.add_process("steady", "exec sleep 120", cwd=folder)  # ended by the give-up, not by itself
    manager.add_process("broken", "echo run >> runs; exit 3", cwd=folder)
    started = time.monotonic()
    manager.loop()  # returns by itself
    return {"elapsed_s": time.monotonic() - started, "out": out.getvalue(), "returncode": manager.returncode}


def test_a_role_that_keeps_ending_stops_the_stack(tmp_path: Path) -> None:
    run = in_fresh_process(given_up, tmp_path)
    out = run["out"]
    assert run["elapsed_s"] < 60, out  # not the 120 s of steady's sleep (it failed at 15 s with load 8)
    assert run["returncode"] == 3
    assert (tmp_path / "runs").read_text().count("run") == 3  # started, restarted twice
    assert out.count("restarting it") == 2
    assert "broken stopped (rc=3) within 30 s of its start, 3 times in 300 s: giving up, stopping every role" in out
    assert "sending SIGTERM to steady" in out


def test_only_the_ends_within_the_window_count_and_set_the_backoff() -> None:
    now = [0.0]
    manager = Supervisor(printer=Printer(io.StringIO()), limit=2, window_s=60.0, backoff_s=1.0,
                         backoff_max_s=3.0, clock=lambda: now[0])
    manager._processes["role"] = {}
    for t, due in ((0.0, 1.0), (10.0, 12.0)):  # 1 s, then 2 s
        now[0] = t
        manager._ended("role", 1)
        assert manager._due.pop("role") == due
    now[0] = 100.0  # the two ends above are out of the window: a first restart again
    manager._ended("role", 1)
    assert manager._due.pop("role") == 101.0 and not manager._terminating
    for t in (101.0, 102.0):
        now[0] = t
        manager._ended("role", 1)
    assert manager._terminating and manager.returncode == 1  # three ends in 60 s: given up


def test_a_role_that_had_started_is_restarted_however_often_it_is_ended() -> None:
    """QA recheck 47: a tool that kills its executor cost two restarts a call, and three calls
    within 5 minutes stopped the stack. Only an end within `started_after_s` of the role's start is
    a failed start that counts toward the limit (supervisord's `startsecs`)."""
    now, out = [0.0], io.StringIO()
    manager = Supervisor(printer=Printer(out), limit=2, window_s=300.0, backoff_s=1.0, started_after_s=30.0,
                         clock=lambda: now[0])
    manager._processes["executor"] = {}

    def start(at: float) -> None:
        now[0] = at
        manager._handle(SimpleNamespace(type="start", name="executor", data={"pid": 7}))

    for t in range(0, 600, 60):  # ten ends, each after a minute of running: none counted
        start(float(t))
        now[0] = t + 59.0
        manager._ended("executor", -9)
        assert manager._due.pop("executor") == t + 60.0 and not manager._terminating
    assert "executor stopped (rc=-9, SIGKILL): restarting it in 1 s (it ran 59 s: not a failed start)" in out.getvalue()
    for at in (600.0, 610.0, 620.0):  # then three that end within 30 s of their start: given up
        start(at)
        now[0] = at + 5.0
        manager._ended("executor", -9)
    assert manager._terminating and "within 30 s of its start, 3 times in 300 s: giving up" in out.getvalue()
    assert manager.returncode == 128 + 9  # a signal's end, as a shell tells it


def test_a_worker_that_said_it_is_ready_had_started_however_soon_it_ends() -> None:
    """QA 48: under a 10 s worker lease, an executor restarted and killed again 11 s later by a tool
    that kills its worker counted as a failed start, and the stack stopped. A worker role logs its
    `worker_ready` event once it consumes its queues; an end after it is no failed start."""
    now, out = [0.0], io.StringIO()
    manager = Supervisor(printer=Printer(out), limit=1, started_after_s=30.0, clock=lambda: now[0])
    manager._processes["executor"] = {}
    for t in (0.0, 20.0, 40.0):
        now[0] = t
        manager._handle(SimpleNamespace(type="start", name="executor", data={"pid": 7}))
        manager._handle(SimpleNamespace(type="line", name="executor", data=b'{"message": "x", "event": "other"}',
                                        time=datetime.datetime.now(), colour=None))
        manager._handle(SimpleNamespace(type="line", name="executor", time=datetime.datetime.now(), colour=None,
                                        data=b'{"message": "executor@vm ready", "event": "worker_ready"}'))
        now[0] = t + 11.0
        manager._ended("executor", -9)
    assert not manager._terminating, out.getvalue()
    assert "(it ran 11 s, ready: not a failed start)" in out.getvalue()
    now[0] = 50.0  # after a failed start, one that had started still comes back after 1 s (QA 48 recheck: 16 s)
    manager._handle(SimpleNamespace(type="start", name="executor", data={"pid": 7}))
    now[0] = 52.0
    manager._ended("executor", -9)
    manager._handle(SimpleNamespace(type="start", name="executor", data={"pid": 7}))
    manager._handle(SimpleNamespace(type="line", name="executor", time=datetime.datetime.now(), colour=None,
                                    data=b'{"message": "executor@vm ready", "event": "worker_ready"}'))
    now[0] = 55.0
    manager._ended("executor", -9)
    assert manager._due["executor"] == 56.0 and not manager._terminating
    manager._ends["executor"].clear()
    for t in (60.0, 70.0):  # restarted, ended before it said so: failed starts, the second past the limit
        now[0] = t
        manager._handle(SimpleNamespace(type="start", name="executor", data={"pid": 7}))
        now[0] = t + 5.0
        manager._ended("executor", -9)
    assert manager._terminating


def test_a_role_ended_by_sigbus_is_told_with_the_free_space_of_the_data_dir(tmp_path: Path) -> None:
    """QA Q: the memory worker, its store's files on a full disk, ended with a bare "Bus error"
    (rc=135) six times and the stack stopped: nothing named the disk."""
    out = io.StringIO()
    manager = Supervisor(printer=Printer(out), data_dir=tmp_path)
    manager._processes["memory"] = {}
    manager._ended("memory", 128 + signal.SIGBUS)
    manager._ended("memory", 1)  # an exit status: its number alone
    lines = out.getvalue().splitlines()
    assert "memory stopped (rc=135, SIGBUS: a memory-mapped file could not be written; " in lines[0]
    assert f"MB free in FITTEST_DATA_DIR ({tmp_path})): restarting it in 1 s" in lines[0]
    assert "memory stopped (rc=1): restarting it in 2 s" in lines[1]


def test_up_says_tools_run_as_root_without_a_process_cap_unless_a_tool_user_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 59d M2: with the workers run as root (the default on this host), a tool capped at 64
    processes started 600, and nothing told the operator: the kernel ignores RLIMIT_NPROC for root."""
    from workers.procfile import root_tools_risk
    from workers.settings import Settings

    monkeypatch.setattr("os.geteuid", lambda: 0)
    said = root_tools_risk(Settings(), ["memory", "executor"])
    assert said is not None and "no cap on their processes" in said and "FITTEST_TOOL_USER" in said
    assert root_tools_risk(Settings(tool_user="nobody"), ["memory", "executor"]) is None
    assert root_tools_risk(Settings(), ["memory", "beat"]) is None  # no role runs a tool
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert root_tools_risk(Settings(), ["executor"]) is None

"""The tool sandbox and the circuit breaker, on real processes.

Evolved python versions are code fittest wrote itself: they run in a limited subprocess, so a
version that forks, eats memory, fills the disk or reads the environment is stopped or sees
nothing, and the worker that ran it does not notice. The runner-level tests show each limit;
the pipeline tests show it through a real execution worker, whose pool processes survive.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selection.manifest import load_manifest
from selection.models import FailureClass
from tests.conftest import whoami_tool
from tests.integration.conftest import Pipeline, pipeline_running
from tests.integration.test_runners import assert_failure
from tests.process_groups import gone, live_members
from workers.runners import RunLimits, run_tool

TOOLS = Path(__file__).parent / "reliability_tools"
HOSTILE = TOOLS / "hostile"
SECRET = "hunter2-must-not-leak"


def evolved(version: str):
    manifest = load_manifest(HOSTILE / f"v{version.replace('.', '_')}.yaml")
    assert manifest.parent_version is not None  # served as an evolved version
    return manifest


# --------------------------------------------------------------------------- runner level
def test_evolved_python_tool_runs_in_another_process_with_the_same_results() -> None:
    original = load_manifest(HOSTILE / "v1_0_0.yaml")
    inside = run_tool(original, {}, timeout_s=10, limits=RunLimits())
    outside = run_tool(evolved("1.7.0"), {"text": "é ✓", "n": [1, 2.5, None]}, timeout_s=10, limits=RunLimits())
    assert inside.success and inside.output == {"ok": True}
    assert outside.success and outside.output == {"text": "é ✓", "n": [1, 2.5, None]}


def test_an_evolved_version_that_runs_its_originals_code_unchanged_runs_in_the_process(tmp_path: Path) -> None:
    """QA: a version evolved by a new description ran its original's code in a process of its own,
    ~100 times as slow (2.9 -> 275 ms a call). Code a mutator changed still runs outside."""
    from evolution.versioning import version_dir
    from workers.evolver import read_parent, write_version

    original = whoami_tool(tmp_path / "tools")
    files = dict(read_parent(original).files)

    def evolved(version: str, files: dict[str, bytes], **changes: Any):
        manifest = original.model_copy(update={"version": version, "parent_version": "1.0.0", **changes})
        return write_version(version_dir(tmp_path / "evolved", "whoami", version), manifest, files)

    described = evolved("1.1.0", files, description="Say which process runs it, by its pid.")
    rewritten = evolved("1.2.0", {"tool.py": files["tool.py"] + b"\n# rewritten\n"})
    me = __import__("os").getpid()

    def pid(manifest) -> int:
        outcome = run_tool(manifest, {}, timeout_s=10, limits=RunLimits(), original=original)
        assert outcome.success, outcome
        return outcome.output["pid"]

    assert pid(original) == me and pid(described) == me
    assert pid(rewritten) != me
    assert run_tool(described, {}, timeout_s=10, limits=RunLimits()).output["pid"] != me  # its original unknown: outside


def test_evolved_tool_sees_an_allow_listed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FITTEST_REDIS_URL", f"redis://:{SECRET}@127.0.0.1:6379/0")
    monkeypatch.setenv("FITTEST_LLM_API_KEY", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    outcome = run_tool(evolved("1.4.0"), {}, timeout_s=10, limits=RunLimits())
    assert outcome.success, outcome
    env = outcome.output["env"]
    assert SECRET not in json.dumps(outcome.output)
    assert not [k for k in env if k.startswith(("FITTEST_", "AWS_")) or "REDIS" in k]
    assert Path(outcome.output["cwd"]).name.startswith("fittest-run-")
    assert outcome.output["pid"] != __import__("os").getpid()


@pytest.mark.parametrize(
    ("version", "limits", "error_class", "fragment"),
    [
        ("1.2.0", RunLimits(memory_mb=200), FailureClass.crash, "MemoryError"),
        ("1.3.0", RunLimits(max_file_mb=2), FailureClass.crash, "File too large"),
    ],
)
def test_evolved_tool_is_stopped_by_its_limits(version: str, limits: RunLimits, error_class: FailureClass, fragment: str) -> None:
    outcome = run_tool(evolved(version), {}, timeout_s=20, limits=limits)
    assert_failure(outcome, error_class, fragment)


def test_evolved_tool_that_forks_loses_its_whole_process_group_at_the_timeout() -> None:
    started = time.monotonic()
    outcome = run_tool(evolved("1.1.0"), {"children": 8}, timeout_s=2.0, limits=RunLimits())
    assert time.monotonic() - started < 10
    assert_failure(outcome, FailureClass.timeout, "process group killed", "pids ")
    pids = [int(p) for p in outcome.error_message.split("pids ")[1].split()[:9]]  # type: ignore[union-attr]
    assert len(pids) == 9
    assert gone(pids[0]) and not live_members(pids[0])


@pytest.mark.parametrize(
    ("payload", "error_class", "fragment"),
    [
        ({"kind": "value"}, FailureClass.bad_input, "ValueError: told to raise"),
        ({"kind": "connection"}, FailureClass.unavailable, "ConnectionRefusedError"),
        ({"kind": "runtime"}, FailureClass.crash, "RuntimeError: told to raise"),
        ({"kind": "exit"}, FailureClass.crash, "SystemExit"),
    ],
)
def test_evolved_tool_failures_keep_their_class(payload: dict[str, Any], error_class: FailureClass, fragment: str) -> None:
    assert_failure(run_tool(evolved("1.5.0"), payload, timeout_s=10, limits=RunLimits()), error_class, fragment)


@pytest.mark.parametrize(("what", "fragment"), [("none", "empty output"), ("set", "not JSON"), ("nan", "not JSON")])
def test_evolved_tool_output_is_judged_like_any_output(what: str, fragment: str) -> None:
    assert_failure(run_tool(evolved("1.6.0"), {"what": what}, timeout_s=10, limits=RunLimits()), FailureClass.bad_output, fragment)
    assert run_tool(evolved("1.6.0"), {"what": "tuple"}, timeout_s=10, limits=RunLimits()).output == [1, "a"]


# --------------------------------------------------------------------------- through a worker
@pytest.fixture(scope="module")
def sandbox_pipeline(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    with pipeline_running(
        tmp_path_factory.mktemp("sandbox"), redis_url, model_path, TOOLS, roles=("memory", "executor"),
        FITTEST_EVOLUTION_ENABLED="false", FITTEST_TOOL_MEMORY_MB="256", FITTEST_OUTPUT_LIMIT_BYTES="10000",
        FITTEST_BREAKER_THRESHOLD="3", FITTEST_BREAKER_COOLDOWN_S="5", FITTEST_LLM_API_KEY=SECRET,
        # brittle's runs of 0.3 and 0.4 s are not to time out: under the 0.5 s floor of the adaptive
        # timeout one did in a clean clone's run (its other runs take milliseconds), and the burst
        # test's breaker was left open for the next test
        FITTEST_MIN_TIMEOUT_S="2",
    ) as p:
        yield p


def pool_processes(p: Pipeline) -> list[int]:
    from workers.app import make_app

    app = make_app(p.settings)
    stats = app.control.inspect(timeout=5).stats() or {}
    app.close()
    (executor,) = [s for node, s in stats.items() if node.startswith("executor@")]
    return sorted(executor["pool"]["processes"])


def test_hostile_evolved_versions_do_not_harm_the_execution_worker(sandbox_pipeline: Pipeline) -> None:
    p = sandbox_pipeline
    before = pool_processes(p)
    expected = {"1.1.0": "timeout", "1.2.0": "crash", "1.3.0": "crash"}
    sent = {v: p.client.send("resilient_tool_call", scenario="misbehave", namespace="hostile", version=v,
                             input={"children": 5}, max_attempts=1) for v in expected}
    for version, error_class in expected.items():
        result = p.client.wait(sent[version], 60)
        assert result["status"] == "failed", result
        assert result["attempts"][0]["error_class"] == error_class, result["attempts"]
    spy = p.call(scenario="read the environment", namespace="hostile", version="1.4.0", max_attempts=1)
    assert spy["status"] == "success", spy
    assert SECRET not in json.dumps(spy)
    assert not [k for k in spy["output"]["env"] if k.startswith("FITTEST_") or "REDIS" in k]
    assert spy["output"]["pid"] not in before  # ran in a process of its own
    polite = p.call(scenario="answer politely", namespace="hostile", version="1.0.0", max_attempts=1)
    assert polite["status"] == "success" and polite["output"] == {"ok": True}
    assert pool_processes(p) == before  # no pool process died or was replaced
    assert all(proc.poll() is None for proc in p.stack.procs.values())


def test_output_over_the_limit_fails_the_attempt_with_a_clear_error(sandbox_pipeline: Pipeline) -> None:
    result = sandbox_pipeline.call(scenario="say a lot", namespace="hostile", version="1.7.0", input={"big": "x" * 20000},
                                   max_attempts=1)
    assert result["status"] == "failed"
    (attempt,) = result["attempts"]
    assert attempt["error_class"] == "bad_output"
    assert "the limit of 10000 bytes" in attempt["error_message"]


def test_circuit_breaker_opens_skips_probes_once_and_closes(sandbox_pipeline: Pipeline) -> None:
    p = sandbox_pipeline
    key = "brittle@1.0.0"
    call: dict[str, Any] = {"scenario": "a tool that crashes when told to fail", "namespace": "brittle", "version": "1.0.0",
                            "max_attempts": 1}
    for _ in range(3):  # FITTEST_BREAKER_THRESHOLD consecutive failures
        assert p.call(input={"fail": True}, **call)["status"] == "failed"
    assert p.state().stats_and_breakers([key])[1][key] == "open"

    skipped = p.call(input={}, **call)  # selection (memory worker) reads the state the executor wrote
    assert skipped["status"] == "no_candidates", skipped
    assert skipped["message"].startswith(f"every version that matches is held back by its circuit breaker ({key})")

    p.wait_for(lambda: p.state().stats_and_breakers([key])[1][key] == "half_open", timeout=10)
    explain = {k: v for k, v in call.items() if k != "max_attempts"}
    for _ in range(2):  # showing the ranking takes no probe from the calls
        assert [r["key"] for r in p.client.wait(p.client.send("explain", **explain), 30)["ranking"]] == [key]
    assert p.state().acquire_lock(f"probe:{key}", "a call in flight", 2.0)  # one probe is out...
    second = p.call(input={}, **call)  # ...so no call sends a second
    assert second["status"] == "no_candidates" and "held back by its circuit breaker" in second["message"]

    p.wait_for(lambda: p.state().acquire_lock(f"probe:{key}", "test", 0.1), timeout=10)  # the probe slot expired
    time.sleep(0.2)
    probe = p.call(input={}, **call)
    assert probe["status"] == "success", probe
    assert p.state().stats_and_breakers([key])[1][key] == "closed"
    assert p.call(input={}, **call)["status"] == "success"


def test_a_burst_planned_before_the_breaker_opened_stops_running_the_tool_once_it_opens(sandbox_pipeline: Pipeline) -> None:
    """Eight calls ranked together while the breaker is closed: the executor's two processes run
    them two by two, and the third failure opens the breaker; the calls whose turn comes after it
    are not run (selection would no longer pick the version, and the executor now agrees)."""
    p = sandbox_pipeline
    key = "brittle@1.0.0"
    call: dict[str, Any] = {"scenario": "a tool that crashes when told to fail", "namespace": "brittle", "version": "1.0.0",
                            "max_attempts": 1, "input": {"fail": True, "sleep": 0.3}}
    sent = [p.client.send("resilient_tool_call", **call) for _ in range(8)]
    results = [p.client.wait(task_id, 60) for task_id in sent]
    ran = [r for r in results if r["attempts"]]
    held = [r for r in results if not r["attempts"]]
    assert all(r["status"] == "failed" and r["attempts"][0]["error_class"] == "crash" for r in ran), [r["attempts"] for r in ran]
    assert 3 <= len(ran) <= 4, [r["status"] for r in results]  # the third failure opens it; the fourth ran beside it
    assert all(r["status"] == "no_candidates" and r["held_back"] == [key] for r in held), held
    assert all(r["message"].startswith(f"every version that matches is held back by its circuit breaker ({key})")
               for r in held)

    p.wait_for(lambda: p.state().stats_and_breakers([key])[1][key] == "half_open", timeout=10)
    assert p.call(input={}, **{k: v for k, v in call.items() if k != "input"})["status"] == "success"  # a probe closes it


def test_results_that_finished_while_the_client_waited_for_another_come_at_once(sandbox_pipeline: Pipeline) -> None:
    """QA: a slow call and four fast ones sent together; waited for in order, each fast one (done
    long before) came a second after the one before it, from the result consumer's pub/sub."""
    p = sandbox_pipeline
    call: dict[str, Any] = {"scenario": "a tool that crashes when told to fail", "namespace": "brittle", "version": "1.0.0",
                            "max_attempts": 1}
    # 0.4 s: under the floor of the adaptive timeout (the fixture's 2 s), which the burst test's 0.3 s runs set here
    slow = p.client.send("resilient_tool_call", input={"sleep": 0.4}, **call)
    fast = [p.client.send("resilient_tool_call", input={}, **call) for _ in range(4)]
    assert p.client.wait(slow, 60)["status"] == "success"
    stored = p.client.celery.backend.get_task_meta  # read beside the waited-for results, which it leaves alone
    p.wait_for(lambda: all(stored(r.id)["status"] == "SUCCESS" for r in fast), timeout=30)
    started = time.monotonic()
    assert [p.client.wait(r, 60)["status"] for r in fast] == ["success"] * 4
    # Read from the backend at once (milliseconds): the result consumer's pub/sub handed them out a
    # second apart, 3.0 s for the four when the fix is taken out. Not a speed goal: the bound is
    # the bug's, with a second of margin for a loaded host (review: 0.9 s left none).
    assert time.monotonic() - started < 2.0


def test_a_call_the_client_stopped_waiting_for_goes_on_and_its_id_gets_the_result_later(sandbox_pipeline: Pipeline) -> None:
    """QA new user: `run(timeout=...)` raised celery's TimeoutError, which `except TimeoutError`
    does not catch, with no call id in it: a call whose id the client chose could not be asked for."""
    from fittest.client import CallTimeout, FittestClient

    with FittestClient(settings=sandbox_pipeline.settings) as client:
        with pytest.raises(TimeoutError) as caught:  # the builtin one
            client.run("take a short nap", {"ms": 3000}, namespace="nap", timeout=0.5)
        assert isinstance(caught.value, CallTimeout) and f"fittest result {caught.value.call_id}" in str(caught.value)
        later = client.result(caught.value.call_id, timeout=60)
    assert (later.status, later.call_id, later.tool) == ("success", caught.value.call_id, "nap")

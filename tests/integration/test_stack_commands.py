"""`fittest up` and `fittest demo` as an operator runs them: from any directory, with the settings
of the shell they are run in, which other commands in that shell share."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from selection.registry import ToolRegistry
from tests.conftest import EXAMPLE_TOOLS, free_port

FITTEST = Path(sys.executable).parent / "fittest"


def test_the_demo_serves_the_example_tools_from_any_directory(model_path: Path, unserved_redis: str, tmp_path: Path) -> None:
    env = {**os.environ, "FITTEST_REDIS_URL": unserved_redis, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_DATA_DIR": "data", "FITTEST_TOOLS_DIR": "no-such-dir"}  # the demo's tools are its own
    env.pop("FITTEST_RESULT_BACKEND", None)
    done = subprocess.run([str(FITTEST), "demo", "--calls", "8"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    examples = ToolRegistry.load([EXAMPLE_TOOLS]).all()
    assert f"sending 8 calls built from {len(examples)} example tools" in done.stdout
    assert all(m.key in done.stdout for m in examples), done.stdout
    succeeded = re.search(r"(\d+)/8 calls succeeded", done.stdout)
    assert succeeded is not None and int(succeeded.group(1)) >= 1, done.stdout
    shown = re.findall(r"call ([0-9a-f-]{36})", done.stdout)
    assert shown and len(shown) == len(set(shown)), shown  # each call shown once
    assert (tmp_path / "data" / "demo" / "logs").is_dir()  # relative to where it was run


def test_up_serves_the_tools_dir_of_the_shell_it_runs_in_to_the_commands_run_there(model_path: Path, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tmp_path / "mytools" / "word_stats")
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing answers: `up` starts Redis there
    env = {**os.environ, "FITTEST_REDIS_URL": url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_DATA_DIR": "data", "FITTEST_TOOLS_DIR": "mytools"}
    env.pop("FITTEST_RESULT_BACKEND", None)
    up = subprocess.Popen([str(FITTEST), "up", *[f"--without={r}" for r in ("evolver", "beat", "flower", "metrics", "toolserver")]],
                          cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            health = subprocess.run([str(FITTEST), "health", "--json", "-w", "memory", "-w", "executor"], cwd=tmp_path, env=env, capture_output=True,
                                    text=True, timeout=120)
            if health.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert health.returncode == 0, health.stdout + health.stderr
        call = subprocess.run([str(FITTEST), "call", "count the words of this text", "--input", '{"text": "one two two"}',
                               "--json", "--timeout", "60"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert call.returncode == 0, call.stdout + call.stderr
        result = json.loads(call.stdout)
        assert result["status"] == "success" and result["tool"] == "word_stats" and result["output"]["words"] == 3
        assert (tmp_path / "data" / "redis").is_dir()  # the workers' data dir is the shell's too
    finally:
        os.killpg(up.pid, signal.SIGINT)
        output, _ = up.communicate(timeout=60)
    assert "Traceback" not in output, output
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        stopped = False
    except redis.ConnectionError:
        stopped = True
    assert stopped, "the Redis `up` started outlived it"


def processes_with(entry: str, but: int) -> set[int]:
    """The processes whose environment holds `entry` (what `up` gave its roles and its Redis)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == but:
            continue
        try:
            if entry.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.add(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.parametrize("ending", ["terminal closed", "output closed, then stopped", "killed"])
def test_up_stops_its_roles_and_its_redis_however_it_ends(ending: str, model_path: Path, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    ours = f"FITTEST_REDIS_URL={url}"
    env = {**os.environ, "FITTEST_REDIS_URL": url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_DATA_DIR": str(tmp_path / "data"), "FITTEST_TOOLS_DIR": str(EXAMPLE_TOOLS)}
    env.pop("FITTEST_RESULT_BACKEND", None)
    up = subprocess.Popen([str(FITTEST), "up", *[f"--without={r}" for r in ("evolver", "beat", "flower", "metrics", "toolserver")]],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while subprocess.run([str(FITTEST), "health", "-w", "memory", "-w", "executor"], env=env, capture_output=True,
                             timeout=120).returncode != 0:
            assert time.monotonic() < deadline, "the stack did not come up"
            time.sleep(2)
        running = processes_with(ours, but=up.pid)
        assert len(running) >= 3  # the two roles (their shells and workers) and Redis
        assert up.stdout is not None
        if ending == "terminal closed":  # SIGHUP to `up` alone: the roles have sessions of their own
            up.send_signal(signal.SIGHUP)
            output = up.stdout.read()
            assert "Traceback" not in output, output
        elif ending == "killed":  # SIGKILL (the OOM killer, kill -9): nothing in `up` runs
            up.kill()
        else:  # `fittest up | head`: what it prints next meets a closed pipe
            up.stdout.close()
            time.sleep(3)
            assert up.poll() is None  # still serving
            up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
        deadline = time.monotonic() + 30
        while (left := processes_with(ours, but=up.pid) & running) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"outlived `fittest up`: {left}"
    finally:  # whatever happened, nothing of this stack is left behind
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
        for pid in processes_with(ours, but=up.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

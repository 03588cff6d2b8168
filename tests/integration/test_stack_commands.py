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

"""What an operator sees when something outside the command stops it: one line that says what and
what to do, no traceback. The commands run as an operator's shell runs them (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TOOLS, free_port

FITTEST = Path(sys.executable).parent / "fittest"


@pytest.mark.slow  # the retries that ride out a Redis restart take 20-35 s to give up
def test_every_kind_of_command_says_redis_does_not_answer_without_a_traceback(model_path: Path) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    env = {**os.environ, "FITTEST_REDIS_URL": url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path)}
    env.pop("FITTEST_RESULT_BACKEND", None)
    commands = [["tools"], ["call", "sort these numbers", "--timeout", "2"]]
    running = [subprocess.Popen([str(FITTEST), *c], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for c in commands]  # side by side: each waits out its client's retries
    for command, proc in zip(commands, running, strict=True):
        output, _ = proc.communicate(timeout=120)
        said = " ".join(output.split())
        assert proc.returncode == 1, (command, output)
        assert "Traceback" not in output, (command, output)
        assert "error: Redis does not answer" in said and "Connection refused" in said, (command, output)
        assert "FITTEST_REDIS_URL is redis://:**@127.0.0.1" in said and "hunter2" not in said, (command, output)


def test_a_command_no_worker_answers_says_so_and_a_tool_that_does_not_exist_is_refused_first(
    model_path: Path, unserved_redis: str, tmp_path: Path
) -> None:
    env = {**os.environ, "FITTEST_REDIS_URL": unserved_redis, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_TOOLS_DIR": str(EXAMPLE_TOOLS), "FITTEST_DATA_DIR": str(tmp_path / "data"), "FITTEST_KEY_PREFIX": "cli:"}
    env.pop("FITTEST_RESULT_BACKEND", None)

    def fittest(*args: str) -> tuple[int, str]:
        done = subprocess.run([str(FITTEST), *args], env=env, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, " ".join(done.stderr.split())

    assert fittest("evolve", "nosuch") == (1, "error: no tool named 'nosuch'")
    code, said = fittest("evolve", "sort_numbers", "--version", "9.9.9")
    assert code == 1 and "sort_numbers has no version '9.9.9' (it has 1.0.0)" in said
    code, said = fittest("evolve", "sort_numbers", "--timeout", "1")
    assert code == 1 and "no answer from the workers within the command's --timeout" in said

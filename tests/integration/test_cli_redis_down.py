"""What an operator sees when Redis does not answer: one line that says so and names the URL, after
the clients' retries, whichever client gave up (redis-py's for the state, Celery's for a call)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.slow  # the retries that ride out a Redis restart take 20-35 s to give up

FITTEST = Path(sys.executable).parent / "fittest"


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

"""Shared fixtures: real services, owned per test run.

Each pytest session starts a private `redis-server` on a free port (so tests never meet another
session's workers or keys), unless FITTEST_TEST_REDIS_URL names one to use. Each test gets its
own key and collection prefix and removes only those.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from workers.stack import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
SHARED_MODEL = ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx"
EXAMPLE_TOOLS = ROOT / "examples" / "tools"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow chaos and bench smoke tests go last, so a quick failure shows early. `make test`
    runs both in one session with `--no-loadscope-reorder`, so pytest-xdist hands the files out in
    this order and a slow file starts as soon as a process is free, not after the slowest fast file
    of another process has ended."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def whoami_tool(tools_dir: Path):
    """A python tool that answers with the pid of the process running it, in `tools_dir`/whoami:
    which process ran a version is what the tests of in-process and isolated runs compare."""
    from selection.manifest import load_manifest

    folder = tools_dir / "whoami"
    folder.mkdir(parents=True)
    (folder / "who.py").write_text("import os\n\ndef run(data):\n    return {'pid': os.getpid()}\n")
    (folder / "tool.yaml").write_text("name: whoami\nversion: 1.0.0\ndescription: Say which process runs it.\n"
                                      "implementation: {kind: python, entrypoint: 'who:run'}\n")
    return load_manifest(folder / "tool.yaml")


def start_redis(workdir: Path, port: int | None = None, appendonly: bool = False) -> tuple[subprocess.Popen, str]:
    """Start a private redis-server; returns the process and its URL once it answers PING.

    Without a given `port`, a free one is taken; as another process may take it between
    free_port() and redis-server's bind (the other pytest process starts its servers too), a
    server that did not get its port is started again on another, and the one that answers must
    be ours (its pid), not a neighbour's that took the port first."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    for _ in range(1 if port else 5):
        chosen = port or free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if appendonly else "no", "--dir", str(workdir)],
            preexec_fn=die_with_parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{chosen}/0"
        client = redis.Redis.from_url(url)
        for _ in range(200):
            if proc.poll() is not None:  # its port was taken
                break
            try:
                if client.info("server")["process_id"] == proc.pid:
                    return proc, url
            except redis.ConnectionError:
                pass
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    raise RuntimeError(f"private redis-server on port {chosen} did not start")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get("FITTEST_TEST_REDIS_URL")
    if given:
        yield given
        return
    proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def redis_client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def run_prefix(redis_url: str) -> Iterator[str]:
    """A key/collection prefix owned by one test, whose keys on the session's Redis go with it
    (review: tests that wrote under it left them behind)."""
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
    finally:
        client.close()


@pytest.fixture(scope="session")
def model_path() -> Path:
    given = os.environ.get("FITTEST_EMBEDDING_MODEL_PATH")
    path = Path(given) if given else SHARED_MODEL
    if not (path / "model.onnx").exists():
        pytest.fail(f"embedding model not found at {path}: set FITTEST_EMBEDDING_MODEL_PATH")
    return path


@pytest.fixture(scope="session")
def embedder(model_path: Path):
    from workers.embedder import FastEmbedder

    return FastEmbedder(model_path=model_path)


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, run_prefix: str, tmp_path: Path, model_path: Path):
    """Environment for a test's own fittest settings (and any worker it starts)."""
    env = {
        "FITTEST_REDIS_URL": redis_url,
        "FITTEST_KEY_PREFIX": f"{run_prefix}:",
        "FITTEST_COLLECTION_PREFIX": run_prefix,
        "FITTEST_DATA_DIR": str(tmp_path / "data"),
        "FITTEST_TOOLS_DIR": str(EXAMPLE_TOOLS),
        "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from workers.settings import get_settings

    get_settings.cache_clear()
    yield env
    get_settings.cache_clear()

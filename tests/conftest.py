"""Shared fixtures: real services, owned per test run.

Each pytest session starts a private `redis-server` on a free port (so tests never meet another
session's workers or keys), unless FITTEST_TEST_REDIS_URL names one to use. Each test gets its
own key and collection prefix and removes only those.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from typer.testing import CliRunner, Result

from selection.manifest import ToolManifest, load_manifest
from workers.stack import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
SHARED_MODEL = ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx"
EXAMPLE_TOOLS = ROOT / "examples" / "tools"


# Each test file's seconds (setup, call and teardown of its tests, in one process), as `make
# test-durations` last measured them: what orders the files of a run.
DURATIONS = Path(__file__).with_name("durations.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help=f"write the seconds of each test file run to {DURATIONS.name}, which orders the files of later runs")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("store_durations") and not hasattr(config, "workerinput"):  # pytest-xdist's controller
        config.pluginmanager.register(FileDurations(), "file-durations")


class FileDurations:
    """Adds up the seconds of each file's tests as their reports come in, and writes them at the end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.partition("::")[0]
        self.seconds[path] = self.seconds.get(path, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        """The files this session ran replace their entries; those of files still there that it did
        not run stay (a run of a few files keeps the others' seconds)."""
        known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        merged = {**known, **{p: round(s, 1) for p, s in self.seconds.items()}}
        DURATIONS.write_text(json.dumps({p: merged[p] for p in sorted(merged) if (ROOT / p).exists()}, indent=1) + "\n")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow chaos and bench smoke tests go last, so a quick failure shows early; within each
    group the longest files go first (DURATIONS; a file it does not know yet, first of all), so no
    long file is handed out last to end the session alone (the 176 s delivery file ended it ~90 s
    after the other processes). `make test` runs both groups in one session with
    `--no-loadscope-reorder`, so pytest-xdist hands the files out in this order, each to the next
    process that is almost free."""
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    items.sort(key=lambda item: (item.get_closest_marker("slow") is not None,
                                 -seconds.get(item.nodeid.partition("::")[0], math.inf)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def other_protocol_server(greeting: bytes) -> Iterator[int]:
    """A server of another protocol than Redis's on a free port (yielded), which answers each
    connection with `greeting`: where an operator's FITTEST_REDIS_URL may point by mistake."""
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                conn.sendall(greeting)
                conn.recv(1024)

    threading.Thread(target=answer, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def whoami_tool(tools_dir: Path) -> ToolManifest:
    """A python tool that answers with the pid of the process running it, in `tools_dir`/whoami:
    which process ran a version is what the tests of in-process and isolated runs compare."""
    return write_tool(tools_dir, "whoami", "import os\n\ndef run(data):\n    return {'pid': os.getpid()}\n",
                      description="Say which process runs it.")


@dataclass(frozen=True)
class RedisTls:
    """The files of a redis-server that speaks TLS only: its CA (which its clients trust), its
    certificate and its key."""
    ca: Path
    cert: Path
    key: Path


def start_redis(workdir: Path, port: int | None = None, appendonly: bool = False, tls: RedisTls | None = None,
                password: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start a private redis-server; returns the process and its URL once it answers PING. With
    `tls`, it speaks TLS only (a rediss:// URL); with `password`, it requires it (in the URL).

    Without a given `port`, a free one is taken; as another process may take it between
    free_port() and redis-server's bind (the other pytest process starts its servers too), a
    server that did not get its port is started again on another, and the one that answers must
    be ours (its pid), not a neighbour's that took the port first. It dies with the test process,
    so an interrupted session leaves no server behind."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    for _ in range(1 if port else 5):
        chosen = port or free_port()
        listen = ["--port", str(chosen)]
        if tls is not None:
            listen = ["--port", "0", "--tls-port", str(chosen), "--tls-cert-file", str(tls.cert), "--tls-key-file",
                      str(tls.key), "--tls-ca-cert-file", str(tls.ca), "--tls-auth-clients", "no"]
        proc = subprocess.Popen(
            [binary, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes" if appendonly else "no",
             "--dir", str(workdir), *(["--requirepass", password] if password else [])],
            preexec_fn=die_with_parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"{'rediss' if tls else 'redis'}://{f':{password}@' if password else ''}127.0.0.1:{chosen}/0"
        trust: dict[str, Any] = {"ssl_ca_certs": str(tls.ca), "ssl_cert_reqs": "required"} if tls else {}
        client = redis.Redis.from_url(url, **trust)
        for _ in range(200):
            if proc.poll() is not None:  # its port was taken
                break
            try:
                if client.info("server")["process_id"] == proc.pid:
                    return proc, url
            except redis.RedisError:  # not up yet, or a neighbour's server (which may refuse our password)
                pass
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    raise RuntimeError(f"private redis-server on port {chosen} did not start")


@dataclass(frozen=True)
class RedisServer:
    """A redis-server one test owns: its URL, and its process for a test that stops or stalls it."""
    proc: subprocess.Popen
    url: str


class RestartableRedis:
    """A redis-server on a port of its own, with the append-only file on, that a test restarts on its data."""

    def __init__(self, workdir: Path) -> None:
        self.workdir, self.port = workdir, free_port()
        self.proc, self.url = start_redis(workdir, self.port, appendonly=True)

    def restart(self) -> None:
        """SIGTERM (Redis writes its append-only file and exits), then a new server on the same data."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=20)
        self.proc, _ = start_redis(self.workdir, self.port, appendonly=True)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of this test's own, stopped after it: for a test that flushes it, stops or stalls it,
    or leaves messages no worker reads in its queues (what a command meets when no worker runs),
    none of which the session's Redis, shared by the other tests of the process, may see."""
    proc, url = start_redis(tmp_path_factory.mktemp("private-redis"))
    yield RedisServer(proc, url)
    proc.terminate()
    proc.wait(timeout=10)


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


def write_tool(root: Path, name: str, code: str | None, **manifest: Any) -> ToolManifest:
    """A tool folder `root`/`name` as an author writes one, and its manifest as the registry loads
    it: `code` (dedented) in tool.py, run in-process by its `run`, with 5 s to answer (room for a
    python process under the suite's load), unless `manifest` says otherwise. Without `code`, what
    the manifest runs is there already (another module, a program, a URL)."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)  # it may hold the tool's other files already
    if code is not None:
        (folder / "tool.py").write_text(textwrap.dedent(code))
    doc = {"name": name, "description": f"the {name} tool", "implementation": {"kind": "python", "entrypoint": "tool:run"},
           "timeout_s": 5, **manifest}
    (folder / "tool.yaml").write_text(yaml.safe_dump(doc))
    return load_manifest(folder / "tool.yaml")


def run_cli(*args: str, reraise: bool = False) -> Result:
    """`fittest ARGS` in-process, with the settings as they stand (a test may stand them in). With
    `reraise`, an exception the command did not turn into an exit code is raised, so the test
    fails on it rather than on its missing output."""
    from workers.cli import app

    result = CliRunner().invoke(app, list(args))
    if reraise and result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def cli_runner(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Callable[..., Result]:
    """Run `fittest …` in-process with `env` (and per-call extra variables) set for the rest of the
    test, as an operator's shell would; settings are read afresh for each command."""
    from workers.settings import get_settings

    def run(*args: str, **extra: str) -> Result:
        for key, value in {**env, **extra}.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        try:
            return run_cli(*args)
        finally:
            get_settings.cache_clear()

    return run


# An upstream on loopback, in a process of its own (the sandbox forks with preexec_fn, which a server
# thread in this process could deadlock); ANSWER is the status and JSON it answers a request's `body`.
SERVER = """
import itertools, json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
count = itertools.count(1)
class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, answer = ANSWER
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def upstream(answer: str) -> Iterator[str]:
    """The base URL of a SERVER answering `answer`."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER.replace("ANSWER", answer)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def as_published(doc: Any, name: str) -> Any:
    """`doc`, after checking that it passes the schema `fittest schema NAME` publishes, as a script
    that reads the command's --json would check it."""
    import jsonschema

    from workers.cli.tools import published_schemas

    jsonschema.validate(doc, published_schemas()[name])
    return doc

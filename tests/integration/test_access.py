"""Access: a Redis that demands TLS and a password, JSON only on the wire, Flower behind basic
auth, and secrets that never show up in logs, results or command output.

The Redis here speaks only TLS (a private CA made for the test) and requires a password; broker,
result backend and state store must all honour FITTEST_REDIS_URL (rediss://:password@...) and
FITTEST_REDIS_TLS_CA, or nothing below would work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from celery import Celery

from tests.conftest import RedisTls, as_published, free_port, start_redis
from tests.integration.conftest import TEST_TOOLS, Pipeline, pipeline_running
from workers.procfile import flower_env
from workers.stack import ROOT

PASSWORD = "redis-pw-7f3a9c"
SECRETS = {
    "FITTEST_LLM_API_KEY": "llm-key-51d0e2",
    "FITTEST_QDRANT_API_KEY": "qdrant-key-a8b4c1",
    "FITTEST_FLOWER_PASSWORD": "flower-pw-0c9e77",
}


def make_certificates(directory: Path) -> RedisTls:
    """A CA and a server certificate for 127.0.0.1 signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=fittest-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt",
        "-days", "2", "-extfile", "san.cnf")
    return RedisTls(ca=directory / "ca.crt", cert=directory / "server.crt", key=directory / "server.key")


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    directory = tmp_path_factory.mktemp("tls")
    tls = make_certificates(directory)
    try:
        proc, url = start_redis(directory, tls=tls, password=PASSWORD)
    except RuntimeError:  # it exited at once, or never answered over TLS
        pytest.skip("this redis-server does not support TLS")
    yield url, tls.ca
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, tls_redis: tuple[str, Path], model_path: Path) -> Iterator[Pipeline]:
    url, ca = tls_redis
    with pipeline_running(tmp_path_factory.mktemp("access"), url, model_path, TEST_TOOLS, roles=("memory", "executor"),
                          FITTEST_REDIS_TLS_CA=str(ca), FITTEST_EVOLUTION_ENABLED="false", **SECRETS) as p:
        yield p


def test_broker_backend_and_state_store_work_over_tls_with_a_password(pipeline: Pipeline, tls_redis: tuple[str, Path]) -> None:
    url, ca = tls_redis
    result = pipeline.call(scenario="parse csv text into rows", input={"text": "k,v\n1,2\n"}, namespace="csv_lenient")
    assert result["status"] == "success" and result["output"] == [{"k": "1", "v": "2"}]
    pipeline.wait_for(lambda: pipeline.state().stats(["csv_lenient@1.0.0"])["csv_lenient@1.0.0"].successes == 1)
    port = url.rpartition(":")[2].partition("/")[0]
    with pytest.raises(redis.ConnectionError):  # the server speaks TLS only
        redis.Redis.from_url(f"redis://:{PASSWORD}@127.0.0.1:{port}/0", socket_timeout=2).ping()
    with pytest.raises(redis.AuthenticationError):  # and wants the password
        redis.Redis.from_url(f"rediss://127.0.0.1:{port}/0", ssl_ca_certs=str(ca), ssl_cert_reqs="required").ping()


def test_a_pickled_message_is_refused_and_never_unpickled(pipeline: Pipeline, tmp_path: Path, tls_redis: tuple[str, Path]) -> None:
    marker = tmp_path / "unpickled"

    class Evil:
        def __reduce__(self):  # what an attacker's payload does when unpickled: run code
            return (open, (str(marker), "w"))

    url, ca = tls_redis
    attacker = Celery("attacker", broker=url)
    attacker.conf.update(task_serializer="pickle", accept_content=["pickle", "json"], broker_use_ssl={"ssl_ca_certs": str(ca), "ssl_cert_reqs": 2})
    attacker.send_task("fittest.resilient_tool_call", kwargs={"scenario": Evil()}, queue="selection")
    attacker.close()
    after = pipeline.call(scenario="parse csv text into rows", input={"text": "a\n1\n"}, namespace="csv_lenient")
    assert after["status"] == "success"  # the queue moved past the pickled message
    log = Path(pipeline.stack.log_dir or ".", "memory.log")
    pipeline.wait_for(lambda: "Refusing to deserialize untrusted content of type pickle" in log.read_text())
    assert not marker.exists()
    assert all(proc.poll() is None for proc in pipeline.stack.procs.values())


def test_no_module_of_fittest_uses_pickle() -> None:
    offenders = [str(path.relative_to(ROOT)) for package in ("selection", "evolution", "workers")
                 for path in (ROOT / package).rglob("*.py") if "import pickle" in path.read_text() or "pickle." in path.read_text()]
    assert offenders == []


def test_secrets_are_never_printed(pipeline: Pipeline, tmp_path: Path) -> None:
    results = [
        pipeline.call(scenario="parse csv text into rows", input={"text": "a\n1\n"}, namespace="csv_lenient"),
        pipeline.call(scenario="lunar phase calculator for a date", input={"date": "2026-11-22"}, namespace="moon_a", max_attempts=2),
        pipeline.client.wait(pipeline.client.send("resilient_tool_call", scenario="", max_attempts=-1), 30),
        pipeline.call(scenario="show which argv the program gets", input={"text": "$FITTEST_REDIS_URL"}, namespace="echo_args"),
    ]
    env = {**os.environ, **pipeline.env}
    commands = [["settings", "--json"], ["health", "--json", "--timeout", "10"], ["tools", "--json"]]
    fittest = str(Path(sys.executable).parent / "fittest")
    outputs = [subprocess.run([fittest, *c], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120) for c in commands]
    assert all(o.returncode in (0, 1) for o in outputs), [o.stderr[-2000:] for o in outputs]
    for printed, name in zip(outputs, ("settings_output", "health_output", "tools_output"), strict=True):
        as_published(json.loads(printed.stdout), name)  # QA 60d M2: each --json has its schema
    logs = [path.read_text() for path in (pipeline.stack.log_dir or tmp_path).glob("*.log")]
    haystack = "\n".join([json.dumps(results), *(o.stdout + o.stderr for o in outputs), *logs, repr(pipeline.settings)])
    assert len(haystack) > 10_000  # the logs and outputs really were read
    leaked = [name for name, secret in {"redis password": PASSWORD, **SECRETS}.items() if secret in haystack]
    assert leaked == []


def test_no_worker_shows_the_redis_password_in_the_conf_flower_shows(pipeline: Pipeline) -> None:
    """QA 61a-1: Flower's worker pages (`inspect conf`) showed redbeat's URL with the Redis password,
    where Celery masks the broker's. The beat's client, made from that conf, still logs in."""
    from redbeat.schedulers import get_redis

    from workers.app import make_app

    app = make_app(pipeline.settings)
    confs = app.control.inspect(timeout=10).conf()
    assert confs and all("redbeat_redis_url" in conf for conf in confs.values()), confs
    assert PASSWORD not in json.dumps(confs)
    assert get_redis(app).ping()


def procfile_line(role: str) -> str:
    return next(line.partition(":")[2].strip() for line in (ROOT / "Procfile").read_text().splitlines()
                if line.startswith(f"{role}:"))


def start_flower(env: dict[str, str], port: int, *options: str) -> tuple[subprocess.Popen, httpx.Response]:
    """The Procfile's flower line, run by a shell as honcho runs it (`fittest up` or `honcho start`),
    on a port of the test's own; the process and its first answer, to an anonymous request on the
    loopback address."""
    line = procfile_line("flower").replace("celery ", f"{sys.executable} -m celery ", 1)
    flower = ["sh", "-c", f"exec {line} {' '.join(options)}"]
    proc = subprocess.Popen(flower, env={**env, "FITTEST_FLOWER_PORT": str(port)}, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            return proc, httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        except httpx.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                os.killpg(proc.pid, 9)
                raise AssertionError("flower did not start") from None
            time.sleep(0.2)


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port`, in /proc/net/tcp's hex (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_flower_without_a_password_listens_on_this_machine_only(pipeline: Pipeline) -> None:
    """QA new user: Flower, with no password set, listened on every interface, and another host
    read the calls' inputs from its task list."""
    port = free_port()
    open_settings = pipeline.settings.model_copy(update={"flower_password": None})
    proc, answer = start_flower({**pipeline.stack.env, **flower_env(open_settings)}, port)  # as `fittest up` runs it
    try:
        assert answer.status_code == 200
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and nothing else
        # ...where its API answers as its pages do (QA ops: 401 for every /api/ path)
        assert httpx.get(f"http://127.0.0.1:{port}/api/workers", timeout=10).status_code == 200
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


def test_the_procfile_alone_serves_flower_on_this_machine_only(pipeline: Pipeline) -> None:
    """QA live F5: `honcho start` on the Procfile (its own header's advice), without `fittest up`'s
    settings, put Flower on every interface with no login, every call's input on show."""
    port = free_port()
    plain = {k: v for k, v in pipeline.stack.env.items() if not k.startswith("FLOWER_")}
    proc, answer = start_flower(plain, port)
    try:
        assert answer.status_code == 200 and listening_addresses(port) == {"0100007F"}
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


def test_flower_asks_for_the_password_which_is_not_on_its_command_line(pipeline: Pipeline) -> None:
    port = free_port()
    proc, anonymous = start_flower({**pipeline.stack.env, **flower_env(pipeline.settings)}, port)  # every interface
    try:
        base = f"http://127.0.0.1:{port}/"
        assert anonymous.status_code == 401 and listening_addresses(port) == {"00000000"}  # 0.0.0.0, behind the password
        assert httpx.get(f"{base}api/workers", timeout=5).status_code == 401  # nor its API
        password = SECRETS["FITTEST_FLOWER_PASSWORD"]
        assert httpx.get(base, auth=("admin", "wrong"), timeout=5).status_code == 401
        assert httpx.get(base, auth=("admin", password), timeout=10).status_code == 200
        assert password not in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)

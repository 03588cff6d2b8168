"""`fittest up` and `fittest demo` as an operator runs them: from any directory, with the settings
of the shell they are run in, which other commands in that shell share."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from selection.registry import ToolRegistry
from tests.conftest import EXAMPLE_TOOLS, RedisServer, free_port

FITTEST = Path(sys.executable).parent / "fittest"


def test_the_demo_serves_the_example_tools_from_any_directory(model_path: Path, private_redis: RedisServer, tmp_path: Path) -> None:
    env = {**os.environ, "FITTEST_REDIS_URL": private_redis.url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
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
    up, env, ours = start_up(model_path, tmp_path, cwd=tmp_path, FITTEST_DATA_DIR="data", FITTEST_TOOLS_DIR="mytools")
    try:
        wait_until_serving(up, env, cwd=tmp_path)
        call = subprocess.run([str(FITTEST), "call", "count the words of this text", "--input", '{"text": "one two two"}',
                               "--json", "--timeout", "60"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert call.returncode == 0, call.stdout + call.stderr
        result = json.loads(call.stdout)
        assert result["status"] == "success" and result["tool"] == "word_stats" and result["output"]["words"] == 3
        assert (tmp_path / "data" / "redis").is_dir()  # the workers' data dir is the shell's too
        os.killpg(up.pid, signal.SIGINT)
        output, _ = up.communicate(timeout=60)
        assert "Traceback" not in output, output
        try:
            redis.Redis.from_url(env["FITTEST_REDIS_URL"], socket_connect_timeout=1).ping()
            stopped = False
        except redis.ConnectionError:
            stopped = True
        assert stopped, "the Redis `up` started outlived it"
    finally:  # whatever happened, nothing of this stack is left behind
        sweep(up, ours)


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


def start_up(model_path: Path, tmp_path: Path, cwd: Path | None = None,
             **settings: str) -> tuple[subprocess.Popen, dict[str, str], str]:
    """`fittest up` with the memory worker and the executor only, on a Redis it starts (nothing
    answers at its URL), run in `cwd` with `settings` over the defaults, as a shell there would run
    it; with its environment, and the entry of it that marks the processes of this stack
    (processes_with)."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    env = {**os.environ, "FITTEST_REDIS_URL": url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_DATA_DIR": str(tmp_path / "data"), "FITTEST_TOOLS_DIR": str(EXAMPLE_TOOLS), **settings}
    env.pop("FITTEST_RESULT_BACKEND", None)
    up = subprocess.Popen([str(FITTEST), "up", *[f"--without={r}" for r in ("evolver", "beat", "flower", "metrics", "toolserver")]],
                          cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return up, env, f"FITTEST_REDIS_URL={url}"


def wait_until_serving(up: subprocess.Popen, env: dict[str, str], cwd: Path | None = None) -> None:
    """Until the memory worker and the executor answer `fittest health` run in `cwd`, while `up` runs."""
    deadline = time.monotonic() + 120
    while subprocess.run([str(FITTEST), "health", "-w", "memory", "-w", "executor"], cwd=cwd, env=env, capture_output=True,
                         timeout=120).returncode != 0:
        assert up.poll() is None and time.monotonic() < deadline, "the stack is not serving"
        time.sleep(1)


def assert_none_outlived(up: subprocess.Popen, ours: str, running: set[int]) -> None:
    deadline = time.monotonic() + 30
    while (left := processes_with(ours, but=up.pid) & running) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"outlived `fittest up`: {left}"


def sweep(up: subprocess.Popen, ours: str) -> None:
    """Whatever happened in a test, nothing of its stack is left behind."""
    if up.poll() is None:
        os.killpg(up.pid, signal.SIGKILL)
    for pid in processes_with(ours, but=up.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("ending", ["terminal closed", "output closed, then stopped", "killed"])
def test_up_stops_its_roles_and_its_redis_however_it_ends(ending: str, model_path: Path, tmp_path: Path) -> None:
    up, env, ours = start_up(model_path, tmp_path)
    try:
        wait_until_serving(up, env)
        running = processes_with(ours, but=up.pid)
        assert len(running) >= 3  # the two roles (their shells and workers) and Redis
        assert up.stdout is not None
        if ending == "terminal closed":  # SIGHUP to `up` alone: the roles have sessions of their own
            up.send_signal(signal.SIGHUP)
            output = up.stdout.read()
            # `up`'s own lines (its roles' are prefixed "HH:MM:SS role |"): a role's teardown may log a
            # traceback of its own, billiard's pool finding its processes gone (honcho's SIGTERM goes
            # to the role's process group, pool processes included: seen once in a clean-clone run).
            own = [line for line in output.splitlines() if not re.match(r"^\d\d:\d\d:\d\d \w+ +\| ", line)]
            assert not [line for line in own if "Traceback" in line], output
        elif ending == "killed":  # SIGKILL (the OOM killer, kill -9): nothing in `up` runs
            up.kill()
        else:  # `fittest up | head`: what it prints next meets a closed pipe
            up.stdout.close()
            time.sleep(3)
            assert up.poll() is None  # still serving
            up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
        assert_none_outlived(up, ours, running)
    finally:  # whatever happened, nothing of this stack is left behind
        sweep(up, ours)


def role_main(role: str, among: set[int]) -> int | None:
    """The main process of a worker role (its pool processes are its children, with its command line)."""
    found = set()
    for pid in among:
        try:
            if f"{role}@%h" in (Path("/proc") / str(pid) / "cmdline").read_bytes().decode().split("\0"):
                found.add(pid)
        except OSError:
            continue
    for pid in found:
        try:
            parent = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
        if parent not in found:
            return pid
    return None


def test_up_restarts_a_role_that_died_and_keeps_the_others(model_path: Path, tmp_path: Path) -> None:
    """kill -9 of the executor: honcho stopped every role; now the executor alone starts again."""
    up, env, ours = start_up(model_path, tmp_path)
    try:
        wait_until_serving(up, env)
        memory, executor = (role_main(role, processes_with(ours, but=up.pid)) for role in ("memory", "executor"))
        assert memory and executor
        os.kill(executor, signal.SIGKILL)
        # Its process is back as `up` says ("in 1 s"), not after a role's relay, a fork of `up`, waited
        # 15 s on a socket of the broker connections that `up`'s ping of running workers left (QA ops).
        killed_at = time.monotonic()
        while role_main("executor", processes_with(ours, but=up.pid)) in (None, executor):
            assert time.monotonic() - killed_at < 8, "the executor was not started again within 8 s"
            time.sleep(0.2)
        wait_until_serving(up, env)
        restarted = role_main("executor", processes_with(ours, but=up.pid))
        assert restarted not in (None, executor)
        assert role_main("memory", processes_with(ours, but=up.pid)) == memory  # never stopped
        running = processes_with(ours, but=up.pid)
        up.send_signal(signal.SIGTERM)
        output, _ = up.communicate(timeout=60)
        assert "executor stopped (rc=" in output and "restarting it in 1 s (" in output, output
        assert "ready: not a failed start)" in output, output  # it had said it consumes its queues
        assert f"executor started (pid={executor})" in output, output  # the pid it printed is the one to kill
        assert output.count("restarting it") == 1, output
        # The roles start together: each relay is a fork of `up`, and one that waited 15 s on a broker
        # socket left by `up`'s ping of running workers started its role that much later (QA ops).
        started: dict[str, str] = {}
        for m in re.finditer(r"^(\d\d:\d\d:\d\d) system +\| (\w+) started", output, re.M):
            started.setdefault(m[2], m[1])  # its first start
        first = [datetime.datetime.strptime(started[role], "%H:%M:%S") for role in ("memory", "executor")]
        apart = (first[1] - first[0]).total_seconds() % 86_400  # across midnight too
        assert min(apart, 86_400 - apart) < 5, output
        assert_none_outlived(up, ours, running)
    finally:
        sweep(up, ours)


def test_up_starts_its_redis_again_when_it_ends_and_the_roles_go_on(model_path: Path, tmp_path: Path) -> None:
    """QA L: `redis-cli shutdown` of the Redis `up` had started: `up` said nothing, and the roles
    waited for a Redis that never came back."""
    up, env, ours = start_up(model_path, tmp_path)
    try:
        wait_until_serving(up, env)
        store = redis.Redis.from_url(env["FITTEST_REDIS_URL"])
        store.set("kept", "yes")
        try:
            store.shutdown()  # saves the append-only file, as an operator's shutdown does
        except redis.ConnectionError:
            pass
        wait_until_serving(up, env)
        assert store.get("kept") == b"yes"  # the same data: started from its append-only file
        running = processes_with(ours, but=up.pid)
        up.send_signal(signal.SIGTERM)
        output, _ = up.communicate(timeout=60)
        assert "fittest up: the Redis it started ended (rc=0); starting it again on port" in output, output
        assert_none_outlived(up, ours, running)
    finally:
        sweep(up, ours)


def test_up_refuses_a_flower_port_in_use_in_one_line(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    env = {**os.environ, "FITTEST_REDIS_URL": url, "FITTEST_DATA_DIR": str(tmp_path / "data")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([str(FITTEST), "up", "--without=toolserver"], env={**env, "FITTEST_FLOWER_PORT": str(port)},
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert f"port {port} of Flower is in use: set FITTEST_FLOWER_PORT" in done.stdout + done.stderr
    assert not (tmp_path / "data" / "redis").exists()  # refused before anything started


def test_the_check_for_other_workers_waits_longer_only_when_a_worker_has_its_mailbox_bound(private_redis: RedisServer) -> None:
    """CI: on a busy host another stack's memory worker answered `up`'s question later than the
    one second it was given, and `up` took that stack's database for its own. A worker binds its
    mailbox as it starts: while one is bound, the question is asked again, for longer."""
    from workers.settings import Settings
    from workers.stack import PIDBOX_BINDINGS, Stack

    stack = Stack(Settings(redis_url=private_redis.url))
    started = time.monotonic()
    assert stack.workers_answering(timeout=1.0, patient_timeout=30.0) == {}
    assert time.monotonic() - started < 30.0  # nothing bound: only the one second's question
    client = redis.Redis.from_url(private_redis.url)
    try:
        client.sadd(PIDBOX_BINDINGS, "\x06\x16\x06\x16memory@gone.celery.pidbox")  # bound, and answering nothing
        started = time.monotonic()
        assert stack.workers_answering(timeout=1.0, patient_timeout=4.0) == {}
        assert time.monotonic() - started >= 5.0  # asked again, for longer
    finally:
        client.close()


def test_up_refuses_to_join_a_redis_database_another_stacks_workers_serve(model_path: Path, private_redis: RedisServer,
                                                                         tmp_path: Path) -> None:
    """QA 49: `up` under another FITTEST_KEY_PREFIX warned, then its workers took the other stack's
    calls and recorded them under their own prefix, where the other stack never looked."""
    from tests.integration.conftest import pipeline_running
    from workers.stack import PIDBOX_BINDINGS

    with pipeline_running(tmp_path / "theirs", private_redis.url, model_path, EXAMPLE_TOOLS, roles=("memory",)) as theirs:
        env = {**os.environ, "FITTEST_REDIS_URL": private_redis.url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
               "FITTEST_DATA_DIR": str(tmp_path / "mine"), "FITTEST_TOOLS_DIR": str(EXAMPLE_TOOLS), "FITTEST_KEY_PREFIX": "mine:"}
        env.pop("FITTEST_RESULT_BACKEND", None)
        done = subprocess.run([str(FITTEST), "up", *[f"--without={r}" for r in ("flower", "metrics", "toolserver")]],
                              env=env, capture_output=True, text=True, timeout=120)
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 1 and "Traceback" not in said, said
        assert ("workers already take this Redis database's calls (memory@" in said
                and f"they serve FITTEST_KEY_PREFIX {theirs.settings.key_prefix}, not mine:" in said), said
        # the fact, then what to do, on a line of its own (QA 53a: one sentence over three lines)
        assert (f"\n  Each stack's workers would run the other's calls. Give this stack its own database "
                f"(FITTEST_REDIS_URL=redis://HOST:PORT/N), or join the other stack (FITTEST_KEY_PREFIX="
                f"{theirs.settings.key_prefix})." in done.stdout + done.stderr), done
        # ...also when this stack's prefix has served this database before (QA 49 recheck N1: the
        # check read a key left by a memory worker of it, not what the running workers serve).
        client = redis.Redis.from_url(private_redis.url)
        try:
            client.sadd("mine:namespaces", "word_stats")
            # fewer answers than mailboxes bound (one worker answering, one late): asked again, for longer
            late = "\x06\x16\x06\x16executor@late.celery.pidbox"
            client.sadd(PIDBOX_BINDINGS, late)
            started, waits = time.monotonic(), []
            answering = theirs.stack.workers_answering(timeout=1.0, patient_timeout=8.0, waiting=lambda *seen: waits.append(seen))
            assert [n.split("@")[0] for n in answering] == ["memory"]
            assert waits == [(1, 2)]  # said once, as the longer wait begins (QA 53a: `up` said nothing)
            assert time.monotonic() - started >= 9.0
            client.srem(PIDBOX_BINDINGS, late)
        finally:
            client.close()
        again = subprocess.run([str(FITTEST), "up", *[f"--without={r}" for r in ("flower", "metrics", "toolserver")]],
                               env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 1 and "they serve FITTEST_KEY_PREFIX" in again.stdout + again.stderr, again
        assert " started" not in again.stdout + again.stderr, again  # no role of it ran
        # The same prefix is more workers of that stack (scale-out): they join it, and say so; but not
        # a second memory worker, whose embedded vector memory would be a second store (review 50).
        same = {**env, "FITTEST_KEY_PREFIX": theirs.settings.key_prefix}
        second = subprocess.run([str(FITTEST), "up", *[f"--without={r}" for r in ("flower", "metrics", "toolserver")]],
                                env=same, capture_output=True, text=True, timeout=120)
        told = " ".join((second.stdout + second.stderr).split())
        assert second.returncode == 1 and "a memory worker of this stack (memory@" in told, told
        assert "`fittest up --without memory`" in told and " started" not in told, told
        joining = subprocess.Popen([str(FITTEST), "up", *[f"--without={r}" for r in ("flower", "metrics", "toolserver", "beat",
                                                                                       "evolver", "memory")]],
                                   env=same, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            lines = []
            for line in joining.stdout or []:
                lines.append(line)
                if "these join them" in line or len(lines) > 50:
                    break
            assert any(f"workers of this stack (FITTEST_KEY_PREFIX {theirs.settings.key_prefix}) already take this Redis "
                       "database's calls (memory@" in line and "these join them" in line for line in lines), lines
            # ...under node names of their own (QA 50: two executor@HOST, which inspect and Flower saw as one).
            theirs.wait_for(lambda: any(n.startswith("executor@") for n in theirs.stack.workers_answering()), timeout=90)
            executors = [n for n in theirs.stack.workers_answering() if n.startswith("executor@")]
            assert len(executors) == 1 and executors[0].endswith(f"-{joining.pid}"), executors
        finally:
            os.killpg(joining.pid, signal.SIGTERM)
            joining.wait(timeout=60)

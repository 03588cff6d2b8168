"""Waiting for results from many threads, on a real Redis that restarts (workers/result_backend.py).

QA 53a: 30 threads, each with a client of its own, waited on 30 calls as a worker was killed, and
26 hung for minutes in redis-py's resubscribe of celery's result consumer; one client shared by 30
threads raised "Protocol error, got 'm'" for 8 calls that had succeeded. The results here are
stored by a Celery app as a worker's are, no worker running: what is tested is the wait.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import queue
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from redis.exceptions import BusyLoadingError

from tests.conftest import ROOT, RedisServer, RestartableRedis
from workers.client import CallSender
from workers.result_backend import SubscribingRedisBackend
from workers.settings import Settings

# celery's Redis backend stores a result with redis-py's setex, which redis-py 8 deprecates
pytestmark = pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning")

THREADS, ROUNDS = 30, 10
WAIT_S = 60.0


@pytest.fixture
def restartable_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    server = RestartableRedis(tmp_path / "redis")
    yield server
    server.stop()


def worker_side(url: str) -> Celery:
    """A Celery app that stores results as a worker's does, riding out a Redis restart."""
    app = Celery("worker-side", backend=url)
    app.conf.update(result_backend_always_retry=True, result_backend_max_retries=60,
                    result_backend_transport_options={"retry_policy": {"max_retries": 60, "interval_max": 1}})
    return app


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False], ids=["one client for all threads", "a client per thread"])
def test_thirty_threads_sending_and_waiting_get_each_result_across_a_redis_restart(
        restartable_redis: RestartableRedis, shared: bool) -> None:
    """Each thread sends a call and waits for it, ten times; a result is stored 0-0.3 s after its
    call is sent, and Redis restarts once a third of them came back. Before the wait listened on a
    connection of its own, 1-3 of the 300 waits of a run raised ConnectionError, or timed out, for
    results that were stored (in 4 runs of 4 of the script this test was made from)."""
    settings = Settings(redis_url=restartable_redis.url)
    senders = [CallSender(settings) for _ in range(1 if shared else THREADS)]
    store = worker_side(restartable_redis.url)
    answers: queue.Queue[tuple[float, str, dict[str, int]]] = queue.Queue()
    got: dict[tuple[int, int], Any] = {}

    def answer() -> None:
        while True:
            due, task_id, value = answers.get()
            time.sleep(max(due - time.monotonic(), 0.0))
            store.backend.store_result(task_id, value, "SUCCESS")

    def call(i: int) -> None:
        sender = senders[0 if shared else i]
        for r in range(ROUNDS):
            try:
                pending = sender.send("resilient_tool_call", scenario=f"call {i} of round {r}", input={})
                answers.put((time.monotonic() + random.uniform(0.0, 0.3), pending.id, {"thread": i, "round": r}))
                got[i, r] = sender.wait(pending, WAIT_S)
            except Exception as exc:  # noqa: BLE001 - what the test reports
                got[i, r] = exc
            if random.random() < 0.2:  # a service's threads collect garbage too, others' handles with theirs
                gc.collect()

    for _ in range(4):
        threading.Thread(target=answer, daemon=True).start()
    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + WAIT_S
        while len(got) < THREADS * ROUNDS // 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        restartable_redis.restart()
        for thread in threads:
            thread.join(timeout=max(deadline + WAIT_S - time.monotonic(), 0.1))
        waiting = sum(thread.is_alive() for thread in threads)
        assert not waiting, f"{waiting} of {THREADS} threads still wait"
        wrong = {key: value for key, value in got.items() if value != {"thread": key[0], "round": key[1]}}
        assert not wrong, f"{len(wrong)} of {len(got)} waits did not return their result: {list(wrong.items())[:5]}"
        assert len(got) == THREADS * ROUNDS
    finally:
        for sender in senders:
            sender.close()
        store.close()


def test_a_wait_rides_out_a_redis_loading_its_data_but_not_past_its_timeout(redis_url: str, monkeypatch) -> None:
    """A restarted Redis answers "LOADING" to reads until its data is in memory: the wait ended with
    BusyLoadingError right after a restart (tests/integration/test_reliability_redis.py met it),
    though the call went on; it asks again, up to its timeout."""
    sender = CallSender(Settings(redis_url=redis_url))
    backend = sender.celery.backend
    assert isinstance(backend, SubscribingRedisBackend)
    task_id = f"loading-{uuid.uuid4().hex[:6]}"
    backend.store_result(task_id, {"status": "success"}, "SUCCESS")
    answer = backend.get_task_meta
    refusals = [BusyLoadingError("Redis is loading the dataset in memory")] * 3

    def loading_then_answer(task_id: str, cache: bool = True) -> dict:
        if refusals:
            raise refusals.pop()
        return answer(task_id, cache)

    monkeypatch.setattr(backend, "get_task_meta", loading_then_answer)
    try:
        assert sender.wait(sender.celery.AsyncResult(task_id), timeout=5) == {"status": "success"}
        assert refusals == []
        refusals.extend([BusyLoadingError("still loading")] * 100)
        started = time.monotonic()
        with pytest.raises(BusyLoadingError):  # loading past the timeout: said, not waited on for ever
            sender.wait(sender.celery.AsyncResult(task_id), timeout=1.0)
        assert time.monotonic() - started < 15.0  # its timeout, not UNREACHABLE_GIVE_UP_S (20 s)
    finally:
        sender.close()


def test_a_result_stored_while_a_wait_listens_is_returned_then_not_at_the_next_read(redis_url: str, monkeypatch) -> None:
    """The wait listens for the result's publication between its reads: with reads a minute apart, a
    result stored 0.5 s into a 20 s wait is returned, which only the publication can tell it."""
    monkeypatch.setattr("workers.result_backend.RECHECK_S", 60.0)
    sender = CallSender(Settings(redis_url=redis_url))
    store = worker_side(redis_url)
    task_id = f"listened-{uuid.uuid4().hex[:6]}"
    timer = threading.Timer(0.5, lambda: store.backend.store_result(task_id, {"status": "success"}, "SUCCESS"))
    try:
        timer.start()
        assert sender.wait(sender.celery.AsyncResult(task_id), timeout=20) == {"status": "success"}
    finally:
        timer.cancel()
        sender.close()
        store.close()


def _send_and_wait(sender: CallSender, store: Celery, answers: "multiprocessing.Queue[Any]") -> None:
    """In a forked child: a call sent and waited for with the client its parent made and used."""
    try:
        pending = sender.send("resilient_tool_call", scenario="a call from a forked child", input={})
        threading.Timer(0.1, lambda: store.backend.store_result(pending.id, {"child": os.getpid()}, "SUCCESS")).start()
        answers.put(sender.wait(pending, 10))
    except Exception as exc:  # noqa: BLE001 - what the test reports
        answers.put(repr(exc))


def test_a_client_made_before_a_fork_gets_its_results_in_the_child(redis_url: str) -> None:
    """A gunicorn `--preload` app makes its client before it forks its workers. Celery's consumer
    was shared with the parent then: about half the child's results came ~3 s late (QA), and here
    one child of three waited out its 10 s for a result stored. Each wait now opens a connection of
    its own in the process that waits."""
    sender = CallSender(Settings(redis_url=redis_url))
    store = worker_side(redis_url)
    used = sender.send("resilient_tool_call", scenario="a call from the parent", input={})
    store.backend.store_result(used.id, {"parent": True}, "SUCCESS")
    assert sender.wait(used, 10) == {"parent": True}
    fork = multiprocessing.get_context("fork")
    answers = fork.Queue()
    children = [fork.Process(target=_send_and_wait, args=(sender, store, answers)) for _ in range(3)]
    try:
        for child in children:
            child.start()
        got = sorted(str(answers.get(timeout=30)) for _ in children)
        assert got == sorted(str({"child": child.pid}) for child in children)
    finally:
        for child in children:
            child.join(timeout=10)
        sender.close()
        store.close()


DROPPED_HANDLES = """
import sys
from fittest.client import FittestClient
client = FittestClient(sys.argv[1])
handles = [client.submit("sort these numbers", {"numbers": [2, 1]}) for _ in range(5)]  # no worker: queued
try:
    client.result(handles[0], timeout=0.3)
except TimeoutError:
    pass
print("stop redis", flush=True)
sys.stdin.readline()  # the test stops Redis
del handles
print("dropped", flush=True)
"""


def test_handles_dropped_after_redis_stopped_cost_nothing(private_redis: RedisServer) -> None:
    """QA 52a L9: a service that dropped its call handles once Redis had gone hung ~20 s in each
    handle's unsubscribe, and printed celery's "Retry limit exceeded ... must be restarted"
    traceback; no handle subscribes now."""
    service = subprocess.Popen([sys.executable, "-c", DROPPED_HANDLES, private_redis.url], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert service.stdout is not None and service.stdout.readline() == "stop redis\n"
    private_redis.proc.terminate()
    private_redis.proc.wait(timeout=10)
    out, err = service.communicate("\n", timeout=60)
    assert (service.returncode, out) == (0, "dropped\n"), (out, err)
    assert "Traceback" not in err and "Retry limit" not in err, err


def test_a_wait_rides_out_a_short_redis_restart_that_falls_on_its_look(restartable_redis: RestartableRedis) -> None:
    """QA 54b: a wait asks whether its call can still end 3 s after it began, then every 10 s. A 3 s
    Redis restart over that look raised FittestUnavailable for 219 of 240 waits, though the calls
    went on and one result was already stored."""
    from tests.conftest import start_redis

    sender = CallSender(Settings(redis_url=restartable_redis.url))
    store = worker_side(restartable_redis.url)
    got: list[Any] = []
    try:
        pending = sender.send("resilient_tool_call", scenario="sort these numbers", input={})  # no worker: it stays queued
        def wait() -> None:
            try:
                got.append(sender.wait_for_call(pending, 30))
            except Exception as exc:  # noqa: BLE001 - what the test reports
                got.append(exc)

        waiting = threading.Thread(target=wait, daemon=True)
        waiting.start()
        time.sleep(1.5)
        restartable_redis.proc.terminate()
        restartable_redis.proc.wait(timeout=20)
        time.sleep(3.5)  # down over the wait's first look, at 3 s
        restartable_redis.proc, _ = start_redis(restartable_redis.workdir, restartable_redis.port, appendonly=True)
        store.backend.store_result(pending.id, {"call_id": pending.id, "status": "success"}, "SUCCESS")
        waiting.join(timeout=30)
        assert got == [{"call_id": pending.id, "status": "success"}], got
    finally:
        sender.close()
        store.close()


FITTEST = Path(sys.executable).parent / "fittest"


def _fittest_result(url: str, call_id: str, timeout_s: float) -> subprocess.Popen[str]:
    """`fittest result CALL_ID --json`, as an operator's shell runs it, once its wait listens for the
    call's result (so that what the test does to Redis falls within the wait, not its start-up)."""
    env = {**os.environ, "FITTEST_REDIS_URL": url}
    env.pop("FITTEST_RESULT_BACKEND", None)
    proc = subprocess.Popen([str(FITTEST), "result", call_id, "--timeout", str(timeout_s), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    channel = SubscribingRedisBackend(app=Celery(), url=url).get_key_for_task(call_id)
    watch = redis.Redis.from_url(url)
    started = time.monotonic()
    while not dict(watch.pubsub_numsub(channel)).get(channel) and proc.poll() is None:
        assert time.monotonic() - started < 30, "fittest result never began to wait"
        time.sleep(0.05)
    watch.close()
    return proc


def _stop(proc: subprocess.Popen[str] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def test_fittest_result_rides_out_a_redis_restart_over_its_first_look(restartable_redis: RestartableRedis) -> None:
    """The CLI's wait asked celery for the result for its first 3 s, and a Redis restart over them
    ended the command with "Redis does not answer", though the call went on; it now waits as the
    client's `wait_for_call` does."""
    from tests.conftest import start_redis

    sender = CallSender(Settings(redis_url=restartable_redis.url))
    store = worker_side(restartable_redis.url)
    waiting: subprocess.Popen[str] | None = None
    try:
        pending = sender.send("resilient_tool_call", scenario="sort these numbers", input={})  # no worker: it stays queued
        waiting = _fittest_result(restartable_redis.url, pending.id, 60)
        time.sleep(0.5)
        restartable_redis.proc.terminate()
        restartable_redis.proc.wait(timeout=20)
        time.sleep(4.0)  # down over the wait's first look, at 3 s
        restartable_redis.proc, _ = start_redis(restartable_redis.workdir, restartable_redis.port, appendonly=True)
        store.backend.store_result(pending.id, {"call_id": pending.id, "status": "success", "output": {"n": 1}}, "SUCCESS")
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert json.loads(out)["output"] == {"n": 1}
    finally:
        _stop(waiting)
        sender.close()
        store.close()


def test_fittest_result_of_a_call_redis_lost_says_so_at_its_next_look(restartable_redis: RestartableRedis) -> None:
    """QA 54 for the CLI: a call lost with Redis's data (a restart without it) was waited for to the
    command's timeout after its first look at 3 s; now the look every 10 s finds it gone."""
    sender = CallSender(Settings(redis_url=restartable_redis.url))
    waiting: subprocess.Popen[str] | None = None
    try:
        pending = sender.send("resilient_tool_call", scenario="sort these numbers", input={})  # no worker: it stays queued
        waiting = _fittest_result(restartable_redis.url, pending.id, 120)
        time.sleep(5.0)  # past the first look, which finds it queued
        redis.Redis.from_url(restartable_redis.url).flushall()
        started = time.monotonic()
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 1, err
        assert json.loads(out)["status"] == "unknown"
        assert time.monotonic() - started < 20  # the next look, not the 120 s timeout
    finally:
        _stop(waiting)
        sender.close()


def test_a_call_sent_without_a_queue_is_told_where_it_waits(private_redis: RedisServer) -> None:
    """QA 55b M3: `send_task("fittest.resilient_tool_call", kwargs=…)` without `queue="selection"`
    puts the call in Celery's default queue, which no fittest worker reads. It waited for ever, and
    `fittest result` said no call of its id was queued; `fittest health` said all was well."""
    from fittest.client import FittestClient, MisroutedCall

    foreign = Celery(broker=private_redis.url, backend=private_redis.url)  # a service without fittest, no queue named
    client = FittestClient(private_redis.url)
    waiting: subprocess.Popen[str] | None = None
    try:
        sent = foreign.send_task("fittest.resilient_tool_call", kwargs={"scenario": "reverse this string", "input": {"text": "a"}})
        with pytest.raises(MisroutedCall, match="waits in Celery's default queue 'celery'.*queue='selection'"):
            client.result(sent.id, timeout=30)
        waiting = _fittest_result(private_redis.url, sent.id, 30)
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 1, err
        assert json.loads(out)["status"] == "unknown" and "queue='selection'" in json.loads(out)["message"]
        env = {**os.environ, "FITTEST_REDIS_URL": private_redis.url}
        health = subprocess.run([str(FITTEST), "health", "--check", "redis", "--json"], env=env, capture_output=True,
                                text=True, timeout=60)
        assert health.returncode == 0, health.stderr  # a warning: the stack itself serves
        redis_check = json.loads(health.stdout)["checks"][0]
        assert redis_check["status"] == "warn"
        assert "1 fittest.resilient_tool_call message(s) wait in Celery's default queue 'celery'" in redis_check["detail"]
        # each told its own queue (QA 57d L1: `queue='selection'` of every task)
        foreign.send_task("fittest.record_feedback", kwargs={"tool": "x", "sentiment": "positive", "scenario": "s"})
        health = subprocess.run([str(FITTEST), "health", "--check", "redis", "--json"], env=env, capture_output=True,
                                text=True, timeout=60)
        detail = json.loads(health.stdout)["checks"][0]["detail"]
        assert ("send fittest.record_feedback with queue='feedback', fittest.resilient_tool_call with queue='selection'"
                in detail), detail
    finally:
        _stop(waiting)
        client.close()
        foreign.close()

"""A message sent while Redis restarts waits for it instead of failing: what a worker sends (an
attempt's outcome, the next attempt, a learn message) is part of a call, and a send that fails
fails the task that carries the call."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import redis

from tests.broker import queued_messages
from tests.conftest import free_port, start_redis
from workers.app import make_app
from workers.settings import Settings


def test_a_message_sent_while_redis_is_down_is_delivered_once_it_is_back(tmp_path: Path) -> None:
    port = free_port()
    proc, url = start_redis(tmp_path, port, appendonly=True)
    app = make_app(Settings(redis_url=url))
    app.send_task("fittest.learn", args=[["sent before"]], queue="learning")  # connected before Redis goes away
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)

    outcome: list[BaseException | float] = []

    def send() -> None:
        started = time.monotonic()
        try:
            app.send_task("fittest.learn", args=[["sent while down"]], queue="learning", ignore_result=True)
            outcome.append(time.monotonic() - started)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome.append(exc)

    # A daemon: were Redis not started again, its retries would not keep the test process alive.
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(2.0)
    while_down = list(outcome)  # asserted once Redis is back, so that a failure does not leave the sender retrying
    proc, _ = start_redis(tmp_path, port, appendonly=True)  # from this thread: the server dies with the thread that started it
    try:
        sender.join(timeout=30)
        assert while_down == [], while_down  # it was still waiting for Redis
        assert len(outcome) == 1 and isinstance(outcome[0], float) and outcome[0] >= 2.0, outcome
        client = redis.Redis.from_url(url)
        # the message sent before the restart, kept by the append-only file, and this one
        assert len(queued_messages(client, "learning")) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=20)

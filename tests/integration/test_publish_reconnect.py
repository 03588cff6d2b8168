"""A message published while Redis restarts waits for it and is published once: a call a service
sends, and a publish whose connection drops inside its queue declare (a step handed on)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu.transport import redis as kombu_redis

from tests.broker import queued_messages
from tests.conftest import free_port, start_redis
from workers.app import make_app
from workers.client import CallSender
from workers.settings import Settings


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = f"publish-{uuid.uuid4().hex[:8]}"
    yield name
    client = redis.Redis.from_url(redis_url)
    leftovers = client.keys(f"{name}*") + client.keys(f"_kombu.binding.{name}")
    if leftovers:
        client.delete(*leftovers)
    client.close()


@pytest.fixture
def drop_first_declare(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The connection drops while the first queue binding is written (the declare of a publish)."""
    real_bind = kombu_redis.Channel._queue_bind
    dropped: list[str] = []

    def bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        if not dropped:
            dropped.append(queue)
            raise redis.ConnectionError("Connection closed by server.")
        real_bind(self, exchange, routing_key, pattern, queue)

    monkeypatch.setattr(kombu_redis.Channel, "_queue_bind", bind)
    return dropped


def queued_ids(redis_url: str, queue: str) -> list[str]:
    with redis.Redis.from_url(redis_url) as client:
        return [message["headers"]["id"] for _, message in queued_messages(client, queue)]


@pytest.mark.parametrize("sender", ["worker", "client"])
def test_a_publish_whose_declare_loses_the_connection_is_sent_once_after_the_reconnect(
        redis_url: str, queue: str, drop_first_declare: list[str], sender: str) -> None:
    settings = Settings(redis_url=redis_url)
    celery = make_app(settings) if sender == "worker" else CallSender(settings).celery
    try:
        result = celery.send_task("fittest.resilient_tool_call", kwargs={"scenario": "s"}, queue=queue, ignore_result=True)
    finally:
        celery.close()
    assert drop_first_declare == [queue]  # the drop happened, inside this publish
    assert queued_ids(redis_url, queue) == [result.id]


@pytest.mark.parametrize("fire_and_forget", [False, True])
def test_a_call_sent_while_redis_restarts_waits_for_it_and_is_queued_once(tmp_path: Path, fire_and_forget: bool) -> None:
    """A call whose result is awaited first subscribes to it, and that waits for the result store;
    one sent without a result (ignore_result) only publishes, and its publish retry waits."""
    port = free_port()
    proc, url = start_redis(tmp_path / "redis", port)
    client = CallSender(Settings(redis_url=url))
    # A client that was connected (its pooled connection made, the queue declared) when Redis went away.
    client.celery.send_task("fittest.resilient_tool_call", kwargs={"scenario": "s"}, queue="selection", ignore_result=True)
    proc.terminate()
    proc.wait(timeout=10)
    sent: dict[str, Any] = {}

    def send() -> None:  # a service's call, while Redis is down
        started = time.monotonic()
        try:
            kwargs: dict[str, Any] = {"scenario": "convert 3 miles to km", "input": {"value": 3}}
            sent["result"] = (client.celery.send_task("fittest.resilient_tool_call", kwargs=kwargs, queue="selection",
                                                      ignore_result=True)
                              if fire_and_forget else client.send("resilient_tool_call", **kwargs))
        except Exception as exc:
            sent["error"] = exc
        sent["waited"] = time.monotonic() - started

    # A daemon: were Redis not started again, its retries would not keep the test process alive.
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(2.0)
    proc, _ = start_redis(tmp_path / "redis", port)  # from this thread: the server dies with the thread that started it
    try:
        sender.join(timeout=60)
        assert "error" not in sent, sent.get("error")
        assert sent["waited"] >= 1.5, sent  # it waited for the restart
        assert queued_ids(url, "selection") == [sent["result"].id]  # once (the first call went with the restart: no disk)
    finally:
        client.celery.close()
        proc.terminate()
        proc.wait(timeout=10)

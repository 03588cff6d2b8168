"""A message published while the broker connection drops inside its queue declare is published once,
after the reconnect, instead of failing (a step handed on, or a call sent, while Redis restarts)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis
from kombu.transport import redis as kombu_redis

from workers.app import PRIORITY_NORMAL, make_app
from workers.client import FittestClient
from workers.settings import Settings


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = f"publish-{uuid.uuid4().hex[:8]}"
    yield name
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys(f"{name}*"), *client.keys(f"_kombu.binding.{name}"))
    client.close()


@pytest.fixture
def drop_first_declare(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The connection drops while the first queue binding is written (the declare of a publish)."""
    real_bind, dropped = kombu_redis.Channel._queue_bind, []

    def bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        if not dropped:
            dropped.append(queue)
            raise redis.ConnectionError("Connection closed by server.")
        real_bind(self, exchange, routing_key, pattern, queue)

    monkeypatch.setattr(kombu_redis.Channel, "_queue_bind", bind)
    return dropped


def queued_ids(redis_url: str, queue: str) -> list[str]:
    client = redis.Redis.from_url(redis_url)
    try:
        return [json.loads(raw)["headers"]["id"] for key in client.keys(f"{queue}*") if client.type(key) == b"list"
                for raw in client.lrange(key, 0, -1)]
    finally:
        client.close()


@pytest.mark.parametrize("sender", ["worker", "client"])
def test_a_publish_whose_declare_loses_the_connection_is_sent_once_after_the_reconnect(
        redis_url: str, queue: str, drop_first_declare: list[str], sender: str) -> None:
    settings = Settings(redis_url=redis_url)
    celery = make_app(settings) if sender == "worker" else FittestClient(settings).celery
    try:
        result = celery.send_task("fittest.resilient_tool_call", kwargs={"scenario": "s"}, queue=queue,
                                  priority=PRIORITY_NORMAL, ignore_result=True)
    finally:
        celery.close()
    assert drop_first_declare == [queue]  # the drop happened, inside this publish
    assert queued_ids(redis_url, queue) == [result.id]

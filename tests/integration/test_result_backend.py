"""A call's result survives a result store that refuses a connection for a moment (a Redis restart
while the last task of a call stores its result): the store is retried, not turned into a failure."""

from __future__ import annotations

import uuid

import pytest
import redis

from workers.app import make_app
from workers.settings import Settings


def test_a_result_stored_while_redis_refuses_connections_is_stored_once_it_answers(redis_url: str,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_app(Settings(redis_url=redis_url)).backend
    real_get = backend.client.get
    refused: list[str] = []

    def get_while_restarting(key: str) -> bytes | None:  # storing reads the task's state first
        if len(refused) < 3:
            refused.append(key)
            raise redis.ConnectionError("Error 111 connecting to Redis. Connection refused.")
        return real_get(key)

    monkeypatch.setattr(backend.client, "get", get_while_restarting)
    task_id = str(uuid.uuid4())
    backend.store_result(task_id, {"status": "succeeded"}, "SUCCESS")
    monkeypatch.undo()
    assert len(refused) == 3
    meta = backend.get_task_meta(task_id)
    assert (meta["status"], meta["result"]) == ("SUCCESS", {"status": "succeeded"})

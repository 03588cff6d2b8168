"""What waits in the broker's queues, read from Redis the way kombu's Redis transport stores it."""

from __future__ import annotations

import json
from typing import Any

import redis


def queued_messages(client: redis.Redis, queue: str) -> list[tuple[str, dict[str, Any]]]:
    """The messages waiting in `queue` at any priority (one list per step), as (list key, message)."""
    out = []
    for key in client.keys(f"{queue}*"):
        if client.type(key) in (b"list", "list"):
            name = key.decode() if isinstance(key, bytes) else key
            out += [(name, json.loads(raw)) for raw in client.lrange(key, 0, -1)]
    return out

"""How to open the Redis state of settings: the state store (selection/ports.py StateStore, on
Redis: workers/state/redis.py) and the learner's window of recent execution records
(workers/state/learning.py).

The stores are imported when one is opened, not with this package: its light modules (the calls in
flight, call ids) are what the service client imports, and it should not load the stores with them.
The Redis connection itself is workers/redis_connection.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from redis import Redis

from workers.redis_connection import redis_client
from workers.settings import Settings

if TYPE_CHECKING:
    from workers.state.learning import LearningState
    from workers.state.redis import RedisStateStore

# NB: no bare `redis` name here: the submodule workers.state.redis would shadow redis-py.
__all__ = ["open_learning_state", "open_state_store"]


def open_state_store(settings: Settings, client: Redis | None = None) -> RedisStateStore:
    """The state store of `settings` (its Redis and key prefix); pass `client` to share one."""
    from workers.state.redis import RedisStateStore

    return RedisStateStore(client if client is not None else redis_client(settings), settings.key_prefix)


def open_learning_state(settings: Settings, client: Redis | None = None) -> LearningState:
    """The learner's window of recent execution records of `settings` (workers/state/learning.py)."""
    from workers.state.learning import LearningState

    return LearningState(client if client is not None else redis_client(settings), settings.key_prefix,
                         settings.learner_window)

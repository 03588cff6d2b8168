"""Lua scripts sent many at a time, in one pipeline, that survive Redis losing its script cache.

redis-py sends a registered script as EVALSHA and, called on its own, loads it again when Redis
answers NOSCRIPT. In a pipeline it loads the pipeline's scripts before sending, but when the
connection drops after that check (Redis restarting) it replays the commands on the new server,
whose script cache is empty: every EVALSHA fails with NoScriptError, a ResponseError that no
connection retry covers. Seen with 4 threads pushing learner records through 10 restarts: 8 of
47,155 pipelines failed this way, each losing its batch. The pipeline is built and sent once more,
which loads the scripts into the new server; every script sent this way is idempotent (keyed by an
attempt id, or by a token: workers/state/once.py), so a command that did run the first time
changes nothing the second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError


def execute_scripts(client: Redis, queue: Callable[[Pipeline], None]) -> list[Any]:
    """The replies of the script calls `queue` adds to a fresh non-transactional pipeline."""
    for sent in range(2):
        pipe = client.pipeline(transaction=False)
        queue(pipe)
        try:
            return pipe.execute()
        except NoScriptError:
            if sent:
                raise
    raise AssertionError("unreachable")

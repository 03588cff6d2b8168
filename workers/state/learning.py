"""The learner's state on Redis: the window of recent execution records the weights are learned
from (and `fittest recommend` reads). The weights themselves, with their versions and history,
live in RedisStateStore (`weights:*`), where selection reads them.

Key layout (P = the key prefix, shared with RedisStateStore; the type word comes first):

    P learning:recent          list   ExecutionRecord JSON, newest first (capped at the window)
    P applied:learn:{aid}      string idempotency key of a record (TTL): a redelivered record is
                                      not counted twice
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
from pydantic import ValidationError

from selection.learner import ExecutionRecord
from workers.state.base import PrefixedStore, load_scripts, push_recent



class LearningState(PrefixedStore):
    def __init__(self, client: redis.Redis, prefix: str, window: int) -> None:
        super().__init__(client, prefix)
        if window < 1:
            raise ValueError("the learning window must hold at least 1 record")
        self.window = window
        self._push = load_scripts(client, "push_recent")["push_recent"]

    def push(self, records: Sequence[ExecutionRecord]) -> int:
        """Add records to the window (once per attempt id, in one round trip); how many were new."""
        pushes = [(self._k("learning", "recent"), self._k("applied", "learn", r.attempt_id), r.model_dump_json())
                  for r in records]
        return sum(push_recent(self.client, self._push, pushes, self.window))

    def recent(self) -> list[ExecutionRecord]:
        """The window's records, newest first; unreadable entries (an older format) are skipped."""
        raws = self.client.lrange(self._k("learning", "recent"), 0, self.window - 1)
        out = []
        for raw in raws:
            try:
                out.append(ExecutionRecord.model_validate_json(raw))
            except ValidationError:
                continue
        return out

"""The Redis lists whose records name their call, as what `fittest forget` removes from Redis
(workers/forget.py): each is kept by its own store, and read here only to take a call's records out.

Key layout (P = the key prefix):

    P recent:{key}        list   SuccessfulRun JSON of a tool version (workers/state/evolution.py)
    P learning:recent     list   ExecutionRecord JSON, the learner's window (workers/state/learning.py)
    P pending:vectors     list   PendingWrite JSON, its point's payload naming the call (workers/pending.py)
"""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis

from workers.state.base import PrefixedStore, as_text, load_scripts
from workers.state.redis import SCAN_COUNT, glob_escape


class CallRecordLists(PrefixedStore):
    def __init__(self, client: Redis, prefix: str) -> None:
        super().__init__(client, prefix)
        self._forget = load_scripts(client, "forget_calls")["forget_calls"]

    def lists(self) -> dict[str, list[str]]:
        """The lists, by what `fittest forget` calls their records."""
        recent = sorted(as_text(k) for k in self.client.scan_iter(match=glob_escape(self._k("recent", "")) + "*", count=SCAN_COUNT))
        return {"recent_successes": recent, "learning_window": [self._k("learning", "recent")],
                "pending_writes": [self._k("pending", "vectors")]}

    def forget(self, call_ids: Sequence[str]) -> dict[str, int]:
        """Remove the calls' records from every list (lua/forget_calls.lua, atomic a list); the
        number removed per kind of list."""
        return {kind: sum(int(self._forget(keys=[key], args=list(call_ids))[0]) for key in keys)
                for kind, keys in self.lists().items()}

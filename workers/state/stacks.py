"""The other stacks served on one Redis: what a shell whose FITTEST_KEY_PREFIX is not the workers'
is told (QA ops L8). Each memory worker marks its prefix as it starts (`RedisStateStore`'s
SERVED_MARK key, written by note_newcomers)."""

from __future__ import annotations

import redis

from workers.state.redis import EPOCH_KEY, SCAN_COUNT, SERVED_MARK


def other_stacks(client: redis.Redis, prefix: str, limit: int = 5) -> list[str] | None:
    """The key prefixes of the stacks served on this Redis when none is served under `prefix`, or
    None when one is: a shell whose FITTEST_KEY_PREFIX is not the workers' reads an empty state,
    every tool untouched, and a call it sends is recorded where no worker looks (QA ops L8).
    Looks through the whole keyspace, so only for commands that found nothing, never on a call's path."""
    if client.exists(prefix + SERVED_MARK):
        return None
    found: list[str] = []
    for raw in client.scan_iter(match="*" + SERVED_MARK, count=SCAN_COUNT):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        other = name.removesuffix(SERVED_MARK)
        # Not this stack's own demo (PREFIX + "demo:", a state apart), nor another program's key that
        # ends so (`k8s:namespaces`): a stack's selection also keeps its state's epoch (review 60f).
        if other == prefix or other.startswith(prefix) or other in found or not client.exists(other + EPOCH_KEY):
            continue
        found.append(other)
        if len(found) >= limit:
            break
    return found

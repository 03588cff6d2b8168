"""A Redis restart and the versions that readers cache by (StateVersions).

The selector keeps promotions and weights until their version moves. A Redis that keeps nothing on
disk (as this machine's does) comes back empty and counts again from 0; without the epoch, a reader
that cached promotions at version N would take the N reached after the restart for the one it read.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import redis

from selection.models import Promotion
from selection.ports import StateVersions
from tests.conftest import free_port, start_redis
from workers.state.redis import RedisStateStore


def promotion(version: str) -> Promotion:
    return Promotion(namespace="translate_text", evolved_version=version, original_version="1.0.0",
                     reason="test", mutation="timeout", status="active")


def restarted(tmp_path: Path, appendonly: bool,
              between: Callable[[RedisStateStore], object]) -> tuple[StateVersions, StateVersions]:
    """Versions after one promotion, then after a restart of the server and `between(store)`."""
    port = free_port()
    proc, url = start_redis(tmp_path, port, appendonly=appendonly)
    client = redis.Redis.from_url(url)
    try:
        store = RedisStateStore(client, "fittest-test:")
        store.promote(promotion("1.1.0"))
        before = store.versions()
        proc.send_signal(signal.SIGTERM)  # Redis writes its append-only file, if it keeps one, and exits
        proc.wait(timeout=20)
        proc, _ = start_redis(tmp_path, port, appendonly=appendonly)
        between(store)
        return before, store.versions()
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=20)


def test_a_restart_that_lost_the_keys_starts_a_new_epoch(tmp_path: Path) -> None:
    before, after = restarted(tmp_path, appendonly=False, between=lambda s: s.promote(promotion("1.2.0")))
    assert (after.state, after.promotions) == (before.state, before.promotions)  # the same counts again...
    assert after.epoch and after.epoch != before.epoch  # ...in another life of the store
    assert after != before


def test_a_restart_on_the_same_data_keeps_the_epoch(tmp_path: Path) -> None:
    before, after = restarted(tmp_path, appendonly=True, between=lambda s: None)
    assert after == before  # nothing was lost, so nothing a reader cached is read again

"""The typed client when Redis goes away: one exception that says so, not Celery's internals."""

from __future__ import annotations

import time

import pytest

from fittest.client import FittestClient, FittestUnavailable
from tests.conftest import RedisServer
from workers.client import CLOSE_FLUSH_S


@pytest.mark.slow
def test_waiting_for_a_call_while_redis_is_away_raises_fittest_unavailable(private_redis: RedisServer) -> None:
    """QA met `RuntimeError: Retry limit exceeded while trying to reconnect to the Celery result
    store backend. The Celery application must be restarted.` (and a bare redis ConnectionError)
    from `result()`. The caller gets FittestUnavailable, a ConnectionError naming the call."""
    client = FittestClient(private_redis.url)
    try:
        pending = client.submit("sort these numbers", {"numbers": [2, 1]})  # no worker: it stays queued
        private_redis.proc.terminate()
        private_redis.proc.wait(timeout=10)
        started = time.monotonic()
        with pytest.raises(FittestUnavailable, match=f"waiting for call {pending.id}: .*cannot be reached") as raised:
            client.result(pending, timeout=120)
        assert isinstance(raised.value, ConnectionError)
        assert time.monotonic() - started < 100
    finally:
        closing = time.monotonic()
        client.close()
    # Its close does not ride out the outage again: the call's record as in flight stays in the
    # process's buffer, sent when Redis answers (a `with` block held FittestUnavailable ~30 s more).
    assert time.monotonic() - closing < CLOSE_FLUSH_S + 2

"""What a stop of a worker exempts from the deaths of the attempts it ran (workers/state/run_marks.py)."""

from __future__ import annotations

import redis

from tests.conftest import RedisServer
from workers.state.run_marks import RunMarks


def test_the_run_a_stop_ended_stays_the_stops_however_often_it_is_read_and_a_second_run_is_not(
        private_redis: RedisServer) -> None:
    """Review 50: read again (a delivery given back before its mark was counted, a copy of the
    step), the run a stop ended was charged as the tool's death."""
    client = redis.Redis.from_url(private_redis.url)
    try:
        marks = RunMarks(client, "rm:")
        assert marks.first_stop("call-1:0", "run-a")
        assert marks.first_stop("call-1:0", "run-a")  # the same run, read again
        assert not marks.first_stop("call-1:0", "run-b")  # the next run a stop ends is counted
        assert marks.first_stop("call-2:0", "run-b")  # each attempt has its own
    finally:
        client.close()

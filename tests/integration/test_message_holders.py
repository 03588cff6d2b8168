"""Worker leases on Redis (workers/state/holders.py, workers/worker_lease.py): what a sweeper may
take from a silent worker, and when it may judge one silent at all."""

from __future__ import annotations

import time

import redis

from workers.state.holders import MessageHolders
from workers.worker_lease import WorkerLease


def test_a_silent_holders_tags_are_taken_once_and_a_beating_one_keeps_them(redis_client: redis.Redis, run_prefix: str) -> None:
    holders = MessageHolders(redis_client, run_prefix, keep_s=60)
    holders.beat("dead@h:1:a", ["t1", "t2"])
    holders.claim("dead@h:1:a", "t3")  # received after its last beat
    holders.flush()
    holders.beat("live@h:2:b", ["t2"])  # t2 came back to the broker and a live worker took it
    time.sleep(0.3)
    assert holders.silent(10.0) == []
    assert holders.take("dead@h:1:a", 10.0) is None  # not silent for 10 s: it keeps them
    assert set(holders.silent(0.2)) == {"dead@h:1:a", "live@h:2:b"}
    holders.beat("live@h:2:b", ["t2"])
    taken = holders.take("dead@h:1:a", 0.2)
    assert taken is not None and sorted(taken) == ["t1", "t2", "t3"]
    assert holders.take("dead@h:1:a", 0.2) is None  # once
    assert sorted(holders.unclaimed(taken)) == ["t1", "t3"]  # t2 is the live worker's now
    holders.beat("live@h:2:b", None)  # it cannot tell what it holds now: its claims stand
    assert holders.unclaimed(["t2"]) == []
    holders.forget("live@h:2:b")
    assert holders.silent(0.0) == [] and holders.unclaimed(["t2"]) == ["t2"]


def test_a_worker_judges_others_only_after_beating_for_a_whole_lease(redis_client: redis.Redis, run_prefix: str) -> None:
    lease = WorkerLease("w@h", MessageHolders(redis_client, run_prefix, keep_s=60), lease_s=0.5)
    assert not lease.may_judge()
    lease.beat()
    assert not lease.may_judge()  # Redis may have just come back: the others have not beaten yet
    time.sleep(0.6)
    assert lease.may_judge()
    lease.holders = MessageHolders(redis.Redis(port=1, socket_connect_timeout=0.2), run_prefix, keep_s=60)
    lease.beat()  # a beat that fails starts the count again
    assert not lease.may_judge()


def test_a_claim_reaches_redis_without_waiting_for_the_flush_interval(redis_client: redis.Redis, run_prefix: str) -> None:
    """A worker killed right after it received a message (an out-of-memory kill as its tool starts)
    had not sent the claim, which waited for the next flush: its attempt came back only after the
    visibility timeout (the lease test, on a busy machine: killed 90 ms after the claim, 1 run in 4).
    The claim is sent by the flusher's thread at once; the interval here is far longer than the wait."""
    holders = MessageHolders(redis_client, run_prefix, keep_s=60, flush_interval_s=60.0)
    holders.claim("w@h:1:a", "t1")
    deadline = time.monotonic() + 5.0
    while not redis_client.sismember(holders.held_key("w@h:1:a"), "t1"):
        assert time.monotonic() < deadline, "the claim waited for the flush interval"
        time.sleep(0.01)

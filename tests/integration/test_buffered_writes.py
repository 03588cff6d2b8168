"""Buffered writes (workers/buffered.py) keep flushing after a write that cannot be sent."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import weakref
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.retry import Retry

from workers.buffered import BufferedWrites


class Marks(BufferedWrites[list[str]]):
    """SETs a key per mark; the mark "bad" fails in the pipeline's making, as a bug would."""

    name = "marks"  # its log lines, told from those of other writers still running in this process

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.prefix = prefix
        super().__init__(client, flush_interval_s=0.05)

    def _new_buffer(self) -> list[str]:
        return []

    def _write(self, pipe: Pipeline, buffer: list[str]) -> None:
        for mark in buffer:
            if mark == "bad":
                raise ValueError("cannot write this mark")
            pipe.set(f"{self.prefix}{mark}", 1)

    def add(self, mark: str) -> None:
        with self._buffer() as pending:
            pending.append(mark)


def test_a_write_that_cannot_be_sent_is_dropped_and_later_ones_are_still_sent(redis_client: redis.Redis, run_prefix: str) -> None:
    marks = Marks(redis_client, run_prefix)
    marks.add("bad")
    time.sleep(0.3)  # its flush failed
    marks.add("good")
    deadline = time.monotonic() + 5
    while not redis_client.exists(f"{run_prefix}good") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.exists(f"{run_prefix}good")  # sent by the flusher, not at the process's exit
    assert not redis_client.exists(f"{run_prefix}bad")


def test_a_flusher_that_keeps_failing_says_so_once_and_not_at_every_flush(caplog: pytest.LogCaptureFixture, redis_client: redis.Redis,
                                                                         run_prefix: str) -> None:
    """QA Q: during a Redis OOM a client printed "inflight not flushed" about 100 times to its caller's stderr."""
    marks = Marks(redis.Redis(port=1, socket_connect_timeout=0.1, retry=Retry(NoBackoff(), 0)), run_prefix)
    with caplog.at_level("WARNING", logger="fittest.buffered"):
        marks.add("kept")
        time.sleep(0.8)  # some 16 flushes, every one failing
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("marks not flushed")]
    assert len(said) == 1 and said[0].startswith("marks not flushed for 0 s"), said
    marks.client = redis_client  # Redis is back: the write kept is sent, and said so
    with caplog.at_level("WARNING", logger="fittest.buffered"):
        deadline = time.monotonic() + 5
        while not any(r.getMessage().startswith("marks flushed again") for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert redis_client.exists(f"{run_prefix}kept")
    assert any(r.getMessage().startswith("marks flushed again") for r in caplog.records)


class Stalled(Marks):
    """A writer whose Redis does not answer: its send waits on the others', then fails as a lost
    connection would."""

    def __init__(self, client: redis.Redis, prefix: str, all_sending: threading.Barrier) -> None:
        self.all_sending = all_sending
        self.redis_down = True
        super().__init__(client, prefix)

    def _send(self, buffer: list[str], token: str) -> None:
        if not self.redis_down:
            return  # taken
        self.all_sending.wait()  # broken (BrokenBarrierError) if the buffers are sent one by one
        raise redis.ConnectionError("Redis does not answer")


def test_a_process_ends_waiting_for_its_buffers_side_by_side_not_one_by_one(monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture,
                                                                          redis_client: redis.Redis,
                                                                          run_prefix: str) -> None:
    """A pool process that ended while Redis was down took ~30 s per buffer (3 buffers: 90 s), each
    client riding out a restart in turn. Its buffers are now sent at once, under one deadline."""
    from workers import buffered

    monkeypatch.setattr(buffered, "_started", weakref.WeakSet())  # this test's buffers only
    all_sending = threading.Barrier(3, timeout=10)
    writers = [Stalled(redis_client, run_prefix, all_sending) for _ in range(3)]
    for writer in writers:
        writer.flush_interval_s = 3600  # the process's end sends them, not their flushers
        writer.add("last")
    with caplog.at_level("WARNING", logger="fittest.buffered"):
        buffered.flush_all()
    for writer in writers:  # Redis takes them at this process's real end (atexit)
        writer.redis_down = False
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("marks not flushed as the process ends")]
    assert said == ["marks not flushed as the process ends: Redis does not answer"] * 3, said


def test_the_last_flush_at_exit_says_in_one_line_that_redis_did_not_take_it(monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture, run_prefix: str) -> None:
    """QA AE: a client that handled FittestUnavailable and exited printed a 30-line traceback from
    the atexit flush."""
    from workers import buffered

    monkeypatch.setattr(buffered, "_started", weakref.WeakSet())  # this test's buffer only
    marks = Marks(redis.Redis(port=1, socket_connect_timeout=0.1, retry=Retry(NoBackoff(), 0)), run_prefix)
    marks.flush_interval_s = 3600  # the process's end sends it, not its flusher
    marks.add("kept")
    with caplog.at_level("WARNING", logger="fittest.buffered"):
        buffered.flush_all()  # what atexit runs: no exception out of it
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("marks not flushed")]
    assert len(said) == 1 and said[0].startswith("marks not flushed as the process ends: Error "), said


def test_what_a_process_buffered_in_its_last_interval_is_sent_as_it_exits(redis_client: redis.Redis, redis_url: str,
                                                                           run_prefix: str) -> None:
    """A client process that exits before its flusher's next interval sends its writes at exit."""
    code = textwrap.dedent(f"""
        import redis
        from tests.integration.test_buffered_writes import Marks
        marks = Marks(redis.Redis.from_url({redis_url!r}), {run_prefix!r})
        marks.flush_interval_s = 3600
        marks.add("sent at exit")
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=Path(__file__).parents[2])
    assert redis_client.exists(f"{run_prefix}sent at exit")

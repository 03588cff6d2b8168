"""The CLI's and `fittest health`'s check of Redis (workers/redis_connection.py `probe_client`)."""

from __future__ import annotations

import socket
import threading

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

from workers.redis_connection import probe_client
from workers.settings import Settings


def test_a_redis_that_holds_the_connection_without_answering_is_tried_once() -> None:
    """QA 50e: a stalled Redis (SIGSTOP) took `fittest tools` 10 s to report, each of the probe's
    retries waiting its timeout again; a refused connection, a Redis starting up, is still retried."""
    accepted: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        stop = threading.Event()

        def take() -> None:  # accepts, reads nothing, answers nothing
            server.settimeout(0.1)
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0])
                except OSError:
                    continue

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        client = probe_client(Settings(redis_url=f"redis://127.0.0.1:{server.getsockname()[1]}/0"), timeout=0.2, retries=3)
        try:
            with pytest.raises(RedisTimeoutError):
                client.ping()
        finally:
            client.close()
            stop.set()
            taker.join()
            for conn in accepted:
                conn.close()
    assert len(accepted) == 1, len(accepted)

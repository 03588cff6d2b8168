"""How a client waits for a call's result on Redis: celery's Redis result backend, without its
result consumer.

Celery's consumer keeps one redis-py PubSub per app, subscribes each task id to it as the task is
sent, and reconnects and resubscribes it when Redis drops the connection. Under many threads that
one connection is read and written at once: QA 53a saw 26 of 30 waits, each thread with a client
of its own, hang for minutes in redis-py's resubscribe as a worker was killed, and with one client
shared by 30 threads 8 waits raise "Protocol error, got 'm'" for calls that had succeeded.

Here each wait owns what it uses: it reads the result's key, and between reads listens for the
key's publication (celery's backend publishes each result it stores on a channel of the key's
name) on a connection of its own, opened for the wait and closed after it. Nothing is subscribed
when a call is sent, so a result sent and never waited for costs nothing, and no handle needs
unsubscribing when it is dropped.
"""

from __future__ import annotations

import time
from typing import Any

from celery.backends.redis import RedisBackend
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult
from celery.states import READY_STATES
from redis.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

# How often a wait reads the result again while it listens: a publication missed (stored while the
# wait's own connection was down) costs at most this long.
RECHECK_S = 2.0
# How often a wait reads the result, and tries to listen again, while its connection is down.
UNLISTENED_POLL_S = 0.25
# How long a wait rides out a Redis it cannot reach (restarting, loading its data) before it says so:
# about as long as celery's consumer retried its reconnection before.
UNREACHABLE_GIVE_UP_S = 20.0
# The schemes of the result backend URLs this backend takes the place of celery's for.
REDIS_SCHEMES = ("redis", "rediss")


# What a read meets when Redis does not answer, restarts or loads its data (BusyLoadingError is a
# ConnectionError); redis-py raises these for its sockets' errors too.
REDIS_AWAY = (RedisConnectionError, RedisTimeoutError)


class Outage:
    """How long a wait has met a Redis that does not answer, and whether it waits for it longer:
    up to UNREACHABLE_GIVE_UP_S in all, and not past the wait's deadline."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.since: float | None = None

    def ride_out(self) -> bool:
        """Note one more failed read; True after a short sleep when the wait should read again,
        False when it gives up (the caller raises what it met)."""
        now = time.monotonic()
        since = self.since = now if self.since is None else self.since
        if now - since >= UNREACHABLE_GIVE_UP_S or now + UNLISTENED_POLL_S >= self.deadline:
            return False
        time.sleep(UNLISTENED_POLL_S)
        return True

    def over(self) -> None:
        self.since = None


def waiting_backend_url(url: str) -> str:
    """The result backend URL a client app is given: a Redis one names this module's backend (celery
    reads `CLASS+URL` as the class to build with the URL), any other is left to celery."""
    scheme = url.partition("://")[0]
    return f"{__name__}:SubscribingRedisBackend+{url}" if scheme in REDIS_SCHEMES else url


class ResultChannel:
    """One wait's subscription to one result's channel, on a connection no one else uses. It never
    raises: a connection that fails is dropped, and `listen` sleeps a short poll instead, trying
    again next time."""

    def __init__(self, backend: RedisBackend, task_id: str) -> None:
        self._backend = backend
        self._channel = backend.get_key_for_task(task_id)
        self._connection: AbstractConnection | None = None
        self._next_try = 0.0

    def _subscribe(self) -> bool:
        """Open the connection and subscribe, if not done; False while Redis does not let it."""
        if self._connection is not None:
            return True
        if time.monotonic() < self._next_try:
            return False
        pool = self._backend.client.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
        try:
            connection.send_command("SUBSCRIBE", self._channel)
            connection.read_response(push_request=True)  # the confirmation (a push message under RESP3)
        except (RedisError, OSError):
            connection.disconnect()
            self._next_try = time.monotonic() + UNLISTENED_POLL_S
            return False
        self._connection = connection
        return True

    def listen(self, seconds: float) -> None:
        """Return when something is published on the channel, `seconds` pass, or the connection is
        opened anew (a result stored while it was down is read, not waited for)."""
        if self._connection is None:
            if not self._subscribe():
                time.sleep(max(min(seconds, UNLISTENED_POLL_S), 0.0))
            return
        try:
            if self._connection.can_read(timeout=max(seconds, 0.0)):
                self._connection.read_response(push_request=True)
        except (RedisError, OSError):
            self.close()
            self._next_try = time.monotonic() + UNLISTENED_POLL_S

    def close(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()
            self._connection = None


class SubscribingRedisBackend(RedisBackend):
    """celery's Redis result backend, each wait reading the result and listening for it on a
    connection of its own (this module's docstring says why); storing and reading are celery's."""

    # A ResultSet is joined one result after the other, each wait its own: celery's native join
    # drains the result consumer that this backend does without.
    supports_native_join = False

    def on_task_call(self, producer: Any, task_id: str) -> None:
        """Nothing is subscribed when a task is sent: its wait listens for it, if it is waited for."""

    def add_pending_result(self, result: AsyncResult, weak: bool = False, start_drainer: bool = True) -> AsyncResult:
        return result

    def add_pending_results(self, results: list[AsyncResult], weak: bool = False) -> list[AsyncResult]:
        return results

    def remove_pending_result(self, result: AsyncResult) -> AsyncResult:
        return result

    def wait_for_pending(self, result: AsyncResult, timeout: float | None = None, interval: float = 0.5,
                         no_ack: bool = True, on_message: Any = None, on_interval: Any = None,
                         callback: Any = None, propagate: bool = True, **kwargs: Any) -> Any:
        """What `result.get(timeout)` returns or raises, once its result is stored; celery's
        TimeoutError after `timeout` (None: wait for ever), and the Redis error when Redis has not
        answered for UNREACHABLE_GIVE_UP_S."""
        self._ensure_not_eager()
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        channel = ResultChannel(self, result.id)
        try:
            while not self._stored(result, deadline):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CeleryTimeout("The operation timed out.")
                channel.listen(min(left, RECHECK_S))
                if on_interval is not None:
                    on_interval()
        finally:
            channel.close()
        return result.maybe_throw(callback=callback, propagate=propagate)

    def _stored(self, result: AsyncResult, deadline: float) -> bool:
        """Whether the result is stored (and then held by the handle), reading it again while Redis
        cannot be reached or is loading its data, up to UNREACHABLE_GIVE_UP_S or the deadline."""
        outage = Outage(deadline)
        while True:
            try:
                meta = self.get_task_meta(result.id)
                break
            except REDIS_AWAY:
                if not outage.ride_out():
                    raise
        if meta.get("status") not in READY_STATES:
            return False
        result._maybe_set_cache(meta)
        return True

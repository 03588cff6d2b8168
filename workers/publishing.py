"""Publishing that survives a broker connection lost in the middle of a publish's queue declare.

kombu's `Producer._publish` takes its channel, then declares the message's queue (the first
publish to it on a connection, and again after every reconnect) under its own retry; when the
connection drops during that declare, the declare's retry closes the connection's channel,
reconnects and succeeds, and the publish goes on with the channel it took before: closed, so it
fails with an AttributeError (kombu 5.7; the channel's `connection` is None). The publish's own
retry policy never sees a connection error, so a step handed on while Redis restarts failed the
call with "'NoneType' object has no attribute 'client'" instead of waiting for Redis (seen when
Redis was restarted six times in 4 s under a stream of calls). Nothing was sent on the closed
channel, so reporting it as the connection error it is lets the retry reconnect and publish once.
Drop this module when a kombu release takes the channel after the declare.
"""

from __future__ import annotations

from typing import Any

from celery.app.amqp import AMQP
from kombu import Producer
from kombu.pools import ProducerPool
from redis.exceptions import ConnectionError as RedisConnectionError


# kombu's retry of a publish (reconnecting first): 0, 0.25, 0.5, 0.75 s, then every second, ~40 s
# in all: a message sent while Redis restarts waits for it. Celery's default gives up after 0.6 s.
PUBLISH_RETRY_POLICY = {"max_retries": 40, "interval_start": 0, "interval_step": 0.25, "interval_max": 1.0}


class ReconnectSafeProducer(Producer):
    """A kombu Producer whose publish reports a channel closed under it as a lost connection."""

    def _publish(self, *args: Any, **kwargs: Any) -> Any:
        channel = self.channel
        try:
            return super()._publish(*args, **kwargs)
        except AttributeError as exc:
            if getattr(channel, "connection", True) is None:  # closed by a reconnect inside this publish
                raise RedisConnectionError("the broker connection was re-established during this publish") from exc
            raise


class ReconnectSafeAMQP(AMQP):
    """Celery's AMQP with `ReconnectSafeProducer` for every publish (tasks, replaces, the client's
    calls): `Celery(..., amqp=ReconnectSafeAMQP)`."""

    Producer = ReconnectSafeProducer

    @property
    def producer_pool(self) -> ProducerPool:
        pool = super().producer_pool
        pool.Producer = ReconnectSafeProducer  # producers are created lazily, on first acquire
        return pool

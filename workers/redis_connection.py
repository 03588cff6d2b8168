"""How a process opens its Redis: the client options that ride out a restart, and the quick-failing
client of health checks.

Its own module so that opening a connection imports no store: the service client
(fittest/client.py) needs a connection for its calls in flight, not the state store or the
learner's window (`import fittest.client` loaded both while this lived in workers/state).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlparse, urlsplit

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (AuthenticationError, BusyLoadingError, InvalidResponse, OutOfMemoryError, ReadOnlyError,
                              RedisError, ResponseError)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from workers.settings import Settings

__all__ = ["CLOSES", "CONNECT_TIMEOUT_S", "HEALTH_CHECK_INTERVAL_S", "LOADING", "NOT_REDIS", "SLOW", "RETRIES", "SOCKET_TIMEOUT_S",
           "WRITE_REFUSALS", "probe_client", "redis_client", "redis_refusal", "write_refusal"]

SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
HEALTH_CHECK_INTERVAL_S = 30
RETRIES = 20  # ~30 s of backoff: a Redis restart is ridden out, not turned into failed calls
# What a Redis URL reaches when what answers there is no Redis, as every command and `fittest up` say it
NOT_REDIS = "a server of another protocol answers at that host and port"
# What `redis_refusal` says of a server that takes the connection and closes it at once: PostgreSQL
# does, and so does a proxy (docker-proxy, kubectl port-forward, haproxy) whose Redis is away
CLOSES = ("what answers at that host and port closes the connection at once: a server of another protocol "
          "(PostgreSQL), or a proxy whose Redis is away")
# What `redis_refusal` says of a Redis that answers, but is still reading its data set back
LOADING = "it is loading its data set into memory"
# ...and of what takes the connection but answers no PING in time (a Redis busy or slow to start)
SLOW = "it takes the connection but answers no PING in time"


def redis_client(settings: Settings, **overrides: Any) -> Redis:
    """A client for `settings.redis_url`.

    The URL carries the scheme (`redis://`, `rediss://` for TLS, `unix://`), the credentials
    (`redis://user:password@host:port/db`) and any redis-py option as a query parameter
    (`?ssl_cert_reqs=none`), which wins over the defaults here; a rediss:// URL gets the
    FITTEST_REDIS_TLS_* files. Connection and timeout errors are retried with exponential backoff
    (50 ms doubling, at most 2 s, 20 times: about 30 s); idle pooled connections are checked with
    PING after 30 s. `overrides` go to `redis.Redis.from_url`.
    """
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "retry": Retry(ExponentialBackoff(cap=2.0, base=0.05), RETRIES),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "client_name": "fittest",
        **settings.redis_tls(),
    }
    options.update(overrides)
    return Redis.from_url(settings.redis_url, **options)


CREDENTIALS = ("username", "password")


def without_credentials(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its user and password (given in the netloc or as query parameters), and them as
    redis-py's keyword arguments, which it takes where the URL names none. For a client configured
    in a setting that Celery's `inspect conf` shows as it is, in Flower's worker pages: redbeat's
    URL showed the Redis password there, where Celery masks the broker's (QA 61a-1)."""
    parts = urlsplit(url)
    credentials = {k: unquote(v) for k, v in (("username", parts.username), ("password", parts.password)) if v}
    query = parse_qsl(parts.query, keep_blank_values=True)
    credentials |= {k: v for k, v in query if k in CREDENTIALS and v}
    if not credentials:
        return url, {}
    host = parts.netloc.rpartition("@")[2]
    kept = urlencode([(k, v) for k, v in query if k not in CREDENTIALS])
    return f"{parts.scheme}://{host}{parts.path}{'?' + kept if kept else ''}", credentials


def probe_client(settings: Settings, timeout: float, retries: int = 0) -> Redis:
    """A client for checks that report a Redis that does not answer (`fittest health`, the CLI's
    check before a command): it fails within about `timeout`, a refused connection (a Redis starting
    up) retried `retries` times 0.1, 0.2, 0.4 s apart, instead of the ~30 s that ride out a restart.
    A timeout is not retried: a Redis that holds the connection without answering (stalled, or
    swapping) made each try wait `timeout` again (QA 50e: 10 s before `fittest tools` said so)."""
    return redis_client(settings, socket_timeout=timeout, socket_connect_timeout=timeout, health_check_interval=0,
                        retry=Retry(ExponentialBackoff(cap=0.4, base=0.1), retries, supported_errors=(RedisConnectionError,)),
                        retry_on_error=[RedisConnectionError])


def redis_refusal(url: str, timeout: float = 1.0, tls: dict[str, Any] | None = None) -> str | None:
    """Why Redis at `url` does not serve it: "" when nothing answers there, what a Redis that answers
    refuses (a password, a database out of range) otherwise; None when it answers PING. `fittest up`
    took a refusal for no Redis, and started a Redis of its own on another port (QA 50e), where
    every other command said what was wrong; a server of another protocol there (an HTTP port) is a
    refusal too (QA 57d L4). `tls`: redis-py's TLS arguments (Settings.redis_tls)."""
    try:
        Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, **(tls or {})).ping()
    except (AuthenticationError, ResponseError) as exc:
        said = str(exc) or type(exc).__name__
        # redis-py's handshake words a missing or wrong password as HELLO's rules (review 51)
        if isinstance(exc, AuthenticationError) or any(w in said for w in ("AUTH", "WRONGPASS", "HELLO")):
            return f"it needs a password, or another one: {said}"
        return said
    except InvalidResponse:
        return NOT_REDIS
    except BusyLoadingError:  # a Redis, restarted, reading its data back: it is no other server
        return LOADING
    except RedisConnectionError as exc:
        if "max number of clients" in str(exc) or url.startswith("rediss://"):  # a Redis's refusal, a TLS handshake's
            return str(exc)
        # A server that takes the connection and closes it (PostgreSQL, an MQTT broker) is no Redis
        # either (QA 58d N2), unless it is a proxy whose Redis is away (QA 59f F4); one that refuses
        # it is nothing at all.
        return CLOSES if _something_listens(url, timeout) else ""
    except RedisTimeoutError:
        # Taken, and no answer in time: a Redis too busy or slow to answer now, not nothing there
        # (QA 59e: `up` started a Redis of its own beside one that was loading slowly)
        return SLOW if _something_listens(url, timeout) else ""
    except (RedisError, OSError, ValueError):
        return ""
    except (AttributeError, TypeError):  # redis-py's reading of a greeting it did not expect (POP3's "+OK")
        return NOT_REDIS
    return None


def _something_listens(url: str, timeout: float) -> bool:
    """Whether a TCP connection to the URL's host and port is taken (not for a unix socket's URL)."""
    parts = urlparse(url)
    if parts.scheme == "unix":
        return False
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout):
            return True
    except (OSError, ValueError):
        return False


# What a Redis that answers but takes no write raises: past its maxmemory under `noeviction`, or a
# replica (read-only) after a failover
WRITE_REFUSALS = (OutOfMemoryError, ReadOnlyError)


def write_refusal(client: Redis, key: str) -> RedisError | None:
    """Why Redis refuses writes (WRITE_REFUSALS), tried with `key` kept a second; None when it takes
    the write. The one probe the beat, a call's step and health ask (QA 59f F11: three copies)."""
    try:
        client.set(key, 1, px=1000)
    except WRITE_REFUSALS as exc:
        return exc
    return None

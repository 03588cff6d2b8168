"""Whether an exception means that the embedder or the vector memory is unavailable.

Every part that reads or writes the vector memory goes on without it (selection ranks by the
Redis scores alone, feedback and execution records wait for the next try), and every one of them
must tell such an outage from a bug, which is never hidden, and from a Redis failure, which is not
optional and propagates.
"""

from __future__ import annotations

from redis.exceptions import RedisError

# Exceptions that mean a bug in fittest rather than an unavailable store: never hidden by degrading.
_BUGS = (ValueError, TypeError, KeyError, IndexError, AttributeError, AssertionError, NameError)


def is_store_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised by the embedder or the vector memory, means that they are unavailable
    (connection, I/O, the engine, a model that cannot load) rather than a bug or a Redis failure."""
    return isinstance(exc, Exception) and not isinstance(exc, (RedisError, *_BUGS))

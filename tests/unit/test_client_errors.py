"""How the typed client names Redis being away (no service involved: the errors as Celery,
kombu and redis-py raise them)."""

from __future__ import annotations

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError

from fittest.client import CallTimeout, FittestUnavailable
from workers.client import reaching, timed_out_as

URL = "redis://:secret@redis.internal:6379/0"


@pytest.mark.parametrize("raised", [
    RedisConnectionError("Error 111 connecting to redis.internal:6379. Connection refused."),
    OperationalError("Error 111 connecting to redis.internal:6379. Connection refused."),
])
def test_redis_away_is_fittest_unavailable_naming_what_was_done_and_not_the_password(raised: Exception) -> None:
    with pytest.raises(FittestUnavailable, match="^waiting for call c1: .*redis.internal:6379") as caught:
        with reaching(URL, "waiting for call c1"):
            raise raised
    assert isinstance(caught.value, ConnectionError) and "secret" not in str(caught.value)


def test_a_wait_that_timed_out_is_a_call_timeout_naming_the_call() -> None:
    """Callers catch it as celery's TimeoutError (as before) or the builtin one (QA new user)."""
    with pytest.raises(CallTimeout, match="no result for call c1 within 5 s") as caught:
        with timed_out_as("c1", 5.0):
            raise CeleryTimeoutError("The operation timed out.")
    assert isinstance(caught.value, CeleryTimeoutError) and isinstance(caught.value, TimeoutError)
    assert caught.value.call_id == "c1"


def test_other_errors_pass_through() -> None:
    with pytest.raises(RuntimeError, match="something else"):
        with reaching(URL, "sending the call"):
            raise RuntimeError("something else")


@pytest.mark.parametrize(("raised", "said"), [
    (OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), "Redis at redis://:**@redis.internal:6379/0 refuses writes (past its maxmemory)"),
    (OperationalError("[Errno 24] Too many open files"), "Redis at redis://:**@redis.internal:6379/0 cannot be opened: this process is out of file descriptors"),
])
def test_a_redis_that_refuses_writes_and_a_process_out_of_files_are_not_called_unreachable(raised: Exception, said: str) -> None:
    """QA Q: both read "Redis ... cannot be reached", while Redis answered."""
    with pytest.raises(FittestUnavailable) as caught:
        with reaching(URL, "sending the call"):
            raise raised
    assert str(caught.value).startswith(f"sending the call: {said}") and "cannot be reached" not in str(caught.value)


def test_the_cli_names_a_redis_past_its_maxmemory_rather_than_one_that_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA Q: `fittest call` said "Redis does not answer ... Is it running?" of a Redis that refused writes."""
    from workers.cli import operator_error

    monkeypatch.setenv("FITTEST_REDIS_URL", URL)
    said = operator_error(OperationalError("OOM command not allowed when used memory > 'maxmemory'."))
    assert said is not None and said.startswith("Redis refuses writes (past its maxmemory)") and "Is it running" not in said
    assert "secret" not in said
    said = operator_error(OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
    assert said is not None and said.startswith("Redis refuses writes")

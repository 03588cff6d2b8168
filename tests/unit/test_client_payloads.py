"""What the typed client sends (no broker: `send` is replaced by a recorder)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from pydantic import ValidationError

from fittest.client import FittestClient
from tests.conftest import RedisServer


class Recorded(Exception):
    pass


@pytest.fixture()
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []

    def send(self: FittestClient, task: str, *, queue: str = "selection", **kwargs: Any) -> Any:
        calls.append((task, kwargs))
        raise Recorded

    monkeypatch.setattr(FittestClient, "send", send)
    return calls


@pytest.mark.parametrize(("submit", "name"), [("submit", "parse csv"), ("submit_tool", "csv_lenient")])
def test_the_client_refuses_a_bad_payload_before_sending(sent: list[tuple[str, dict[str, Any]]], submit: str,
                                                         name: str) -> None:
    """Refused in the caller, with nothing sent (and so nothing recorded as in flight): `send` is
    the only way out, and here it records what it is given."""
    client = FittestClient("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(ValidationError, match="max_attempts"):
            getattr(client, submit)(name, input={}, max_attempts=0)
        assert sent == []
    finally:
        client.close()


def test_submit_tool_sends_the_call_fields_it_is_given(sent: list[tuple[str, dict[str, Any]]]) -> None:
    """QA I: run_tool(name, input, call_id=..., context=..., tags=..., max_attempts=...) sent only name
    and input: the result came back under another call id, and the other fields were ignored."""
    client = FittestClient("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(Recorded):
            client.submit_tool("vat_price", {"amount": 5}, call_id="order-42", context={"language": "python"},
                               tags=["money"], max_attempts=2)
        task, kwargs = sent[0]
        assert task == "call_tool"
        assert kwargs == {"name": "vat_price", "input": {"amount": 5}, "call_id": "order-42",
                          "context": {"language": "python"}, "tags": ["money"], "max_attempts": 2}
        with pytest.raises(ValidationError, match="priority"):  # refused here, as the worker would
            client.submit_tool("vat_price", {"amount": 5}, priority=3)
        assert len(sent) == 1
    finally:
        client.close()


@pytest.mark.parametrize("submit", ["submit", "submit_tool"])
def test_an_input_larger_than_the_limit_is_refused_before_it_is_sent(sent: list[tuple[str, dict[str, Any]]],
                                                                     submit: str) -> None:
    """QA I: a 3 MB input went through Redis for the selection worker to refuse it."""
    client = FittestClient("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(ValueError, match="input: input is 2,000,012 bytes of JSON; the limit is"):
            getattr(client, submit)("word_stats", {"text": "x" * 2_000_000})
        assert sent == []
    finally:
        client.close()


def test_record_feedback_takes_name_at_version_as_the_cli_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA AC: record_feedback("word_stats@1.0.0", ...) was refused ("no tool named 'word_stats@1.0.0'"),
    where `fittest feedback add word_stats@1.0.0` judges that version."""
    asked: list[dict[str, Any]] = []

    def ask_within(self: FittestClient, task: str, timeout: float, *, queue: str, **kwargs: Any) -> dict[str, Any]:
        asked.append(kwargs)
        return {"status": "recorded", "score_now": 10.0, "feedback": {k: kwargs[k] for k in ("tool", "version", "scenario")} | {"value": 1.0}}

    monkeypatch.setattr(FittestClient, "ask_within", ask_within)
    client = FittestClient("redis://127.0.0.1:1/0")
    try:
        recorded = client.record_feedback("word_stats@1.0.0", "positive", scenario="count the words")
        assert (recorded.feedback.key, recorded.score_now) == ("word_stats@1.0.0", 10.0)
        client.record_feedback("word_stats@1.0.0", "positive", version="1.0.0", scenario="count the words")
        # QA AD: two versions were refused as "no tool version 'word_stats@1.0.0@2.0.0'"
        with pytest.raises(ValueError, match="^version: given twice, as 'word_stats@1.0.0' and version='2.0.0'"):
            client.record_feedback("word_stats@1.0.0", "positive", version="2.0.0")
    finally:
        client.close()
    assert [(a["tool"], a["version"]) for a in asked] == [("word_stats", "1.0.0")] * 2


def test_the_client_keys_its_records_under_the_workers_prefix_when_given_one(private_redis: RedisServer) -> None:
    """QA integration M2: a client left at the default prefix told `UnknownCall` of a running call of
    a stack with its own FITTEST_KEY_PREFIX; the prefix is where it records and looks calls up."""
    client = FittestClient(private_redis.url, key_prefix="team:")
    try:
        pending = client.submit("convert 3 km to miles", {"value": 3})
    finally:
        client.close()  # flushes the record of the call sent
    keys: set[str] = {k.decode() for k in redis.Redis.from_url(private_redis.url).keys("*")}  # type: ignore[union-attr]
    state = {k for k in keys if ":" in k and not k.startswith("_kombu")}  # not Celery's queue and bindings
    assert f"team:call_job:{pending.id}" in state and "team:inflight:steps" in state
    assert all(k.startswith("team:") for k in state), state


def test_a_call_tool_with_another_namespace_than_its_name_is_refused(sent: list[tuple[str, dict[str, Any]]]) -> None:
    """QA integration L6: `namespace` other than `name` was dropped without a word (the workers
    check the payload with the same model)."""
    client = FittestClient("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(ValidationError, match="namespace\n.*is the tool's name here, given as 'x' beside name 'reverse_text'"):
            client.submit_tool("reverse_text", input={"text": "ab"}, namespace="x")
        assert sent == []
        with pytest.raises(Recorded):
            client.submit_tool("reverse_text", input={"text": "ab"}, namespace="reverse_text")
        assert sent[0][1]["name"] == "reverse_text"
    finally:
        client.close()


@pytest.mark.parametrize(("timeout", "error", "message"), [
    ("5", TypeError, "timeout: give seconds as a number"), (float("nan"), ValueError, "timeout: not a number"),
    (True, TypeError, "timeout: give seconds as a number"),
])
@pytest.mark.parametrize("run", ["run", "run_tool"])
def test_a_bad_timeout_is_refused_before_the_call_is_sent(sent: list[tuple[str, dict[str, Any]]], run: str, timeout: Any,
                                                          error: type[Exception], message: str) -> None:
    """QA 52a M1: `run(..., timeout="5")` sent the call, its tool ran, and then the caller was
    told TypeError, with no call id to wait on; `timeout=None` waits for ever."""
    client = FittestClient("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(error, match=message):
            getattr(client, run)("csv_lenient", input={}, timeout=timeout)
        assert sent == []
        with pytest.raises(Recorded):  # None is a timeout: the call goes out
            getattr(client, run)("csv_lenient", input={}, timeout=None)
        assert len(sent) == 1
    finally:
        client.close()


@pytest.mark.parametrize(("name", "options", "field"), [
    ("No Such", {}, "name"), ("slugify", {"version": "latest"}, "version"), ("slugify@", {}, "names no version"),
    ("slugify@1.0.0", {"version": "2.0.0"}, "names version 1.0.0, and version '2.0.0' another"),
])
def test_run_tool_refuses_a_bad_name_or_version_before_sending(sent: list[tuple[str, dict[str, Any]]], name: str,
                                                               options: dict[str, Any], field: str) -> None:
    """QA 52a L2: these were sent, and came back invalid naming `namespace`, a field the caller never gave."""
    client = FittestClient("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(ValidationError, match=field):
            client.submit_tool(name, input={}, **options)
        assert sent == []
        with pytest.raises(Recorded):  # NAME@VERSION names that version, as record_feedback's tool does
            client.submit_tool("slugify@1.0.0", input={})
        assert [(task, kwargs["name"], kwargs["version"]) for task, kwargs in sent] == [("call_tool", "slugify", "1.0.0")]
    finally:
        client.close()


def test_a_url_that_is_no_redis_url_or_a_database_redis_lacks_is_named_as_such() -> None:
    """QA 52a L8: "127.0.0.1:6521" was taken, and failed at the first call with redis-py's words; a
    database number Redis lacks was told as a Redis that cannot be reached."""
    from redis.exceptions import ResponseError

    from workers.client import refusal

    with pytest.raises(ValidationError, match="'127.0.0.1:6521' is not a Redis URL"):
        FittestClient("127.0.0.1:6521")
    assert "no database of the number the URL ends with" in (refusal(ResponseError("DB index is out of range")) or "")

"""A batch of outcomes or execution records that meets Redis restarting is run again once Redis
answers, not lost: celery-batches acknowledges a batch's messages whether it succeeded or raised.

The batched tasks run here as the worker's pool runs them (the task called with its requests), on
the private Redis, with Redis refusing a few operations the way a restart does."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery_batches import SimpleRequest
from kombu.exceptions import OperationalError

from selection.models import OutcomeRecord, ToolExecutionResult
from tests.integration.conftest import runtime_in_use
from workers.state.learning import LearningState


def request(i: int, payload: Any) -> SimpleRequest:
    return SimpleRequest(id=f"r{i}", name="batch", args=(payload,), kwargs={}, delivery_info={}, hostname="h",
                         ignore_result=True, reply_to=None, correlation_id=None, request_dict={})


def refusing(times: int, exc: Exception, real: Any) -> tuple[Any, list[int]]:
    """`real`, raising `exc` on its first `times` calls, as while Redis restarts."""
    refused: list[int] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if len(refused) < times:
            refused.append(1)
            raise exc
        return real(*args, **kwargs)

    return call, refused


@pytest.fixture
def rt(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator:
    import workers.runtime
    from workers.runtime import Runtime
    from workers.settings import get_settings

    runtime = Runtime(get_settings())
    monkeypatch.setattr(workers.runtime, "_runtime", runtime)  # what the tasks call runtime()
    with runtime_in_use(runtime):
        yield runtime


def outcome(n: int) -> dict[str, Any]:
    attempt = ToolExecutionResult(attempt_id=f"call{n}:0", call_id=f"call{n}", tool="sort_numbers", version="1.0.0",
                                  success=True)
    return OutcomeRecord(call_id=f"call{n}", scenario="sort these numbers", attempts=[attempt]).model_dump(mode="json")


def test_learn_batch_refused_by_redis_stores_every_record_once_it_answers(rt, monkeypatch, caplog) -> None:
    from workers.tasks.learning import learn

    records = [{"attempt_id": f"c{n}:0", "call_id": f"c{n}", "tool": "sort_numbers", "version": "1.0.0",
                "scenario": f"sort list {n}", "success": n % 2 == 0} for n in range(6)]
    push, refused = refusing(3, redis.ConnectionError("Error 111 connecting to Redis. Connection refused."),
                             LearningState.push)
    monkeypatch.setattr(LearningState, "push", push)
    with caplog.at_level(logging.WARNING, logger="fittest.tasks"):
        stored = learn([request(0, records[:4]), request(1, records[4:])])
    assert (stored, len(refused)) == (6, 3)
    assert sorted(r.call_id for r in rt.learning.recent()) == [f"c{n}" for n in range(6)]
    assert [r.getMessage() for r in caplog.records].count(
        "fittest.learn: Redis unavailable (ConnectionError: Error 111 connecting to Redis. Connection refused.); "
        "the batch runs again") == 3


def test_outcome_batch_whose_learn_message_cannot_be_sent_is_applied_once_and_sent_once(rt, monkeypatch) -> None:
    import workers.tasks.learning
    from workers.tasks.feedback import record_outcome

    sent: list[list[str]] = []
    send, refused = refusing(2, OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
                             lambda records: sent.append([r.call_id for r in records]))
    monkeypatch.setattr(workers.tasks.learning, "send_learn", send)
    applied = record_outcome([request(0, outcome(0)), request(1, outcome(1))])
    assert (applied, len(refused), sent) == (2, 2, [["call0", "call1"]])
    # Each run of the batch applied the successes again; the attempt ids kept them counted once.
    assert rt.state.stats(["sort_numbers@1.0.0"])["sort_numbers@1.0.0"].successes == 2


def test_a_bug_in_a_batch_is_raised_at_once_not_retried(rt, monkeypatch) -> None:
    from workers.tasks.learning import learn

    push, refused = refusing(10, TypeError("a bug"), LearningState.push)
    monkeypatch.setattr(LearningState, "push", push)
    with pytest.raises(TypeError, match="a bug"):
        learn([request(0, {"attempt_id": "c0:0", "call_id": "c0", "tool": "t", "version": "1.0.0", "scenario": "s",
                           "success": True})])
    assert len(refused) == 1


def test_a_batch_gives_up_once_redis_stays_away_past_the_retry_window(rt, monkeypatch) -> None:
    import workers.tasks.batches
    from workers.tasks.learning import learn

    monkeypatch.setattr(workers.tasks.batches, "UNAVAILABLE_RETRY_S", 1.0)
    # The model and the store open before the window starts: the first run of the batch would
    # otherwise spend it loading them (a clean clone's make test once saw one run, not two).
    rt.embedder.embed_one("s")
    assert rt.memory is not None
    push, refused = refusing(10_000, redis.ConnectionError("Connection refused."), LearningState.push)
    monkeypatch.setattr(LearningState, "push", push)
    with pytest.raises(redis.ConnectionError):
        learn([request(0, {"attempt_id": "c0:0", "call_id": "c0", "tool": "t", "version": "1.0.0", "scenario": "s",
                           "success": True})])
    assert 2 <= len(refused) < 100

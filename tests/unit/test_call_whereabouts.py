"""What `fittest call` says of a call with no result in time: held by a worker, or still queued."""

from __future__ import annotations

import json

import redis

from tests.conftest import RedisServer
from workers.cli.calls import _still_running
from workers.client import CallSender
from workers.metrics import UNACKED_KEY, queue_key
from workers.settings import Settings
from workers.state.inflight import HandedOnStep


def test_a_step_no_worker_took_is_said_to_wait_in_its_queue_not_to_run(private_redis: RedisServer) -> None:
    """QA resilience: "it is running a tool (fittest.execute)" with no executor alive, the step queued."""
    sender = CallSender(Settings(redis_url=private_redis.url, key_prefix="w:"))
    sender._inflight.handed_on(HandedOnStep(task_id="c1", task="fittest.execute", args=[{}, 0]), due_in_s=60.0)
    # QA 48 recheck: a step a worker took as it died (a tool killed it) was said to wait in its queue
    assert _still_running(sender, "c1") == (
        "it is neither in its queue nor held by a worker: one that died took it before it was recorded, and the "
        "rescue sweep sends it again once it is overdue (FITTEST_VISIBILITY_TIMEOUT_S after it was handed on) "
        "(fittest.execute) and goes on; `fittest result c1` shows it when it ends")
    message = {"headers": {"id": "c1", "task": "fittest.execute"}}
    client = redis.Redis.from_url(private_redis.url)
    client.lpush(queue_key("execution", 0), json.dumps(message))  # as kombu queues a message
    assert _still_running(sender, "c1") == (
        "it is waiting in its queue: no worker has taken it yet (`fittest health` says whether one runs) "
        "(fittest.execute) and goes on; `fittest result c1` shows it when it ends")
    client.delete(queue_key("execution", 0))
    held = [message, "execution", "execution"]
    redis.Redis.from_url(private_redis.url).hset(UNACKED_KEY, "tag-1", json.dumps(held))  # as kombu holds a delivered message
    assert _still_running(sender, "c1") == ("it is running a tool (fittest.execute) and goes on; "
                                            "`fittest result c1` shows it when it ends")
    sender.celery.close()


def test_a_call_whose_wait_loses_redis_is_named_so_its_result_can_be_found(private_redis: RedisServer, monkeypatch) -> None:
    """QA recheck: `fittest call` during a Redis outage said only "Redis does not answer"; the call,
    sent already, went on and succeeded, and nothing named it."""
    import io

    import pytest
    import typer
    from rich.console import Console

    from workers.cli import common
    from workers.cli.calls import show_when_done

    said = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=said, width=400))
    sender = CallSender(Settings(redis_url=private_redis.url, key_prefix="w:"))
    pending = sender.celery.AsyncResult("c2")
    private_redis.proc.terminate()
    private_redis.proc.wait(timeout=10)
    with pytest.raises(typer.Exit) as ended:
        show_when_done(sender, pending, 60.0, False, "unfinished")
    assert ended.value.exit_code == 1
    assert said.getvalue().startswith("error: waiting for call c2: Redis does not answer (")
    assert "the call goes on, and `fittest result c2` shows it once Redis answers" in said.getvalue()


def test_a_revoked_call_a_raised_task_and_another_tasks_id_each_end_with_one_line(private_redis: RedisServer, monkeypatch,
                                                                                  capsys) -> None:
    """QA: `fittest result` of a call revoked from Flower printed a Python traceback (and nothing on
    stdout with --json), as did one whose task raised; a judgement's id was said to be of another
    release."""
    import io

    import pytest
    import typer
    from rich.console import Console

    from workers.cli import common
    from workers.cli.calls import show_when_done

    said = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=said, width=400))
    sender = CallSender(Settings(redis_url=private_redis.url, key_prefix="w:"))
    backend = sender.celery.backend
    backend.mark_as_revoked("revoked-1")
    backend.mark_as_revoked("expired-1", reason="expired")  # as a worker marks what it took too late
    backend.mark_as_failure("raised-1", RuntimeError("boom"))
    backend.store_result("judgement-1", {"status": "recorded", "errors": []}, "SUCCESS")
    backend.store_result("explain-1", {"call_id": "made-by-explain", "status": "success", "message": "ranking only; nothing was run",
                                       "context": {}, "cache_ttl_s": 30.0}, "SUCCESS")  # QA recheck N1: read as a success
    backend.store_result("later-1", {"call_id": "later-1", "status": "paused"}, "SUCCESS")  # a later release's
    ended = {}
    for task_id in ("revoked-1", "expired-1", "raised-1", "judgement-1", "explain-1", "later-1"):
        with pytest.raises(typer.Exit) as stop:
            show_when_done(sender, sender.celery.AsyncResult(task_id), 5.0, True, "unfinished")
        ended[task_id] = (stop.value.exit_code, capsys.readouterr().out)
    sender.celery.close()
    lines = said.getvalue().splitlines()
    assert lines == [
        "error: call revoked-1 was revoked (by its sender, from Flower or with `celery control revoke`): it has no result",
        "error: task expired-1 expired before a worker took it (its sender waited no longer): nothing ran, and it has no result",
        "error: call raised-1 ended with an error in its worker, not with a result: RuntimeError: boom",
        "error: judgement-1 is not a call's id: what is stored under it is another task's answer (a judgement, an explain, a retrain…)",
        "error: explain-1 is not a call's id: what is stored under it is another task's answer (a judgement, an explain, a retrain…)",
        "error: call later-1: the workers' answer does not read as CallResult (1 field(s): status: Input should be 'success', "
        "'failed', 'invalid' or 'no_candidates'): are this client and the workers the same release?",
    ]
    assert [code for code, _ in ended.values()] == [1, 1, 1, 1, 1, 3]  # 3: told from a call that did not succeed
    assert json.loads(ended["later-1"][1]) == {"call_id": "later-1", "status": "paused"}  # as it came
    assert json.loads(ended["revoked-1"][1]) == {"call_id": "revoked-1", "status": "revoked", "message": lines[0][len("error: "):]}
    assert json.loads(ended["raised-1"][1])["status"] == "error"
    assert json.loads(ended["expired-1"][1])["status"] == "expired"
    assert [json.loads(ended[i][1])["status"] for i in ("judgement-1", "explain-1")] == ["not_a_call"] * 2


def test_the_client_raises_unreadable_answer_holding_an_answer_of_another_release(private_redis: RedisServer) -> None:
    """QA: pydantic's bare ValidationError, a ValueError as a bad payload's is, named neither the
    call nor the cause."""
    import pytest

    from fittest.client import FittestClient, NotACall, UnreadableAnswer

    client = FittestClient(settings=Settings(redis_url=private_redis.url, key_prefix="w:"))
    answer = {"call_id": "later-1", "status": "paused", "attempts": []}
    client.celery.backend.store_result("later-1", answer, "SUCCESS")
    with pytest.raises(UnreadableAnswer) as unread:
        client.result("later-1", timeout=5.0)
    client.celery.backend.store_result("judgement-1", {"status": "recorded", "errors": []}, "SUCCESS")
    with pytest.raises(NotACall) as judged:
        client.result("judgement-1", timeout=5.0)
    client.celery.close()
    assert unread.value.answer == answer and unread.value.call_id == "later-1"
    assert str(judged.value) == ("judgement-1 is not a call's id: what is stored under it is another task's answer "
                                 "(a judgement, an explain, a retrain…)")  # QA recheck N2: "another release"
    assert str(unread.value).startswith("call later-1: the workers' answer does not read as CallResult (1 field(s): status: ")


def test_the_clients_timeout_says_where_the_call_is(private_redis: RedisServer) -> None:
    """QA 52a L6: the client's CallTimeout said only that the call goes on, and a call waiting for a
    worker that does not run read as one whose tool is slow."""
    import pytest

    from fittest.client import CallTimeout, FittestClient

    client = FittestClient(private_redis.url)
    try:
        pending = client.submit("sort these numbers", {"numbers": [2, 1]})  # no worker: it stays queued
        with pytest.raises(CallTimeout) as raised:
            client.result(pending, timeout=0.5)
        assert raised.value.where == "it is waiting for a selection worker (fittest.resilient_tool_call)"
        assert str(raised.value) == (f"no result for call {pending.id} within 0.5 s: it is waiting for a selection "
                                     f"worker (fittest.resilient_tool_call); it goes on, and result('{pending.id}') "
                                     f"or `fittest result {pending.id}` gets it later")
    finally:
        client.close()


def test_a_call_that_redis_lost_is_told_unknown_at_the_next_look_not_at_the_timeout(private_redis: RedisServer) -> None:
    """QA 54: Redis restarted without its data took the call's message and record with it, and 24
    of 30 `result()` calls waited out their 150 s timeout before they said UnknownCall."""
    import threading
    import time

    import pytest

    from fittest.client import FittestClient, UnknownCall

    client = FittestClient(private_redis.url)
    lose = threading.Timer(5.0, lambda: redis.Redis.from_url(private_redis.url).flushall())  # after the first look
    try:
        pending = client.submit("sort these numbers", {"numbers": [2, 1]})  # no worker: it stays queued
        lose.start()
        started = time.monotonic()
        with pytest.raises(UnknownCall, match=f"no result for call {pending.id}: no call with this id is queued"):
            client.result(pending, timeout=120)
        assert 5.0 <= time.monotonic() - started < 60  # at a look after the loss (one each 10 s), not at 120 s
    finally:
        lose.cancel()
        client.close()

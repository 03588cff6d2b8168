"""What `fittest call` says of a call with no result in time: held by a worker, or still queued."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from tests.conftest import start_redis
from workers.cli.calls import _still_running
from workers.client import CallSender
from workers.metrics import UNACKED_KEY
from workers.settings import Settings
from workers.state.inflight import HandedOnStep


def test_a_step_no_worker_took_is_said_to_wait_in_its_queue_not_to_run(tmp_path: Path) -> None:
    """QA resilience: "it is running a tool (fittest.execute)" with no executor alive, the step queued."""
    proc, url = start_redis(tmp_path / "redis")
    try:
        sender = CallSender(Settings(redis_url=url, key_prefix="w:"))
        sender._inflight.handed_on(HandedOnStep(task_id="c1", task="fittest.execute", args=[{}, 0]), due_in_s=60.0)
        assert _still_running(sender, "c1") == (
            "it is waiting in its queue: no worker has taken it yet (`fittest health` says whether one runs) "
            "(fittest.execute) and goes on; `fittest result c1` shows it when it ends")
        held = [{"headers": {"id": "c1", "task": "fittest.execute"}}, "execution", "execution"]
        redis.Redis.from_url(url).hset(UNACKED_KEY, "tag-1", json.dumps(held))  # as kombu holds a delivered message
        assert _still_running(sender, "c1") == ("it is running a tool (fittest.execute) and goes on; "
                                                "`fittest result c1` shows it when it ends")
        sender.celery.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_call_whose_wait_loses_redis_is_named_so_its_result_can_be_found(tmp_path: Path, monkeypatch) -> None:
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
    proc, url = start_redis(tmp_path / "redis")
    sender = CallSender(Settings(redis_url=url, key_prefix="w:"))
    pending = sender.celery.AsyncResult("c2")
    proc.terminate()
    proc.wait(timeout=10)
    with pytest.raises(typer.Exit) as ended:
        show_when_done(sender, pending, 60.0, False, "unfinished")
    assert ended.value.exit_code == 1
    assert said.getvalue().startswith("error: waiting for call c2: Redis does not answer (")
    assert "the call goes on, and `fittest result c2` shows it once Redis answers" in said.getvalue()

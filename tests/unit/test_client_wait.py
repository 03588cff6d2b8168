"""`FittestClient.wait` on a result it already holds: the chaos bench waits again, through the same
handle, for calls whose result an earlier wait fetched and cut off its backend (`detach`)."""

from __future__ import annotations

from celery import Celery
from celery.result import AsyncResult

from workers.client import FittestClient


def test_a_result_fetched_and_detached_before_is_returned_from_what_it_holds() -> None:
    app = Celery("t", backend="cache+memory://")
    try:
        held = AsyncResult("call-1", app=app)
        held._cache = {"task_id": "call-1", "status": "SUCCESS", "result": {"status": "success"}, "children": []}
        held.backend = None  # as detach() leaves it
        assert FittestClient.wait(held, timeout=1) == {"status": "success"}
    finally:
        app.close()

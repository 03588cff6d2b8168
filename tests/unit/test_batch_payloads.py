"""A batch of `fittest.record_outcome` or `fittest.learn` messages: every valid payload is kept, in
order, whatever else the batch holds."""

from __future__ import annotations

import logging
from typing import Any

from celery_batches import SimpleRequest

from selection.learner import ExecutionRecord
from workers.tasks.refusals import batch_payloads


def request(i: int, *args: Any, **kwargs: Any) -> SimpleRequest:
    return SimpleRequest(id=f"r{i}", name="fittest.learn", args=args, kwargs=kwargs, delivery_info={}, hostname="h",
                         ignore_result=True, reply_to=None, correlation_id=None, request_dict={})


def record(n: int) -> dict[str, Any]:
    return {"attempt_id": f"c{n}:0", "call_id": f"c{n}", "tool": "t", "version": "1.0.0", "scenario": "s",
            "success": True}


def test_a_bad_payload_is_dropped_and_named_and_the_rest_of_the_batch_is_kept(caplog) -> None:
    requests = [
        request(0, record(0)),  # one record per message
        request(1, [record(1), {"call_id": "no attempt id"}, record(2)]),  # a list: each item on its own
        request(2, "not a record"),
        request(3, **record(3)),  # sent as keyword arguments
    ]
    with caplog.at_level(logging.ERROR, logger="fittest.tasks"):
        records = batch_payloads(requests, ExecutionRecord, "fittest.learn")
    assert [r.call_id for r in records] == ["c0", "c1", "c2", "c3"]
    dropped = [r for r in caplog.records if r.getMessage().startswith("fittest.learn dropped an invalid payload")]
    assert [r.task_id for r in dropped] == ["r1", "r2"]
    assert "attempt_id" in dropped[0].getMessage()

"""The throughput bench's baseline: three chained no-op tasks shaped like one fittest call.

hop1 (selection queue) replaces itself with hop2 (execution queue), which sends hop3 to the
feedback queue and returns; the caller waits on hop1's id. That is the Celery work of a call
that succeeds at its first attempt (resilient_tool_call → execute → record_outcome), without the
selection, the tool and the bookkeeping. Workers load this module only when the bench starts them
(`celery worker -I workers.bench.baseline`); the names stay outside `fittest.*`, whose tasks are
the product's (each routed by workers/app.py).
"""

from __future__ import annotations

from typing import Any

from celery import Task

from workers.app import PRIORITY_LOW, app

HOP1 = "bench.hop1"


@app.task(bind=True, name=HOP1)
def hop1(self: Task, payload: dict[str, Any]) -> Any:
    return self.replace(hop2.si(payload).set(queue="execution"))


@app.task(name="bench.hop2")
def hop2(payload: dict[str, Any]) -> dict[str, Any]:
    hop3.apply_async(args=[payload], queue="feedback", priority=PRIORITY_LOW)
    return payload


@app.task(name="bench.hop3")
def hop3(payload: dict[str, Any]) -> None:
    return None

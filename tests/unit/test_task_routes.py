"""Every fittest task is named and routed to its queue, so Flower and the metrics can tell them apart
and no task lands on the default queue by accident."""

from __future__ import annotations

import sys

from workers.app import QUEUES, TASK_ROUTES, app


def test_every_registered_fittest_task_has_a_route_to_a_known_queue() -> None:
    app.loader.import_default_modules()
    names = {n for n in app.tasks if n.startswith("fittest.")}
    assert {"fittest.resilient_tool_call", "fittest.call_tool", "fittest.execute", "fittest.record_outcome"} <= names
    assert sorted(names - set(TASK_ROUTES)) == []
    assert {route["queue"] for route in TASK_ROUTES.values()} <= set(QUEUES)


def test_the_stack_starts_every_worker_role_of_the_procfile_as_the_procfile_writes_it() -> None:
    from honcho.environ import parse_procfile

    from workers.bench.chaos import ROLES as CHAOS_ROLES
    from workers.bench.evolution import ROLES as EVOLUTION_ROLES
    from workers.bench.throughput import ROLES as THROUGHPUT_ROLES
    from workers.demo import DEMO_ROLES
    from workers.health import ROLES as HEALTH_ROLES
    from workers.stack import PROCFILE, worker_roles

    lines = parse_procfile(PROCFILE.read_text()).processes
    roles = worker_roles()
    assert sorted(roles) == sorted(name for name, line in lines.items() if line.startswith("celery -A workers.app worker "))
    for name, role in roles.items():
        # Run by this interpreter, without the shell honcho gives the Procfile's lines: a variable
        # in a worker line would reach celery unexpanded (review: the check that stood here was
        # the implementation's own expression).
        assert role.command[:3] == [sys.executable, "-m", "celery"] and "$" not in lines[name], name
        assert "-Q" in role.command and any(w.startswith("--hostname=") or w == "-n" for w in role.command), name
    # The roles the demo, the benches and the health check name are worker roles of the Procfile.
    assert {*DEMO_ROLES, *HEALTH_ROLES, *CHAOS_ROLES, *EVOLUTION_ROLES, *THROUGHPUT_ROLES} <= set(roles)
    # Every queue has a worker role that consumes it.
    consumed = {q for role in roles.values() for q in role.command[role.command.index("-Q") + 1].split(",")}
    assert consumed == set(QUEUES)

"""`fittest health`'s workers check: a role is up when the queues it serves are consumed."""

from __future__ import annotations

import shlex

from honcho.environ import parse_procfile

from workers.app import QUEUES
from workers.health import ROLE_QUEUES, WorkerHealth, check_workers
from workers.stack import PROCFILE

ROLES = ["memory", "executor", "evolver"]


def answers(**nodes: str) -> dict[str, WorkerHealth]:
    """node name (with `_at_` for `@`) -> its comma-separated queues."""
    return {node.replace("_at_", "@"): WorkerHealth(queues=queues.split(",") if queues else []) for node, queues in nodes.items()}


def test_the_procfile_gives_each_role_the_queues_health_expects_of_it() -> None:
    procfile = parse_procfile(PROCFILE.read_text()).processes
    for role, queues in ROLE_QUEUES.items():
        words = shlex.split(procfile[role])
        assert tuple(sorted(words[words.index("-Q") + 1].split(","))) == tuple(sorted(queues)), role
    assert sorted(q for queues in ROLE_QUEUES.values() for q in queues) == sorted(QUEUES)  # every queue has a role


def test_every_role_up_is_ok_and_names_each_node_with_its_queues() -> None:
    check = check_workers(answers(memory_at_a="selection,feedback,learning", executor_at_a="execution",
                                  evolver_at_a="evolution"), ROLES)
    assert check.status == "ok", check
    assert "executor@a (execution)" in check.detail and "memory@a (selection,feedback,learning)" in check.detail


def test_a_memory_worker_without_the_feedback_queue_fails_naming_it() -> None:
    """QA 61c-3: it answered, so health said ok, while every judgement and outcome waited."""
    check = check_workers(answers(memory_at_a="selection,learning", executor_at_a="execution", evolver_at_a="evolution"),
                          ROLES)
    assert check.status == "fail"
    assert check.detail.startswith("no worker consumes the feedback queue of memory (memory@a answered without it)"), check


def test_a_role_whose_queue_another_worker_consumes_is_up() -> None:
    """QA 61c-3: one executor consuming the evolution queue as well was "no answer from evolver"."""
    check = check_workers(answers(memory_at_a="selection,feedback,learning", executor_at_a="execution,evolution"), ROLES)
    assert check.status == "ok", check


def test_a_role_nobody_serves_and_a_node_that_did_not_answer_are_named() -> None:
    check = check_workers(answers(memory_at_a="selection,feedback,learning", evolver_at_a="evolution"),
                          ["memory", "executor", "evolver", "executor@b"], asked_only=None)
    assert check.status == "fail"
    assert "no answer from executor (no worker consumes its queue execution)" in check.detail
    assert "no answer from executor@b" in check.detail

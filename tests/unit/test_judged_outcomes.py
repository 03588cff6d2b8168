"""Judgements an earlier release stored: when the memory worker starts, their calls' outcome entries
are flagged as replaced, so that they stop counting wherever the judgement's own scenario lies (QA:
after an upgrade, a judgement given under another scenario left its call's outcome counting), and
the execution records of outputs judged wrong stop counting as successes."""

from __future__ import annotations

from pathlib import Path

import pytest

from selection.manifest import split_key
from selection.ports import EXECUTIONS, FEEDBACK, VectorMemory, VectorPoint
from tests.fakes_memory import InMemoryVectorMemory
from workers.feedback_store import apply_stored_judgements
from workers.memory.edge import EdgeVectorMemory


@pytest.fixture(params=["edge", "fake"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> VectorMemory:
    store: VectorMemory = EdgeVectorMemory(tmp_path, "judged_", dim=4) if request.param == "edge" else InMemoryVectorMemory(dim=4)
    store.ensure_collections()
    return store


def entry(id: str, source: str, call_id: str, tool: str = "a@1.0.0", vector: list[float] | None = None) -> VectorPoint:
    return VectorPoint(id=id, vector=vector or [1.0, 0.0, 0.0, 0.0], payload={
        "tool": tool, "name": split_key(tool)[0], "value": -1.0 if source == "manual" else 1.0,
        "timestamp": 1.7e9, "source": source, "call_id": call_id})


def test_outcomes_of_calls_judged_before_the_flag_existed_are_flagged_once(memory: VectorMemory) -> None:
    memory.upsert(FEEDBACK, [
        entry("outcome:c1:0", "outcome", "c1"),
        entry("manual:c1:a@1.0.0", "manual", "c1", vector=[0.0, 1.0, 0.0, 0.0]),  # judged under another scenario
        entry("outcome:c2:0", "outcome", "c2"),  # nobody judged it
        entry("outcome:c3:0", "outcome", "c3", tool="b@1.0.0"),  # c3 was judged for another version
        entry("manual:c3:a@1.0.0", "manual", "c3"),
    ])

    assert apply_stored_judgements(memory) == (1, 0)
    flags = {p.id: p.payload.get("replaced") for p in memory.scroll(FEEDBACK, limit=100)}
    assert [i for i, flag in flags.items() if flag] == ["outcome:c1:0"]
    assert memory.count(FEEDBACK) == 5
    assert apply_stored_judgements(memory) == (0, 0)  # nothing left to flag


def test_execution_records_of_outputs_judged_wrong_before_stop_counting_as_successes(memory: VectorMemory) -> None:
    def record(call_id: str, tool: str = "a@1.0.0") -> VectorPoint:
        return VectorPoint(id=f"{call_id}:0", vector=[1.0, 0.0, 0.0, 0.0], payload={
            "tool": tool, "call_id": call_id, "success": True, "timestamp": 1.7e9})

    memory.upsert(EXECUTIONS, [record("c1"), record("c2"), record("c3"), record("c4", tool="b@1.0.0")])
    wrong = entry("manual:c1:a@1.0.0", "manual", "c1")
    right = entry("manual:c2:a@1.0.0", "manual", "c2").model_copy(update={"payload": {
        **entry("manual:c2:a@1.0.0", "manual", "c2").payload, "value": 1.0, "positive": True}})
    memory.upsert(FEEDBACK, [wrong, right, entry("manual:c4:a@1.0.0", "manual", "c4")])  # c4 ran b, not a

    assert apply_stored_judgements(memory) == (0, 2)
    success = {p.id: (p.payload["success"], p.payload.get("judged")) for p in memory.scroll(EXECUTIONS, limit=10)}
    assert success == {"c1:0": (False, "negative"), "c2:0": (True, "positive"), "c3:0": (True, None), "c4:0": (True, None)}
    assert apply_stored_judgements(memory) == (0, 0)


def test_the_learner_sees_an_output_judged_wrong_as_no_success(memory: VectorMemory) -> None:
    from selection.learner import ExecutionRecord
    from workers.feedback_store import as_people_judged, judgements_of

    def ran(call_id: str, success: bool = True) -> ExecutionRecord:
        return ExecutionRecord(attempt_id=f"{call_id}:0", call_id=call_id, tool="a", version="1.0.0", scenario="s", success=success)

    window = [ran("c1"), ran("c2"), ran("c3", success=False), ran("c4")]
    right = entry("manual:c2:a@1.0.0", "manual", "c2")
    right = right.model_copy(update={"payload": {**right.payload, "value": 1.0, "positive": True}})
    memory.upsert(FEEDBACK, [entry("manual:c1:a@1.0.0", "manual", "c1"), right, entry("manual:c4:b@1.0.0", "manual", "c4", tool="b@1.0.0")])
    judged = judgements_of(memory, [r.call_id for r in window])
    assert [r.success for r in as_people_judged(window, judged)] == [False, True, False, True]


def test_a_store_with_judgements_nobody_counted_is_counted_as_judged(memory: VectorMemory) -> None:
    """Selection searches people's judgements apart only once the state store counts one; a store
    an earlier release wrote, or a Redis that lost its counters, is counted at the worker's start."""
    from tests.fakes_state import InMemoryStateStore

    state = InMemoryStateStore()
    apply_stored_judgements(memory, state)
    assert state.versions().judgements == 0  # no judgement stored
    memory.upsert(FEEDBACK, [entry("manual:scenario", "manual", "")])  # a judgement of a scenario, no call
    apply_stored_judgements(memory, state)
    apply_stored_judgements(memory, state)
    assert state.versions().judgements == 1


def test_the_entries_a_report_leaves_out_are_counted_per_version(memory: VectorMemory) -> None:
    """QA ops: `feedback show sort_numbers@1.0.0` said "3 outcome entries left out" where every
    judged call had run another version."""
    from types import SimpleNamespace

    from workers.feedback_store import feedback_report

    memory.upsert(FEEDBACK, [
        entry("outcome:c1:0", "outcome", "c1", tool="a@1.1.0"), entry("manual:c1:a@1.1.0", "manual", "c1", tool="a@1.1.0"),
        entry("outcome:c2:0", "outcome", "c2", tool="a@1.2.0"), entry("manual:c2:a@1.2.0", "manual", "c2", tool="a@1.2.0"),
        entry("outcome:c3:0", "outcome", "c3", tool="a@1.2.0"), entry("manual:c3:a@1.2.0", "manual", "c3", tool="a@1.2.0"),
        entry("outcome:c4:0", "outcome", "c4", tool="a@1.0.0"),  # nobody judged it
    ])
    report = feedback_report(SimpleNamespace(memory=memory), "a")  # type: ignore[arg-type]
    assert report.replaced == 3 and report.replaced_by_version == {"1.1.0": 1, "1.2.0": 2}
    assert report.forgiven == 0 and report.forgiven_by_version == {}

"""The history's retention on the embedded store and on the in-memory fake: the newest records stay,
a person's judgements stay, and a collection under its cap is left alone."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from selection.ports import EXECUTIONS, FAILURES, FEEDBACK, VectorMemory, VectorPoint
from tests.fakes_memory import InMemoryVectorMemory
from workers.memory.edge import EdgeVectorMemory
from workers.retention import cutoff, prune_history

T0 = 1.7e9


@pytest.fixture(params=["edge", "fake"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> VectorMemory:
    store: VectorMemory = EdgeVectorMemory(tmp_path, "retention_", dim=4) if request.param == "edge" else InMemoryVectorMemory(dim=4)
    store.ensure_collections()
    return store


def records(collection: str, n: int, manual_every: int = 0) -> list[VectorPoint]:
    """`n` records, one second apart, stored in a shuffled order; every `manual_every`-th a person's."""
    rng = random.Random(0)
    order = list(range(n))
    rng.shuffle(order)
    return [VectorPoint(id=f"{collection}:{t}", vector=[1.0, rng.random(), rng.random(), 0.0], payload={
        "name": "t", "timestamp": T0 + t,
        "source": "manual" if manual_every and t % manual_every == 0 else "outcome"}) for t in order]


def test_each_history_collection_keeps_its_newest_records(memory: VectorMemory) -> None:
    memory.upsert(EXECUTIONS, records(EXECUTIONS, 2_500))
    memory.upsert(FAILURES, records(FAILURES, 800))  # under the cap: left alone
    memory.upsert(FEEDBACK, records(FEEDBACK, 1_500, manual_every=100))  # 15 judgements, 1,485 outcomes

    assert prune_history(memory, keep=1_000) == {FEEDBACK: 485, EXECUTIONS: 1_500}

    kept = sorted(float(p.payload["timestamp"]) - T0 for p in memory.scroll(EXECUTIONS, limit=5_000))
    assert kept == [float(t) for t in range(1_500, 2_500)]
    assert memory.count(FAILURES) == 800
    feedback = {int(float(p.payload["timestamp"]) - T0): p.payload["source"] for p in memory.scroll(FEEDBACK, limit=5_000)}
    assert sorted(t for t, source in feedback.items() if source == "manual") == list(range(0, 1_500, 100))  # however old
    newest_outcomes = sorted((t for t in range(1_500) if t % 100), reverse=True)[:1_000]
    assert sorted(t for t, source in feedback.items() if source == "outcome") == sorted(newest_outcomes)
    assert prune_history(memory, keep=1_000) == {}  # nothing more to do
    assert cutoff(memory, EXECUTIONS, 1_000) is None

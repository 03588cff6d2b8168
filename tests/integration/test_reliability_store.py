"""The vector store cannot be opened: calls are still served, degraded, and nothing is lost.

The test process opens the embedded store first; its shard directories are then locked, so the
memory worker cannot open them, exactly as when a store is unreachable or broken. Selection falls
back to the registry and the Redis scores and says so in the result; the failure record of a
failed attempt waits in Redis; once the test lets go of the store, the worker opens it on its next
try, writes what waited, and the record is there for the next selection.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis

from tests.integration.conftest import Pipeline, pipeline_running
from workers.memory.edge import EdgeVectorMemory

pytestmark = pytest.mark.slow

TOOLS = Path(__file__).parent / "reliability_tools"


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[tuple[Pipeline, EdgeVectorMemory]]:
    tmp = tmp_path_factory.mktemp("store")
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    holder = EdgeVectorMemory(tmp / "data" / "qdrant", prefix)
    holder.ensure_collections()  # locks every shard directory of the worker's collections
    with pipeline_running(tmp, redis_url, model_path, TOOLS, roles=("memory", "executor"), FITTEST_COLLECTION_PREFIX=prefix,
                          FITTEST_EVOLUTION_ENABLED="false", FITTEST_MEMORY_RETRY_S="1") as p:
        try:
            yield p, holder
        finally:
            holder.close()


def test_selection_degrades_and_failure_records_wait_until_the_store_is_back(held: tuple[Pipeline, EdgeVectorMemory]) -> None:
    p, holder = held
    pending = redis.Redis.from_url(p.settings.redis_url)
    pending_key = f"{p.settings.key_prefix}pending:vectors"

    by_namespace = p.call(scenario="take a nap", namespace="nap", input={"ms": 0}, max_attempts=1)
    by_words = p.call(scenario="take a short nap and report the process id", input={"ms": 0}, max_attempts=1)
    for result in (by_namespace, by_words):
        assert result["status"] == "success", result
        assert result["tool"] == "nap"
        (reason,) = result["degraded"]
        assert "vector memory unavailable" in reason and "registry and Redis scores" in reason

    scenario = "a brittle tool that crashes when told to fail, store down"
    failed = p.call(scenario=scenario, namespace="brittle", version="1.0.0", input={"fail": True}, max_attempts=1)
    assert failed["status"] == "failed" and failed["degraded"], failed
    def kept_failure_records() -> list[dict]:
        writes = [json.loads(raw) for raw in pending.lrange(pending_key, 0, -1)]
        return [w for w in writes if w["collection"] == "failures" and w["payload"]["call_id"] == failed["call_id"]]

    p.wait_for(lambda: len(kept_failure_records()) == 1, timeout=60)  # the failure record, kept in Redis
    stats = p.state().stats(["brittle@1.0.0"])["brittle@1.0.0"]
    assert stats.failures == 1 and stats.quality == 0.9  # the Redis side applied at once

    holder.close()  # the store is back
    p.wait_for(lambda: p.call(scenario="take a nap", namespace="nap", input={"ms": 0}, max_attempts=1)["degraded"] == [],
               timeout=30)
    p.wait_for(lambda: pending.llen(pending_key) == 0, timeout=60)  # replayed

    ranked = p.client.wait(p.client.send("explain", scenario=scenario, namespace="brittle", version="1.0.0"), 30)
    assert ranked["degraded"] == []
    assert ranked["ranking"][0]["breakdown"]["similar_failures"] == 1  # the record written late is used
    semantic = p.call(scenario="take a short nap and report the process id", input={"ms": 0}, max_attempts=1)
    assert semantic["status"] == "success" and semantic["degraded"] == []
    assert all(proc.poll() is None for proc in p.stack.procs.values())


def test_a_replay_removes_only_what_it_wrote_when_the_list_is_trimmed_meanwhile(
        redis_client, run_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.pending as pending_mod
    from selection.ports import FEEDBACK, VectorPoint
    from tests.fakes_memory import InMemoryVectorMemory

    monkeypatch.setattr(pending_mod, "MAX_PENDING", 3)
    book = pending_mod.PendingWrites(redis_client, run_prefix)
    write = lambda i: pending_mod.PendingWrite(collection=FEEDBACK, id=f"w{i}", payload={"i": i}, text=f"text {i}")  # noqa: E731
    book.keep([write(0), write(1), write(2)])
    memory = InMemoryVectorMemory(dim=2)
    arrived = False

    class Busy:  # while the first batch is written, two more writes arrive and the list overflows
        def __getattr__(self, name: str):
            return getattr(memory, name)

        def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
            nonlocal arrived
            memory.upsert(collection, points)
            if not arrived:
                arrived = True
                book.keep([write(3), write(4)])  # 5 > 3: w0 and w1 are trimmed from the head

    assert book.replay(Busy(), lambda texts: [[1.0, 0.0] for _ in texts]) == 5
    assert len(book) == 0
    assert sorted(p.id for p in memory.scroll(FEEDBACK)) == ["w0", "w1", "w2", "w3", "w4"]


def test_a_store_whose_files_are_deleted_under_it_fails_the_health_check(held: tuple[Pipeline, EdgeVectorMemory]) -> None:
    """QA: with the data directory deleted under the memory worker, every call was still answered and
    its vector writes waited in Redis, but `fittest health` said the store was ok (it only reads)."""
    from workers.health import health

    p, _ = held
    # healthy first: the store the module's first test held comes back to writes within a retry
    # (a clean clone's run met a refusal of 1 s before, left from that test)
    p.wait_for(lambda: health(p.settings, ["store"], ["memory"], 5.0).healthy, timeout=30)
    shutil.rmtree(p.settings.data_dir / "qdrant")  # last in this module: the store stays broken
    failed = p.call(scenario="a brittle tool that crashes when told to fail, files gone", namespace="brittle",
                    version="1.0.0", input={"fail": True}, max_attempts=1)
    assert failed["status"] == "failed", failed  # answered all the same

    def store_check() -> str:
        (check,) = health(p.settings, ["store"], ["memory"], 5.0).checks
        return f"{check.status}: {check.detail}"

    p.wait_for(lambda: store_check().startswith("fail: refuses writes"), timeout=60)
    assert "waiting in Redis" in store_check() and "restart of the memory worker" in store_check()
    assert all(proc.poll() is None for proc in p.stack.procs.values())


def test_a_pending_write_the_store_can_never_take_is_dropped_not_left_to_block_the_rest(
        redis_client, run_prefix: str) -> None:
    """QA P: a write kept with a vector of another size (kept before the embedding model changed)
    raised ValueError at every replay, stayed at the head of the list with every write behind it,
    and failed each later vector write of the process that set off the replay."""
    import workers.pending as pending_mod
    from selection.ports import FAILURES, VectorPoint
    from tests.fakes_memory import InMemoryVectorMemory

    book = pending_mod.PendingWrites(redis_client, run_prefix)
    book.keep([pending_mod.PendingWrite.of(FAILURES, VectorPoint(id="old", vector=[0.1, 0.2, 0.3]), "old model"),
               pending_mod.PendingWrite.of(FAILURES, VectorPoint(id="w1", vector=[1.0, 0.0]), "this model")])
    memory = InMemoryVectorMemory(dim=2)
    assert book.replay(memory, lambda texts: [[0.0, 1.0] for _ in texts]) == 1
    assert len(book) == 0
    assert [p.id for p in memory.scroll(FAILURES)] == ["w1"]

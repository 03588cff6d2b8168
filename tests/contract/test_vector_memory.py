"""One contract for the VectorMemory port, run against Qdrant Edge, qdrant-client local mode and the
in-memory fake. Small hand-made vectors keep the expected order obvious; one test uses the real
embedder."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from selection.ports import (EXECUTIONS, FAILURES, FEEDBACK, STORED_TIME_SLACK_S, TOOLS, Embedder, Match, Range, VectorFilter,
                             VectorMemory, VectorPoint)
from tests.conftest import free_port
from tests.fakes_memory import InMemoryVectorMemory
from workers.memory import VectorMemoryUnavailable, open_vector_memory
from workers.memory.client import ClientVectorMemory
from workers.memory.edge import EdgeVectorMemory
from workers.settings import Settings

DIM = 4


class Backend:
    """Opens memories of any prefix on one storage, and restarts it as a new process would."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name = name
        self.persistent = name != "fake"
        self._root = tmp_path / name
        self._opened: list[VectorMemory] = []
        self._client: QdrantClient | None = None

    def open(self, prefix: str, dim: int = DIM) -> VectorMemory:
        memory: VectorMemory
        if self.name == "edge":
            memory = EdgeVectorMemory(self._root, prefix, dim=dim)
        elif self.name == "client":
            # One client for all prefixes: local mode locks its folder against a second client.
            if self._client is None:
                self._client = QdrantClient(path=str(self._root))
            memory = ClientVectorMemory(prefix, client=self._client, dim=dim)
        else:
            memory = InMemoryVectorMemory(dim=dim)
        memory.ensure_collections()
        self._opened.append(memory)
        return memory

    def restart(self) -> None:
        for memory in self._opened:
            memory.close()
        self._opened.clear()
        if self._client is not None:
            self._client.close()
            self._client = None


@pytest.fixture(params=["edge", "client", "fake"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    backend = Backend(request.param, tmp_path)
    yield backend
    backend.restart()


@pytest.fixture
def memory(backend: Backend, run_prefix: str) -> VectorMemory:
    return backend.open(run_prefix)


def unit(*xs: float) -> list[float]:
    norm = math.sqrt(sum(x * x for x in xs))
    return [x / norm for x in xs]


def pt(id: str, vector: list[float], **payload: object) -> VectorPoint:
    return VectorPoint(id=id, vector=vector, payload=payload)


QUERY = [1.0, 0.0, 0.0, 0.0]
# Cosine to QUERY: a 1.0, b 0.894, c 0.707, d 0.0, e -0.707
POINTS = [
    pt("tool:a@1.0.0", [1.0, 0.0, 0.0, 0.0], tool="a@1.0.0", name="a", tags=["text", "fast"], deprecated=False),
    pt("tool:b@1.0.0", [2.0, 1.0, 0.0, 0.0], tool="b@1.0.0", name="b", tags=["text"], deprecated=False),
    pt("tool:c@1.0.0", [1.0, 1.0, 0.0, 0.0], tool="c@1.0.0", name="c", tags=["fast", "code"], deprecated=True),
    pt("tool:d@1.0.0", [0.0, 0.0, 1.0, 0.0], tool="d@1.0.0", name="d", tags=[], deprecated=False),
    pt("tool:e@1.0.0", [-1.0, 1.0, 0.0, 0.0], tool="e@1.0.0", name="e", tags=["text", "fast", "code"], rank=2),
]


def ids(hits: list) -> list[str]:
    return [h.id for h in hits]


def test_implements_the_port(memory: VectorMemory) -> None:
    assert isinstance(memory, VectorMemory)
    assert memory.dim == DIM
    memory.ensure_collections()  # a second time changes nothing


def test_search_orders_by_cosine_and_returns_ids_and_payloads(memory: VectorMemory) -> None:
    memory.upsert(TOOLS, POINTS)
    hits = memory.search(TOOLS, QUERY, limit=10)
    assert ids(hits) == ["tool:a@1.0.0", "tool:b@1.0.0", "tool:c@1.0.0", "tool:d@1.0.0", "tool:e@1.0.0"]
    expected = [1.0, 2 / math.sqrt(5), 1 / math.sqrt(2), 0.0, -1 / math.sqrt(2)]
    assert [h.score for h in hits] == pytest.approx(expected, abs=1e-5)
    assert hits[0].payload == {"tool": "a@1.0.0", "name": "a", "tags": ["text", "fast"], "deprecated": False}
    assert ids(memory.search(TOOLS, QUERY, limit=2)) == ["tool:a@1.0.0", "tool:b@1.0.0"]
    # The query's length does not matter, only its direction.
    assert ids(memory.search(TOOLS, [5.0, 0.0, 0.0, 0.0], limit=1)) == ["tool:a@1.0.0"]


def test_search_returns_only_the_payload_fields_asked_for(memory: VectorMemory) -> None:
    memory.upsert(TOOLS, POINTS)
    hits = memory.search(TOOLS, QUERY, limit=5, fields=("tool", "deprecated"))
    # The ranking and the ids do not depend on the fields; a key a point lacks is simply absent.
    assert ids(hits) == ids(memory.search(TOOLS, QUERY, limit=5))
    assert hits[0].payload == {"tool": "a@1.0.0", "deprecated": False}
    assert hits[-1].payload == {"tool": "e@1.0.0"}
    assert memory.search(TOOLS, QUERY, limit=1, fields=())[0].payload == {}


def test_upsert_by_the_same_id_replaces_the_point(memory: VectorMemory) -> None:
    memory.upsert(TOOLS, POINTS)
    memory.upsert(TOOLS, [pt("tool:a@1.0.0", [0.0, 0.0, 0.0, 1.0], tool="a@1.0.0", name="a", tags=["moved"])])
    memory.upsert(TOOLS, [pt("tool:a@1.0.0", [0.0, 0.0, 0.0, 1.0], tool="a@1.0.0", name="a", tags=["moved"])])
    assert memory.count(TOOLS) == len(POINTS)
    top = memory.search(TOOLS, [0.0, 0.0, 0.0, 1.0], limit=1)[0]
    assert top.id == "tool:a@1.0.0"
    assert top.payload == {"tool": "a@1.0.0", "name": "a", "tags": ["moved"]}


def test_collections_are_separate(memory: VectorMemory) -> None:
    memory.upsert(TOOLS, POINTS[:2])
    memory.upsert(FAILURES, [pt("tool:a@1.0.0", QUERY, tool="a@1.0.0")])
    assert memory.count(TOOLS) == 2
    assert memory.count(FAILURES) == 1
    assert memory.count(FEEDBACK) == 0
    assert memory.search(FEEDBACK, QUERY) == []


@pytest.mark.parametrize(
    ("vector_filter", "expected"),
    [
        (VectorFilter.where(name="c"), "c"),
        (VectorFilter.where(name=["c", "a", "zzz"]), "ac"),
        # A list field matches when it contains the value; several matches must all hold.
        (VectorFilter.where(tags="fast"), "ace"),
        (
            VectorFilter(must=[Match(key="tags", any_of=["text"]), Match(key="tags", any_of=["fast"])]),
            "ae",
        ),
        (
            VectorFilter(must=[Match(key="tags", any_of=t) for t in (["text"], ["fast"], ["code"])]),
            "e",
        ),
        (VectorFilter.where(tags=["code", "text"]), "abce"),
        # Booleans and integers match by type: True is not 1, and a missing field never matches.
        (VectorFilter.where(deprecated=True), "c"),
        (VectorFilter.where(deprecated=False), "abd"),
        (VectorFilter.where(deprecated=[True, False]), "abcd"),
        (VectorFilter.where(rank=2), "e"),
        (VectorFilter(must=[Match(key="rank", any_of=[2, "c"])]), "e"),
        (VectorFilter(must=[Match(key="name", any_of=[2, "c"])]), "c"),
        (VectorFilter(must=[Match(key="name", any_of=[])]), ""),
        (VectorFilter(must_not=[Match(key="name", any_of=["a", "b"])]), "cde"),
        (VectorFilter(must_not=[Match(key="deprecated", any_of=[True])]), "abde"),
        (VectorFilter(must_not=[Match(key="tags", any_of=["fast"])]), "bd"),
        (
            VectorFilter(must=[Match(key="tags", any_of=["text"])], must_not=[Match(key="tool", any_of=["e@1.0.0"])]),
            "ab",
        ),
        (VectorFilter(must_not=[Match(key="name", any_of=[])]), "abcde"),
        (VectorFilter(), "abcde"),
    ],
    ids=lambda v: repr(v.model_dump(exclude_defaults=True)) if isinstance(v, VectorFilter) else v or "none",
)
def test_filters(memory: VectorMemory, vector_filter: VectorFilter, expected: str) -> None:
    """`expected` names the matching tools by letter."""
    memory.upsert(TOOLS, POINTS)
    expected_ids = [f"tool:{letter}@1.0.0" for letter in expected]
    in_cosine_order = [p.id for p in POINTS if p.id in expected_ids]
    assert ids(memory.search(TOOLS, QUERY, limit=10, filter=vector_filter)) == in_cosine_order
    assert memory.count(TOOLS, vector_filter) == len(expected_ids)
    assert sorted(p.id for p in memory.scroll(TOOLS, vector_filter)) == expected_ids


def test_bool_never_matches_int(memory: VectorMemory) -> None:
    memory.upsert(FEEDBACK, [pt("int", QUERY, positive=1), pt("bool", QUERY, positive=True)])
    assert ids(memory.search(FEEDBACK, QUERY, filter=VectorFilter.where(positive=True))) == ["bool"]
    assert ids(memory.search(FEEDBACK, QUERY, filter=VectorFilter.where(positive=1))) == ["int"]


def test_score_threshold(memory: VectorMemory) -> None:
    memory.upsert(TOOLS, POINTS)
    assert ids(memory.search(TOOLS, QUERY, score_threshold=0.8)) == ["tool:a@1.0.0", "tool:b@1.0.0"]
    assert ids(memory.search(TOOLS, QUERY, score_threshold=0.5, filter=VectorFilter.where(tags="fast"))) == [
        "tool:a@1.0.0",
        "tool:c@1.0.0",
    ]
    assert memory.search(TOOLS, [0.0, 0.0, 0.0, 1.0], score_threshold=0.1) == []


def test_scroll_returns_points_with_payload_and_unit_vectors(memory: VectorMemory) -> None:
    memory.upsert(TOOLS, POINTS)
    points = {p.id: p for p in memory.scroll(TOOLS)}
    assert set(points) == {p.id for p in POINTS}
    b = points["tool:b@1.0.0"]
    assert b.payload == {"tool": "b@1.0.0", "name": "b", "tags": ["text"], "deprecated": False}
    assert b.vector == pytest.approx(unit(2.0, 1.0, 0.0, 0.0), abs=1e-6)  # cosine stores directions
    assert len(memory.scroll(TOOLS, limit=3)) == 3


def test_scroll_and_count_beyond_one_page(memory: VectorMemory) -> None:
    many = [pt(f"exec:{i}", unit(1.0, i / 100, 0.0, 0.0), tool=f"t{i % 3}") for i in range(1200)]
    memory.upsert(TOOLS, many)
    assert memory.count(TOOLS) == 1200
    assert memory.count(TOOLS, VectorFilter.where(tool="t1")) == 400
    assert len({p.id for p in memory.scroll(TOOLS, limit=5000)}) == 1200
    assert len(memory.scroll(TOOLS, limit=1000)) == 1000


def test_scroll_newest_first(memory: VectorMemory) -> None:
    """The tool classifier's refit reads the newest successes when there are more than it reads."""
    import random

    stamps = list(range(1500))
    random.Random(0).shuffle(stamps)  # stored in another order than their time
    memory.upsert(EXECUTIONS, [pt(f"exec:{t}", unit(1.0, t / 1500, 0.0, 0.0), name=f"t{t % 3}", success=t % 4 != 0,
                                  timestamp=1.7e9 + t * 0.25) for t in stamps])
    successes = VectorFilter.where(success=True)
    newest = memory.scroll(EXECUTIONS, successes, limit=1100, descending_by="timestamp")
    expected = sorted((t for t in range(1500) if t % 4 != 0), reverse=True)  # 1,125 successes
    assert [p.id for p in newest] == [f"exec:{t}" for t in expected[:1100]]
    assert newest[0].vector == pytest.approx(unit(1.0, 1499 / 1500, 0.0, 0.0), abs=1e-6)
    assert len(memory.scroll(EXECUTIONS, successes, limit=5000, descending_by="timestamp")) == 1125
    with pytest.raises(ValueError, match=r"'executions' can be ordered by \['timestamp'\] only, not 'name'"):
        memory.scroll(EXECUTIONS, descending_by="name")
    with pytest.raises(ValueError, match=r"'tools' can be ordered by \[\] only"):
        memory.scroll(TOOLS, descending_by="timestamp")


def test_a_range_counts_and_deletes_the_points_of_a_time_span(memory: VectorMemory) -> None:
    """How the history's retention finds and removes the oldest records (workers/retention.py)."""
    for collection in (FEEDBACK, FAILURES, EXECUTIONS):
        memory.upsert(collection, [pt(f"{collection}:{t}", unit(1.0, t / 10, 0.0, 0.0), name="t", timestamp=1.7e9 + t,
                                      source="manual" if t == 2 else "outcome") for t in range(10)])
        assert memory.count(collection, VectorFilter(ranges=[Range(key="timestamp", lt=1.7e9 + 4)])) == 4
        assert memory.count(collection, VectorFilter(ranges=[Range(key="timestamp", gte=1.7e9 + 4, lt=1.7e9 + 6)])) == 2
        memory.delete(collection, VectorFilter(ranges=[Range(key="timestamp", lt=1.7e9 + 4)],
                                               must_not=[Match(key="source", any_of=["manual"])]))
        assert sorted(p.id for p in memory.scroll(collection)) == [f"{collection}:{t}" for t in (2, 4, 5, 6, 7, 8, 9)]


def test_a_time_is_read_back_within_the_slack_and_a_range_that_wide_finds_its_point(memory: VectorMemory) -> None:
    """Qdrant does not read every float back exactly (Edge: 1796135821.4142401 as ...41424), so code
    that looks for one written time (workers/outcomes.py `_failure_stored`) looks STORED_TIME_SLACK_S
    to either side of it."""
    times = [1796135821.4142401 + k * 0.0137 for k in range(50)]
    memory.upsert(FAILURES, [pt(f"f{k}", unit(1.0, 0.0, 0.0, 0.0), timestamp=t) for k, t in enumerate(times)])
    read = {p.id: p.payload["timestamp"] for p in memory.scroll(FAILURES)}
    assert max(abs(read[f"f{k}"] - t) for k, t in enumerate(times)) < 1e-6
    for k, t in enumerate(times):
        near = VectorFilter(ranges=[Range(key="timestamp", gte=t - STORED_TIME_SLACK_S, lt=t + STORED_TIME_SLACK_S)])
        assert f"f{k}" in {p.id for p in memory.scroll(FAILURES, filter=near)}


def test_delete_by_filter(memory: VectorMemory) -> None:
    memory.upsert(TOOLS, POINTS)
    fast_but_not_e = VectorFilter(must=[Match(key="tags", any_of=["fast"])], must_not=[Match(key="name", any_of=["e"])])
    memory.delete(TOOLS, fast_but_not_e)
    assert sorted(p.id for p in memory.scroll(TOOLS)) == ["tool:b@1.0.0", "tool:d@1.0.0", "tool:e@1.0.0"]
    memory.delete(TOOLS, VectorFilter.where(name="nobody"))
    assert memory.count(TOOLS) == 3


def test_bad_input_is_refused(memory: VectorMemory) -> None:
    with pytest.raises(ValueError, match="dimensions"):
        memory.upsert(TOOLS, [pt("short", [1.0, 0.0])])
    with pytest.raises(ValueError, match="dimensions"):
        memory.search(TOOLS, [1.0, 0.0])
    with pytest.raises(ValueError, match="NaN"):
        memory.upsert(TOOLS, [pt("nan", [math.nan, 0.0, 0.0, 1.0])])
    with pytest.raises(ValueError, match="unknown collection"):
        memory.count("tool")
    assert memory.count(TOOLS) == 0


def test_drop_all_removes_only_its_own_prefix(backend: Backend, run_prefix: str) -> None:
    mine = backend.open(run_prefix)
    other = backend.open(run_prefix + "x_")
    mine.upsert(TOOLS, POINTS)
    mine.upsert(FAILURES, POINTS[:1])
    other.upsert(TOOLS, POINTS[:2])
    mine.drop_all()
    assert other.count(TOOLS) == 2
    assert ids(other.search(TOOLS, QUERY)) == ["tool:a@1.0.0", "tool:b@1.0.0"]
    # Dropped, not broken: the memory starts again empty.
    assert mine.count(TOOLS) == 0
    assert mine.count(FAILURES) == 0
    mine.upsert(TOOLS, POINTS[:1])
    assert mine.count(TOOLS) == 1


def test_reopen_keeps_the_data(backend: Backend, run_prefix: str) -> None:
    if not backend.persistent:
        pytest.skip(f"{backend.name} keeps nothing on disk")
    memory = backend.open(run_prefix)
    memory.upsert(TOOLS, POINTS)
    memory.upsert(FEEDBACK, [pt("fb:1", QUERY, tool="a@1.0.0", positive=True)])
    backend.restart()
    again = backend.open(run_prefix)
    assert again.count(TOOLS) == len(POINTS)
    assert ids(again.search(TOOLS, QUERY, limit=2, filter=VectorFilter.where(deprecated=False))) == [
        "tool:a@1.0.0",
        "tool:b@1.0.0",
    ]
    assert again.scroll(FEEDBACK)[0].payload == {"tool": "a@1.0.0", "positive": True}


def test_threads_share_one_memory(memory: VectorMemory) -> None:
    """The memory-side worker runs a thread pool over one memory."""
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(20):
                memory.upsert(FAILURES, [pt(f"f:{worker}:{i}", unit(1.0, worker, i, 1.0), worker=str(worker))])
                memory.search(FAILURES, QUERY, limit=5, filter=VectorFilter.where(worker=str(worker)))
                memory.count(FAILURES)
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert memory.count(FAILURES) == 120
    assert memory.count(FAILURES, VectorFilter.where(worker="3")) == 20


def test_a_paraphrase_ranks_above_unrelated_text(backend: Backend, run_prefix: str, embedder: Embedder) -> None:
    memory = backend.open(run_prefix, dim=embedder.dim)
    texts = {
        "translate": "Translate technical documentation from English to German",
        "weather": "Get the weather forecast for a city",
        "resize": "Resize and crop images to thumbnails",
    }
    vectors = embedder.embed(list(texts.values()))
    memory.upsert(TOOLS, [pt(k, v, text=t) for (k, t), v in zip(texts.items(), vectors, strict=True)])
    hits = memory.search(TOOLS, embedder.embed_one("convert API docs into German, keep code blocks"), limit=3)
    assert ids(hits)[0] == "translate"
    assert hits[0].score > hits[1].score + 0.1


# Opening, beyond the port: what a worker meets when it starts.


def test_client_path_mode_owns_its_client_and_reopens(tmp_path: Path, run_prefix: str) -> None:
    memory = ClientVectorMemory(run_prefix, path=str(tmp_path / "local"), dim=DIM)
    memory.upsert(TOOLS, POINTS)
    with pytest.raises(VectorMemoryUnavailable, match="local storage"):
        ClientVectorMemory(run_prefix, path=str(tmp_path / "local"), dim=DIM)
    memory.close()  # releases the folder lock
    again = ClientVectorMemory(run_prefix, path=str(tmp_path / "local"), dim=DIM)
    assert again.count(TOOLS) == len(POINTS)
    again.close()


def test_client_memory_mode_and_a_missing_location() -> None:
    memory = ClientVectorMemory("m_", path=":memory:", dim=DIM)
    memory.upsert(TOOLS, POINTS[:1])
    assert memory.count(TOOLS) == 1
    memory.close()
    with pytest.raises(ValueError, match="url"):
        ClientVectorMemory("m_")


def test_a_second_owner_of_an_edge_store_is_refused(tmp_path: Path, run_prefix: str) -> None:
    owner = EdgeVectorMemory(tmp_path, run_prefix, dim=DIM)
    owner.ensure_collections()
    with pytest.raises(VectorMemoryUnavailable, match="FITTEST_QDRANT_URL"):
        EdgeVectorMemory(tmp_path, run_prefix, dim=DIM).ensure_collections()
    owner.close()
    with pytest.raises(VectorMemoryUnavailable, match="closed"):
        owner.count(TOOLS)


def test_an_edge_store_of_another_dimension_is_refused(tmp_path: Path, run_prefix: str) -> None:
    small = EdgeVectorMemory(tmp_path, run_prefix, dim=DIM)
    small.upsert(TOOLS, POINTS)
    small.close()
    with pytest.raises(VectorMemoryUnavailable, match="384-dim"):
        EdgeVectorMemory(tmp_path, run_prefix, dim=384).count(TOOLS)


def test_a_bad_prefix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prefix"):
        EdgeVectorMemory(tmp_path, "../escape/", dim=DIM)


def test_open_vector_memory_embedded_by_default(tmp_path: Path, run_prefix: str) -> None:
    settings = Settings(qdrant_url=None, data_dir=tmp_path / "data", collection_prefix=run_prefix)
    memory = open_vector_memory(settings, dim=DIM)
    assert isinstance(memory, EdgeVectorMemory)
    assert sorted(p.name for p in (tmp_path / "data" / "qdrant").iterdir()) == sorted(
        run_prefix + c for c in ("tools", "feedback", "failures", "evolutions", "executions")
    )
    memory.close()


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_open_vector_memory_names_an_unreachable_server(run_prefix: str) -> None:
    settings = Settings(qdrant_url=f"http://127.0.0.1:{free_port()}", collection_prefix=run_prefix)
    with pytest.raises(VectorMemoryUnavailable, match="FITTEST_QDRANT_URL"):
        open_vector_memory(settings, dim=DIM)


def test_a_store_another_memory_holds_is_refused_with_the_ownership_hint_and_a_bad_one_without(tmp_path: Path,
                                                                                                  run_prefix: str) -> None:
    """QA 59d L3: a full disk's refusal read "one process owns the store ... set FITTEST_QDRANT_URL",
    which only a store held by another process is about."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", (  # another process owns the store, as a memory worker does
        "import sys, time; from workers.memory.edge import EdgeVectorMemory; "
        f"m = EdgeVectorMemory({str(tmp_path / 'held')!r}, {run_prefix!r}, dim={DIM}); m.count('tools'); "
        "print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(VectorMemoryUnavailable, match="one process owns the store under FITTEST_DATA_DIR"):
            EdgeVectorMemory(tmp_path / "held", run_prefix, dim=DIM).count("tools")
    finally:
        holder.kill()
        holder.wait(timeout=10)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / f"{run_prefix}tools").write_text("not a shard")  # a file where the shard's folder goes
    with pytest.raises(VectorMemoryUnavailable) as told:
        EdgeVectorMemory(tmp_path / "bad", run_prefix, dim=DIM).count("tools")
    assert "cannot open the Qdrant Edge shard" in str(told.value) and "one process owns" not in str(told.value)

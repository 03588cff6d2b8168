"""`fittest bench scale`: how selection latency grows with the number of tools and stored vectors,
for the embedded Qdrant Edge store and the qdrant-client store, side by side.

Each cell times `Selector.plan` (the whole selection a worker runs: tool search, failure and
feedback memory, Redis state, the policy) on its own private Redis and stores, with the scenario's
embedding already cached (a cold embedding costs ~5 ms more and does not depend on scale).

The data is synthetic but shaped like the real thing:

- B scenario texts are embedded with the real model; every tool's description vector lies near one
  of them (cosine ~0.8), so tools form clusters as real tools of one capability do;
- stored feedback and failure vectors (half each) lie near their tool's cluster, and are spread
  over tools by a Zipf law (s=1): a few popular tools carry most of the history, the long tail little.
  Tool levels are nested (the first T of the same 10,000 tools), so one set of vectors serves
  every tool level, and with few tools each candidate's filtered history is large;
- the queries are fresh texts per cell (no selection cache can answer them), embedded beforehand.

The vectors grow in place (1k → 10k → 100k → 1M), every tool level is measured at each size.
The qdrant-client store runs in its local mode here (no Qdrant server on this machine): an exact
in-Python scan meant for tests, so it is measured only up to `--client-max-vectors`.
"""

from __future__ import annotations

import itertools
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from selection.manifest import ToolManifest
from selection.models import CallRequest
from selection.ports import (
    FAILURES,
    FEEDBACK,
    TOOLS,
    Embedder,
    VectorFilter,
    VectorHit,
    VectorMemory,
    VectorPoint,
)
from selection.percentile import percentile
from selection.registry import ToolRegistry
from workers.bench.host import BenchResult
from workers.settings import Settings

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

    from workers.runtime import Runtime

TOOL_LEVELS = (10, 1_000, 10_000)
VECTOR_LEVELS = (1_000, 10_000, 100_000, 1_000_000)
TARGET_P99_MS = 10.0
TARGET_VECTORS = 100_000
TOOL_COSINE = 0.8  # a tool's vector to its cluster's scenario
RECORD_COSINE = 0.8  # a stored feedback/failure vector to its tool's cluster's scenario
UPSERT_CHUNK = 10_000

VERBS = ("convert", "parse", "validate", "summarise", "translate", "sort", "hash", "compress", "resize",
         "extract", "count", "format", "merge", "split", "encrypt", "render", "classify", "deduplicate",
         "normalise", "search")
OBJECTS = ("csv files", "json documents", "log lines", "email addresses", "images", "dates and times",
           "unit measurements", "source code", "markdown notes", "invoices", "sensor readings",
           "urls", "phone numbers", "database rows", "audio clips")


class Cell(BaseModel):
    store: str
    tools: int
    vectors: int
    queries: int
    p50_ms: float
    p99_ms: float
    # CPU time of the selecting thread (time.thread_time): what selection itself costs, apart from
    # waiting on Redis and on other processes of a loaded machine.
    cpu_p50_ms: float
    cpu_p99_ms: float
    mean_candidates: float


class Growth(BaseModel):
    """How p99 grows: the factor per 10x more vectors (at each tool level) and per 10x more tools
    (at each vector level), and the log-log slope over the whole range (0: flat, 1: linear)."""

    store: str
    along: str  # "vectors" or "tools"
    at: int  # the tool level (along vectors) or vector level (along tools)
    factors: list[float]
    slope: float
    added_p50_ms: list[float]  # p50 at each level minus p50 at the first: what the growth itself costs


class ScaleResult(BenchResult):
    tool_levels: list[int]
    vector_levels: list[int]
    queries_per_cell: int
    cells: list[Cell]
    growth: list[Growth]
    skipped: list[str]
    target_p99_ms: float = TARGET_P99_MS
    edge_p99_ms_at_100k: float | None = None  # worst over tool levels
    meets_target: bool | None = None
    server_advised_above: int | None = None  # stored vectors past which the embedded p99 exceeds the target
    build_s: dict[str, float]


def scenario_texts() -> list[str]:
    return [f"{v} {o}" for v in VERBS for o in OBJECTS]


def _near(rng: np.random.Generator, centers: np.ndarray, cosine: float) -> np.ndarray:
    """Unit vectors at about `cosine` to their row of `centers` (noise of norm tan(arccos c))."""
    sigma = math.tan(math.acos(cosine))
    noise = rng.standard_normal(centers.shape) * (sigma / math.sqrt(centers.shape[1]))
    out = centers + noise
    return out / np.linalg.norm(out, axis=1, keepdims=True)


class _Routed:
    """A VectorMemory that keeps the tool index of one tool level apart from the shared history,
    so the same history serves every tool level."""

    def __init__(self, tools: VectorMemory, history: VectorMemory) -> None:
        self.tools, self.history, self.dim = tools, history, history.dim

    def _of(self, collection: str) -> VectorMemory:
        return self.tools if collection == TOOLS else self.history

    def ensure_collections(self) -> None:
        self.tools.ensure_collections()
        self.history.ensure_collections()

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None:
        self._of(collection).upsert(collection, points)

    def search(self, collection: str, vector: Sequence[float], limit: int = 10, filter: VectorFilter | None = None,
               score_threshold: float | None = None, fields: Sequence[str] | None = None) -> list[VectorHit]:
        return self._of(collection).search(collection, vector, limit, filter, score_threshold, fields)

    def scroll(self, collection: str, filter: VectorFilter | None = None, limit: int = 1000,
               descending_by: str | None = None) -> list[VectorPoint]:
        return self._of(collection).scroll(collection, filter, limit, descending_by)

    def count(self, collection: str, filter: VectorFilter | None = None) -> int:
        return self._of(collection).count(collection, filter)

    def delete(self, collection: str, filter: VectorFilter) -> None:
        self._of(collection).delete(collection, filter)

    def drop_all(self) -> None:
        self.tools.drop_all()

    def close(self) -> None:
        self.tools.close()


class _Precomputed:
    """The real embedder, except for the synthetic tool texts, whose vectors are given."""

    def __init__(self, real: Embedder, given: dict[str, list[float]]) -> None:
        self.real, self.given, self.dim, self.precision = real, given, real.dim, real.precision

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.given]
        computed = dict(zip(missing, self.real.embed(missing))) if missing else {}
        return [self.given[t] if t in self.given else computed[t] for t in texts]

    def embed_one(self, text: str) -> list[float]:
        return self.embed([text])[0]


def _tools(n: int, rng: np.random.Generator, centers: np.ndarray, texts: list[str]
           ) -> tuple[list[ToolManifest], dict[str, list[float]], np.ndarray]:
    """`n` tools, each near one scenario (its cluster): manifests, their vectors by text, clusters."""
    cluster = rng.integers(0, len(texts), size=n)
    vectors = _near(rng, centers[cluster], TOOL_COSINE)
    manifests, given = [], {}
    for i in range(n):
        description = f"{texts[cluster[i]]} (implementation {i})"
        manifests.append(ToolManifest(name=f"tool_{i:05d}", description=description,
                                      implementation={"kind": "python", "entrypoint": "bench:run"}))
        given[description] = vectors[i].tolist()
    return manifests, given, cluster


def _history(start: int, stop: int, rng: np.random.Generator, centers: np.ndarray, tool_clusters: np.ndarray,
             popularity: np.ndarray) -> tuple[list[VectorPoint], list[VectorPoint]]:
    n = stop - start
    owners = rng.choice(len(popularity), size=n, p=popularity)
    vectors = _near(rng, centers[tool_clusters[owners]], RECORD_COSINE)
    now = time.time()
    feedback, failures = [], []
    for j in range(n):
        i, tool = start + j, f"tool_{owners[j]:05d}"
        payload = {"tool": f"{tool}@1.0.0", "name": tool, "version": "1.0.0", "timestamp": now - j}
        if i % 2:
            payload |= {"error_class": "crash", "severity": "high", "scenario": "bench"}
            failures.append(VectorPoint(id=f"f{i}", vector=vectors[j].tolist(), payload=payload))
        else:
            payload |= {"positive": bool(j % 3), "quality": 0.8, "scenario": "bench"}
            feedback.append(VectorPoint(id=f"b{i}", vector=vectors[j].tolist(), payload=payload))
    return feedback, failures


def _runtime(settings: Settings, memory: VectorMemory, embedder: Embedder, registry: ToolRegistry) -> Runtime:
    """A worker runtime whose memory, embedder and registry are the bench's."""
    from workers.runtime import Runtime

    class BenchRuntime(Runtime):
        @property
        def memory(self) -> VectorMemory:
            return memory

    rt = BenchRuntime(settings)
    rt.__dict__.update(embedder=embedder, registry=registry)  # cached properties: set, never built
    return rt


def _open_store(kind: str, root: Path, prefix: str, shared: QdrantClient | None) -> VectorMemory:
    if kind == "edge":
        from workers.memory.edge import EdgeVectorMemory

        return EdgeVectorMemory(root / "edge", prefix)
    from workers.memory.client import ClientVectorMemory

    return ClientVectorMemory(prefix, client=shared)


def run_scale(
    settings: Settings,
    tool_levels: Sequence[int] = TOOL_LEVELS,
    vector_levels: Sequence[int] = VECTOR_LEVELS,
    stores: Sequence[str] = ("edge", "client"),
    queries: int = 200,
    client_max_vectors: int = 10_000,
    seed: int = 7,
    progress: Callable[[str], None] = lambda _: None,
) -> ScaleResult:
    from workers.embedder import FastEmbedder
    from workers.stack import start_private_redis

    rng = np.random.default_rng(seed)
    tool_levels, vector_levels = sorted(tool_levels), sorted(vector_levels)
    texts = scenario_texts()
    cell_queries = {(t, v): [f"{texts[(k * 7 + t + v) % len(texts)]}, request {k} of cell {t}/{v}" for k in range(queries)]
                    for t in tool_levels for v in vector_levels}
    progress(f"embedding {len(texts)} scenarios and {sum(map(len, cell_queries.values()))} queries with the real model")
    real = FastEmbedder(settings.embedding_model, settings.embedding_model_path,
                        cache_size=len(texts) + sum(map(len, cell_queries.values())) + 16)
    centers = np.asarray(real.embed(texts))
    for qs in cell_queries.values():
        real.embed(qs)

    max_tools = tool_levels[-1]
    manifests, given, tool_clusters = _tools(max_tools, rng, centers, texts)
    popularity = 1.0 / np.arange(1, max_tools + 1)
    popularity /= popularity.sum()
    embedder = _Precomputed(real, given)

    cells: list[Cell] = []
    skipped: list[str] = []
    build_s: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="fittest-scale-") as tmp:
        root = Path(tmp)
        redis_proc, url = start_private_redis(root)
        try:
            for kind in stores:
                shared: QdrantClient | None = None
                if kind == "client":
                    from qdrant_client import QdrantClient

                    shared = QdrantClient(location=":memory:")
                history = _open_store(kind, root, "bench_h_", shared)
                runtimes: dict[int, Runtime] = {}
                started = time.perf_counter()
                for t in tool_levels:
                    registry = ToolRegistry()
                    for m in manifests[:t]:
                        registry.add(m)
                    rt = _runtime(settings.model_copy(update={"redis_url": url, "key_prefix": f"bench{kind}{t}:"}),
                                  _Routed(_open_store(kind, root, f"bench_t{t}_", shared), history), embedder, registry)
                    progress(f"{kind}: indexing {t} tools")
                    rt.selector  # noqa: B018 - built on first use, which indexes the registry's tools
                    runtimes[t] = rt
                build_s[f"{kind}_tools"] = round(time.perf_counter() - started, 1)
                stored = 0
                for v in vector_levels:
                    if kind == "client" and v > client_max_vectors:
                        skipped.append(f"client at {v} vectors: local mode is an exact in-Python scan for tests "
                                       f"(capped at --client-max-vectors {client_max_vectors}); a Qdrant server is what scales")
                        continue
                    progress(f"{kind}: storing feedback and failure vectors {stored:,} → {v:,}")
                    started = time.perf_counter()
                    for chunk_start in range(stored, v, UPSERT_CHUNK):
                        feedback, failures = _history(chunk_start, min(v, chunk_start + UPSERT_CHUNK), rng, centers,
                                                      tool_clusters, popularity)
                        history.upsert(FEEDBACK, feedback)
                        history.upsert(FAILURES, failures)
                    build_s[f"{kind}_{v}"] = round(time.perf_counter() - started, 1)
                    stored = v
                    for t in tool_levels:
                        cells.append(_measure(kind, t, v, runtimes[t], cell_queries[(t, v)]))
                        c = cells[-1]
                        progress(f"{kind}: {t} tools, {v:,} vectors: p50 {c.p50_ms:.2f} ms, p99 {c.p99_ms:.2f} ms "
                                 f"(CPU p50 {c.cpu_p50_ms:.2f}, p99 {c.cpu_p99_ms:.2f})")
                for rt in runtimes.values():
                    rt.memory.close()
                history.close()
                if shared is not None:
                    shared.close()
        finally:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
    return _summarise(cells, tool_levels, vector_levels, queries, skipped, build_s)


def _measure(kind: str, tools: int, vectors: int, rt: Runtime, texts: list[str]) -> Cell:
    selector = rt.selector
    for text in texts[:5]:  # the first calls of a cell open and warm what they touch; not timed
        selector.plan(CallRequest(scenario=text + " (warm-up)"))
    times, cpu, candidates = [], [], 0
    for text in texts:
        started, cpu_started = time.perf_counter(), time.thread_time()
        plan = selector.plan(CallRequest(scenario=text))
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - cpu_started) * 1000)
        if plan.degraded:
            raise RuntimeError(f"selection ran degraded in the {kind} cell: {plan.degraded[0]}")
        candidates += len(plan.candidates)
    return Cell(store=kind, tools=tools, vectors=vectors, queries=len(texts),
                p50_ms=round(percentile(times, 0.5), 3), p99_ms=round(percentile(times, 0.99), 3),
                cpu_p50_ms=round(percentile(cpu, 0.5), 3), cpu_p99_ms=round(percentile(cpu, 0.99), 3),
                mean_candidates=round(candidates / len(texts), 2))


def _slope(xs: list[int], ys: list[float]) -> float:
    lx, ly = np.log10(xs), np.log10(np.maximum(ys, 1e-6))
    return round(float(np.polyfit(lx, ly, 1)[0]), 3) if len(xs) > 1 else 0.0


def _summarise(cells: list[Cell], tool_levels: list[int], vector_levels: list[int], queries: int,
               skipped: list[str], build_s: dict[str, float]) -> ScaleResult:
    growth: list[Growth] = []
    for store in sorted({c.store for c in cells}):
        mine = [c for c in cells if c.store == store]
        for along, fixed_levels, key_fixed, key_var in (("vectors", tool_levels, "tools", "vectors"),
                                                        ("tools", vector_levels, "vectors", "tools")):
            for at in fixed_levels:
                row = sorted((c for c in mine if getattr(c, key_fixed) == at), key=lambda c: getattr(c, key_var))
                if len(row) < 2:
                    continue
                xs = [getattr(c, key_var) for c in row]
                ys = [c.p99_ms for c in row]
                factors = [round(b / a, 2) if a else 0.0 for a, b in itertools.pairwise(ys)]
                added = [round(c.p50_ms - row[0].p50_ms, 2) for c in row]
                growth.append(Growth(store=store, along=along, at=at, factors=factors, slope=_slope(xs, ys),
                                     added_p50_ms=added))
    edge = [c for c in cells if c.store == "edge"]
    at_target = [c.p99_ms for c in edge if c.vectors == TARGET_VECTORS]
    over = sorted({c.vectors for c in edge if c.p99_ms > TARGET_P99_MS})
    return ScaleResult(
        tool_levels=tool_levels,
        vector_levels=vector_levels,
        queries_per_cell=queries,
        cells=cells,
        growth=growth,
        skipped=skipped,
        edge_p99_ms_at_100k=max(at_target) if at_target else None,
        meets_target=(max(at_target) <= TARGET_P99_MS) if at_target else None,
        server_advised_above=_last_within(edge, over),
        build_s=build_s,
    )


def _last_within(edge: list[Cell], over: list[int]) -> int | None:
    """The largest vector level within the target at every tool level, above which every measured
    level exceeds it at some tool level; None when the largest level is within the target (no limit
    measured) or none is. Scanned from the top, so one slow cell at a small level (a stall of the
    machine) does not hide the limit the larger levels show."""
    levels = sorted({c.vectors for c in edge})
    if not levels or levels[-1] not in over:
        return None
    return next((v for v in reversed(levels) if v not in over), None)

"""`fittest bench throughput`: what fittest costs on top of the Celery it runs on, as a ratio.

One run starts a private redis-server and the memory and executor workers (the Procfile roles),
registers one trivial tool, and drives two kinds of call through the same broker and workers with
the same client concurrency, alternating in rounds so that load from elsewhere on the machine hits
both alike. A round of either kind ends when every call has returned *and* the broker is idle
(no queued and no unacknowledged message): the fire-and-forget work a call leaves behind
(`record_outcome` and `learn`; the baseline's third hop) is part of its cost, and must not spill
into the next round and be charged to the other kind:

- pipeline: `fittest.resilient_tool_call` by scenario only: validation, embedding (cached after
  the first call of each scenario), semantic search, failure memory, Redis stats, the tool run,
  per-attempt bookkeeping, metrics, the JSON event log and `record_outcome`;
- baseline: three chained no-op tasks of the same shape (workers/bench/baseline.py).

`ratio` = pipeline calls/s ÷ baseline calls/s; 0.75 means selection, memory and bookkeeping cost
at most a third more than Celery's own work for a call. A pipeline round's drain includes the wait
for the last partial `record_outcome` and `learn` batches (celery-batches flushes each within
0.25 s), which long rounds amortise.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from selection.percentile import percentile
from workers.bench.host import BenchResult
from workers.client import CallSender
from workers.metrics import reader_for
from workers.settings import Settings

TOOLS_DIR = Path(__file__).parent / "tools"
ROLES = ("memory", "executor")
TARGET_RATIO = 0.75
DRAIN_POLL_S = 0.02
DRAIN_TIMEOUT_S = 120.0


class Phase(BaseModel):
    calls: int = 0
    failed: int = 0
    wall_s: float = 0.0
    latencies_ms: list[float] = []

    @property
    def per_s(self) -> float:
        return self.calls / self.wall_s if self.wall_s else 0.0


class ThroughputResult(BenchResult):
    calls: int
    concurrency: int
    rounds: int
    scenarios: int
    pipeline_calls_per_s: float
    baseline_calls_per_s: float
    ratio: float
    target_ratio: float = TARGET_RATIO
    p50_ms: float
    p99_ms: float
    baseline_p50_ms: float
    baseline_p99_ms: float
    pipeline_failed: int


def scenarios(n: int) -> list[str]:
    return [f"echo this payload back unchanged, request kind {i}" for i in range(n)]


def drive(send: Callable[[CallSender, int], Any], check: Callable[[Any], bool], calls: int,
          clients: list[CallSender], into: Phase, idle: Callable[[], bool] | None = None) -> None:
    """Run `calls` calls from one thread per client, each waiting for its call's result (one Celery
    app per thread: a result consumer is not shared between threads); then, with `idle`, wait
    until it says the work the calls left behind is done, and count that time too."""
    lock = threading.Lock()
    next_call = [0]
    errors: list[BaseException] = []

    def worker(client: CallSender) -> None:
        try:
            while True:
                with lock:
                    i = next_call[0]
                    if i >= calls:
                        return
                    next_call[0] += 1
                started = time.perf_counter()
                result = client.wait(send(client, i), timeout=120)
                elapsed = (time.perf_counter() - started) * 1000
                with lock:
                    into.latencies_ms.append(elapsed)
                    into.calls += 1
                    into.failed += 0 if check(result) else 1
        except BaseException as exc:  # noqa: BLE001 - re-raised in the driving thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in clients]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if idle is not None:
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not idle():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not drain within {DRAIN_TIMEOUT_S:.0f} s after a round")
            time.sleep(DRAIN_POLL_S)
    into.wall_s += time.perf_counter() - started


def run_throughput(
    settings: Settings, calls: int, concurrency: int = 8, rounds: int = 3, warmup: int = 30, n_scenarios: int = 16,
    progress: Callable[[str], None] = lambda _: None,
) -> ThroughputResult:
    from workers.bench.baseline import HOP1
    from workers.stack import Stack, start_private_redis, worker_roles

    texts = scenarios(n_scenarios)
    with tempfile.TemporaryDirectory(prefix="fittest-bench-") as tmp:
        redis_proc, url = start_private_redis(Path(tmp))
        bench = settings.model_copy(update={
            "redis_url": url, "result_backend": None, "key_prefix": "bench:", "collection_prefix": "bench_",
            "data_dir": Path(tmp) / "data", "tools_dir": TOOLS_DIR, "evolution_enabled": False,
        })
        env = {
            "FITTEST_REDIS_URL": url, "FITTEST_KEY_PREFIX": bench.key_prefix,
            "FITTEST_COLLECTION_PREFIX": bench.collection_prefix, "FITTEST_DATA_DIR": str(bench.data_dir),
            "FITTEST_TOOLS_DIR": str(TOOLS_DIR), "FITTEST_EVOLUTION_ENABLED": "false",
        }
        if bench.embedding_model_path:
            env["FITTEST_EMBEDDING_MODEL_PATH"] = str(Path(bench.embedding_model_path).resolve())
        with Stack(bench, env=env, log_dir=Path(tmp) / "logs") as stack:
            stack.procs["redis"] = redis_proc
            progress("starting the memory and executor workers")
            for role in ROLES:
                stack.start(role, [*worker_roles()[role].command, "-I", "workers.bench.baseline"])
            stack.wait_for_workers(ROLES, timeout=120)
            clients = [CallSender(bench) for _ in range(concurrency)]
            idle = reader_for(bench).broker_idle

            def send_pipeline(client: CallSender, i: int) -> Any:
                return client.send("resilient_tool_call", scenario=texts[i % len(texts)], input={"n": i})

            def send_baseline(client: CallSender, i: int) -> Any:
                payload = {"scenario": texts[i % len(texts)], "input": {"n": i}}
                return client.celery.send_task(HOP1, args=[payload], queue="selection")

            def pipeline_ok(result: Any) -> bool:
                return result.get("status") == "success" and result.get("tool") == "bench_echo"

            def baseline_ok(result: Any) -> bool:
                return isinstance(result, dict)

            progress(f"warming up ({warmup} calls of each kind)")
            drive(send_pipeline, pipeline_ok, max(warmup, n_scenarios), clients, Phase(), idle)
            drive(send_baseline, baseline_ok, warmup, clients, Phase(), idle)
            pipeline, baseline = Phase(), Phase()
            per_round = [calls // rounds + (1 if r < calls % rounds else 0) for r in range(rounds)]
            for r, n in enumerate(per_round, 1):
                progress(f"round {r}/{rounds}: {n} baseline calls, then {n} pipeline calls")
                drive(send_baseline, baseline_ok, n, clients, baseline, idle)
                drive(send_pipeline, pipeline_ok, n, clients, pipeline, idle)
            for c in clients:
                c.celery.close()
    return ThroughputResult(
        calls=pipeline.calls,
        concurrency=concurrency,
        rounds=rounds,
        scenarios=n_scenarios,
        pipeline_calls_per_s=round(pipeline.per_s, 2),
        baseline_calls_per_s=round(baseline.per_s, 2),
        ratio=round(pipeline.per_s / baseline.per_s, 3) if baseline.per_s else 0.0,
        p50_ms=round(percentile(pipeline.latencies_ms, 0.50), 2),
        p99_ms=round(percentile(pipeline.latencies_ms, 0.99), 2),
        baseline_p50_ms=round(percentile(baseline.latencies_ms, 0.50), 2),
        baseline_p99_ms=round(percentile(baseline.latencies_ms, 0.99), 2),
        pipeline_failed=pipeline.failed,
    )

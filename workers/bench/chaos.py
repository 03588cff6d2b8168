"""`fittest bench chaos`: a stream of calls while the system is broken on purpose, then an audit.

One run starts a private Redis (append-only file on, as the embedded default) and the memory and
execution workers, and streams calls of `chaos_nap` (a tool that takes `--nap-ms`; every twentieth
call is told to fail) in five phases of equal size:

- steady: nothing breaks;
- crash: the execution worker is killed with SIGKILL (its whole process group) while attempts
  run, and a new one is started; what the dead worker held is given back after its lease
  (workers/worker_lease.py), or the visibility timeout, whichever comes first, and a step it had
  taken off the queue but not yet recorded is sent again by the workers' rescue sweep
  (workers/rescue.py) a little later;
- restart: Redis is stopped (SIGTERM) while calls are in flight and started again on the same
  data; `recovery_s` is the time from Redis answering again to the first call sent after it
  completing;
- store down: the memory worker is restarted while the bench holds the embedded vector store's
  lock, so it cannot open the store: calls are served degraded and failure records wait in Redis;
  the lock is held until every call of the phase has its result;
- store back: the bench lets go of the store; the worker opens it and writes what waited.

Then every call's result is collected, and the stores are audited against the results: each
successful attempt must be counted once, each failed one demote the tool once and leave one
failure record. `lost` counts calls without a result; `double_applied` effects counted more than
once; `effects_missing` effects not counted at all. All three should be 0.
"""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from selection.models import CallResult, Severity
from selection.ports import FAILURES, VectorFilter
from selection.quality import FULL_QUALITY_BP, apply_failure_bp, bp_to_quality
from workers.bench.host import BenchResult
from workers.client import CallSender
from workers.settings import Settings

TOOLS_DIR = Path(__file__).parent / "chaos_tools"
TOOL = "chaos_nap@1.0.0"
ROLES = ("memory", "executor")
PHASES = ("steady", "crash", "restart", "store down", "store back")
FAIL_EVERY = 20  # few enough failures that the quality they leave is still above 0
VISIBILITY_S = 20  # the crash phase's takeover waits this long; > the tool's 5..10 s timeouts
LEASE_S = 10  # the workers' lease: what the killed worker held is given back after it, before the visibility timeout
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 5.0, 10.0  # the tool's adaptive timeout stays within these
REDIS_DOWN_S = 2.0
SEND_RETRY_S = 60.0


class PhaseReport(BaseModel):
    name: str
    calls: int = 0
    completed: int = 0
    failed_with_result: int = 0
    lost: int = 0
    degraded: int = 0


class ChaosResult(BenchResult):
    calls: int
    completed: int  # status success
    failed_with_result: int  # ended with another status and a message (the tool was told to fail)
    lost: int  # no result at all
    double_applied: int  # effects (success counted, failure applied, failure record) applied more than once
    effects_missing: int  # effects of a finished attempt never applied
    recovery_s: float  # Redis answering again → first call sent after it completed
    degraded_calls: int  # served while the vector store was down (registry + Redis scores)
    quality_expected: float
    quality_stored: float
    phases: list[PhaseReport]
    elapsed_s: float


def _send(client: CallSender, i: int, run: str, nap_ms: int) -> Any:
    """Send call `i` as fittest's client does, retrying while the broker cannot take it (Redis
    restarting); the same call id, its task id, each time, so a publish that did land and is sent
    again is still one call. The client records the call's first step as in flight: a first message
    that a worker took off the queue as Redis stopped, before recording it as taken, is sent again
    by the rescue sweep (CI lost one such call when the bench sent with Celery's `send_task` alone)."""
    deadline = time.monotonic() + SEND_RETRY_S
    while True:
        try:
            return client.send("resilient_tool_call", queue="selection", scenario="take a short nap", namespace="chaos_nap",
                               max_attempts=1, call_id=f"{run}-{i}", input={"ms": nap_ms, "n": i, "fail": i % FAIL_EVERY == 0})
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _collect(settings: Settings, client: CallSender, handles: list[Any], deadline: float,
             progress: Callable[[str], None]) -> list[CallResult | None]:
    """Each call's result, None for a call that has none by the deadline. A result the client could
    not fetch (its result subscription did not survive the Redis restart) is read once more
    through a fresh connection: what counts is whether the workers stored it."""
    from workers.client import read_call

    results: list[CallResult | None] = []
    for handle in handles:
        task_id = handle.id
        try:
            results.append(read_call(task_id, client.wait(handle, max(1.0, deadline - time.monotonic()))))
            continue
        except Exception as exc:
            progress(f"call {task_id}: {type(exc).__name__}: {str(exc).strip()[:200]}; reading its result afresh")
        fresh = CallSender(settings)
        try:
            results.append(read_call(task_id, fresh.wait(fresh.celery.AsyncResult(task_id), max(1.0, deadline - time.monotonic()))))
        except Exception as exc:
            progress(f"call {task_id} has no result: {type(exc).__name__}: {str(exc).strip()[:200]}")
            results.append(None)
        finally:
            fresh.celery.close()
    return results


def _whereabouts(settings: Settings, call_id: str, phase: str, log_dir: Path) -> str:
    """What is known of a call with no result: its record in flight and the worker log lines that
    name it. A lost call is rare and depends on timing (CI lost one on a loaded host), so the run
    that lost it is the one chance to tell where it went."""
    import redis

    from workers.state.inflight import InflightCalls

    client = redis.Redis.from_url(settings.redis_url)
    try:
        record: object = InflightCalls(client, settings.key_prefix).current(call_id)
    except Exception as exc:
        record = f"unreadable: {type(exc).__name__}: {exc}"
    finally:
        client.close()
    lines = [f"lost in {phase}: call {call_id}; in flight: {record!r}"]
    for log in sorted(log_dir.glob("*.log")):
        named = [line for line in log.read_text(errors="replace").splitlines() if call_id in line]
        lines += [f"  {log.stem}: {line.strip()[:300]}" for line in named[-12:]]
    return "\n".join(lines)


def run_chaos(settings: Settings, calls: int, nap_ms: int = 150, progress: Callable[[str], None] = lambda _: None) -> ChaosResult:
    from workers.memory.edge import EdgeVectorMemory
    from workers.stack import Stack, start_private_redis, worker_roles
    from workers.state import open_state_store

    started = time.monotonic()
    per_phase = [calls // len(PHASES) + (1 if p < calls % len(PHASES) else 0) for p in range(len(PHASES))]
    run = f"chaos{int(time.time())}"
    with tempfile.TemporaryDirectory(prefix="fittest-chaos-") as tmp:
        data = Path(tmp) / "data"
        redis_proc, url = start_private_redis(data)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        env = {
            "FITTEST_REDIS_URL": url, "FITTEST_RESULT_BACKEND": url, "FITTEST_KEY_PREFIX": "chaos:",
            "FITTEST_COLLECTION_PREFIX": "chaos_", "FITTEST_DATA_DIR": str(data), "FITTEST_TOOLS_DIR": str(TOOLS_DIR),
            "FITTEST_EVOLUTION_ENABLED": "false", "FITTEST_MIN_TIMEOUT_S": str(MIN_TIMEOUT_S), "FITTEST_MAX_TIMEOUT_S": str(MAX_TIMEOUT_S),
            "FITTEST_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S), "FITTEST_BREAKER_THRESHOLD": "1000",
            "FITTEST_MEMORY_RETRY_S": "1", "FITTEST_WORKER_LEASE_S": str(LEASE_S),
        }
        if settings.embedding_model_path:
            env["FITTEST_EMBEDDING_MODEL_PATH"] = str(Path(settings.embedding_model_path).resolve())
        bench = settings.model_copy(update={
            "redis_url": url, "result_backend": url, "key_prefix": "chaos:", "collection_prefix": "chaos_",
            "data_dir": data, "tools_dir": TOOLS_DIR, "evolution_enabled": False,
            # The workers' timeouts: the client's record of a call's first step is due when theirs are.
            "min_timeout_s": MIN_TIMEOUT_S, "max_timeout_s": MAX_TIMEOUT_S, "visibility_timeout_s": float(VISIBILITY_S),
        })
        with Stack(bench, env=env, log_dir=Path(tmp) / "logs") as stack:
            stack.procs["redis"] = redis_proc

            def start(role: str) -> None:
                stack.start(role, worker_roles()[role].command)
                stack.wait_for_workers([role], timeout=120)

            progress("starting the memory and executor workers")
            for role in ROLES:
                start(role)
            client = CallSender(bench)
            client.wait(client.send("resilient_tool_call", queue="selection", scenario="warm up", namespace="chaos_nap", input={}), 120)
            sent: list[tuple[str, Any]] = []

            def stream(client: CallSender, phase: str, n: int, then: Callable[[], None] | None = None, after: int = 0) -> None:
                """Send n calls of `phase`; run `then` once `after` of them are sent. The client is an
                argument, not the closure's, so that `del client` below drops the last reference."""
                for k in range(n):
                    if then is not None and k == after:
                        then()
                    sent.append((phase, _send(client, len(sent), run, nap_ms)))
                    time.sleep(0.02)

            progress("steady")
            stream(client, "steady", per_phase[0])

            def crash() -> None:
                time.sleep(nap_ms / 1000)  # attempts are running
                progress("crash: SIGKILL to the execution worker's process group, then a new worker")
                stack.stop("executor", signal.SIGKILL)
                start("executor")

            stream(client, "crash", per_phase[1], crash, after=per_phase[1] // 2)

            back_at = [0.0]

            def restart_redis() -> None:
                time.sleep(nap_ms / 1000)
                progress(f"restart: Redis down for {REDIS_DOWN_S:g} s, then up on the same data")
                stack.stop("redis", signal.SIGTERM, timeout=30)
                time.sleep(REDIS_DOWN_S)
                stack.procs["redis"], _ = start_private_redis(data, port)
                back_at[0] = time.monotonic()

            first_after = per_phase[2] // 2
            stream(client, "restart", per_phase[2], restart_redis, after=first_after)
            client.wait(sent[sum(per_phase[:2]) + first_after][1], 120)
            recovery_s = time.monotonic() - back_at[0]

            progress("store down: the memory worker restarts and cannot open the vector store")
            stack.stop("memory", signal.SIGTERM, timeout=60)
            holder = EdgeVectorMemory(data / "qdrant", "chaos_")
            holder.ensure_collections()
            try:
                start("memory")
                stream(client, "store down", per_phase[3])
                # Held until the phase's calls are answered: a fixed wait let a slow worker (loading
                # its model) reach them only after the store was back, so none was served degraded.
                answered_by = time.monotonic() + 120
                for _, handle in sent[-per_phase[3]:]:
                    try:
                        client.wait(handle, max(1.0, answered_by - time.monotonic()))
                    except Exception as exc:  # counted where every result is collected: lost, or read afresh
                        progress(f"store down: call {handle.id} has no result yet: {type(exc).__name__}")
            finally:
                holder.close()
            time.sleep(1.5)  # past the worker's FITTEST_MEMORY_RETRY_S: its next call opens the store
            progress("store back")
            stream(client, "store back", per_phase[4])

            progress(f"collecting {len(sent)} results")
            results = _collect(bench, client, [handle for _, handle in sent], time.monotonic() + VISIBILITY_S + 120, progress)
            for (phase, handle), result in zip(sent, results):
                if result is None:
                    progress(_whereabouts(bench, handle.id, phase, Path(tmp) / "logs"))
            phase_of = [phase for phase, _ in sent]
            sent.clear()
            state = open_state_store(bench)
            expected_failures = sum(1 for r in results if r and r.status == "failed" and r.attempts)
            expected_successes = sum(1 for r in results if r and r.status == "success")
            warm_up_success = 1
            progress("waiting for the feedback queue to settle")
            settle = time.monotonic() + 60
            while time.monotonic() < settle:
                stats = state.stats([TOOL])[TOOL]
                if (stats.successes, stats.failures) == (expected_successes + warm_up_success, expected_failures):
                    break
                time.sleep(0.5)
            time.sleep(2.0)  # a late second application would show now
            stats = state.stats([TOOL])[TOOL]
            client.close()
            stack.stop("memory", signal.SIGTERM, timeout=60)  # it owns the store; the audit opens it next
            stack.stop("executor", signal.SIGTERM, timeout=60)
        audit = EdgeVectorMemory(data / "qdrant", "chaos_")
        try:
            records = audit.count(FAILURES, VectorFilter.where(tool=TOOL))
        finally:
            audit.close()

    quality_bp, failures = FULL_QUALITY_BP, 0
    for _ in range(expected_failures):
        quality_bp, failures = apply_failure_bp(quality_bp, failures, Severity.high)
    diffs = [
        stats.successes - (expected_successes + warm_up_success),
        stats.failures - expected_failures,
        records - expected_failures,
    ]
    reports = []
    for name in PHASES:
        mine = [r for phase, r in zip(phase_of, results) if phase == name]
        reports.append(PhaseReport(
            name=name, calls=len(mine), completed=sum(1 for r in mine if r and r.status == "success"),
            failed_with_result=sum(1 for r in mine if r and r.status != "success"),
            lost=sum(1 for r in mine if r is None), degraded=sum(1 for r in mine if r and r.degraded),
        ))
    return ChaosResult(
        calls=len(results),
        completed=sum(r.completed for r in reports),
        failed_with_result=sum(r.failed_with_result for r in reports),
        lost=sum(r.lost for r in reports),
        double_applied=sum(d for d in diffs if d > 0),
        effects_missing=sum(-d for d in diffs if d < 0),
        recovery_s=round(recovery_s, 2),
        degraded_calls=sum(r.degraded for r in reports),
        quality_expected=bp_to_quality(quality_bp),
        quality_stored=stats.quality,
        phases=reports,
        elapsed_s=round(time.monotonic() - started, 1),
    )

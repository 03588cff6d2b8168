"""Health of a running system: Redis, the vector store, the embedding model and the workers.

The embedded vector store and the model live inside the memory worker, and a second process must
not open the store (its shard directories are locked by their owner). So the memory worker answers
for them itself: `fittest_health` is a Celery remote-control command, answered by every worker's
consumer like `ping` (even while its pool is busy), and a worker that consumes the `selection`
queue adds a live check of its store and model to the answer. A Qdrant server is checked directly.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
from celery.worker.control import inspect_command
from kombu.exceptions import OperationalError
from pydantic import BaseModel, Field, ValidationError
from redis import Redis
from redis.exceptions import InvalidResponse, OutOfMemoryError, RedisError

from evolution.served_version import head_version
from selection.manifest import ManifestError, tool_key
from selection.models import Promotion
from selection.registry import ToolRegistry
from workers.app import MEMORY_QUEUE
from workers.redis_connection import write_refusal
from workers.settings import Settings
from workers.state.stacks import other_stacks

# "warn": healthy still (exit 0, a probe passes), but something an operator should fix is named in
# its detail: restarting a process cannot fix a refused manifest, and the other tools serve meanwhile.
Status = Literal["ok", "warn", "fail", "skip"]
CONTROL_COMMAND = "fittest_health"
ROLES = ("memory", "executor", "evolver")
# The queues each worker role consumes (the Procfile's and docker-compose's -Q; a test holds them to
# the Procfile). A role is up when its queues are: by its own node, or by any other (QA 61c-3: a
# memory worker started without the feedback queue was "ok" while every judgement and every
# outcome's feedback waited, and one executor consuming the evolution queue too was "no answer from
# evolver").
ROLE_QUEUES: dict[str, tuple[str, ...]] = {"memory": ("selection", "feedback", "learning"), "executor": ("execution",),
                                            "evolver": ("evolution",)}
BEAT = "beat"  # a role, but no Celery worker: it answers by the lock it holds (`check_beat`)
# Procfile roles that are no Celery worker but serve HTTP on this host: each is asked at its own
# health page (QA 50e L6: `-w flower` said "unknown role", and nothing checked Flower or the metrics
# endpoint a Prometheus scrapes). Only when named: `fittest up --without flower` is a whole stack.
SERVED = ("flower", "metrics", "toolserver")
PROBE_TEXT = "fittest health check"
# Free space below which the embedded store is about to fail: its memory-mapped files grow by a chunk
# of ~32 MB per collection at a time, and a rebuild after a crash takes them again (QA Q: an empty
# store took ~52 MB, and a full disk killed the memory worker with SIGBUS six times in 40 s).
DISK_FLOOR_MB = 128


class Check(BaseModel):
    name: str = ""  # "" in a worker's answer, which names its checks by their fields (`WorkerHealth`)
    status: Status
    detail: str = ""
    ms: float = 0.0


class WorkerHealth(BaseModel):
    """A worker's answer to the health command: the queues it consumes, and for the memory worker,
    which owns them, its store, its model and the tools it serves. `problem`: an answer that is
    none of that (a worker of another release), said rather than read as if it were."""

    queues: list[str] = Field(default_factory=list)
    store: Check | None = None
    model: Check | None = None
    tools: Check | None = None
    problem: str | None = None

    @classmethod
    def of(cls, answer: Any) -> WorkerHealth:
        try:
            return cls.model_validate(answer)
        except ValidationError as exc:
            return cls(problem=f"its answer to {CONTROL_COMMAND} is not understood: {exc.errors(include_url=False)[0]['msg']}")


class HealthReport(BaseModel):
    healthy: bool
    checks: list[Check]
    workers: dict[str, WorkerHealth] = Field(default_factory=dict)  # node name -> its answer


# ------------------------------------------------------------------------------ worker side
def _local_services() -> dict[str, Check]:
    """What this worker process can say about its store, its model and its tools (it owns them)."""
    from selection.ports import EVOLUTIONS, TOOLS
    from workers.pending import PendingWrites, write_refusal
    from workers.retention import HISTORY
    from workers.runtime import runtime

    rt = runtime()

    def store() -> tuple[Status, str]:
        history = ", ".join(f"{rt.memory.count(c)} {c}" for c in HISTORY)
        detail = (f"{rt.memory.count(TOOLS)} tool vectors; history {history} "
                  f"(the newest {rt.settings.history_max_points} of each kept, and every judgement); "
                  f"{rt.memory.count(EVOLUTIONS)} evolution patterns (all kept)")
        waiting = len(PendingWrites(rt.redis, rt.settings.key_prefix))
        if (refusal := write_refusal()) is not None:  # it reads, but takes no write (QA: its files deleted)
            return "fail", (f"refuses writes for {time.time() - refusal.since:.0f} s ({waiting} waiting in Redis, replayed "
                            f"once it takes one; a restart of the memory worker opens the store afresh): {refusal.error}")
        if waiting:
            detail += f"; {waiting} vector writes waiting to be replayed"
        if rt.settings.qdrant_url is not None:
            return "ok", detail
        status, room = disk_room(rt.settings.data_dir)
        return status, f"{detail}; {room}"

    def model() -> tuple[Status, str]:
        vector = rt.embedder.embed_one(PROBE_TEXT)
        return "ok", f"{len(vector)}-dim vectors, {rt.embedder.precision} model"

    registry = rt.registry
    return {"store": _timed("", store), "model": _timed("", model),
            "tools": tools_dir_check(rt.settings, len(registry.all()), registry.refused(),
                                     _promoted_missing_now(rt.state, registry)).model_copy(update={"name": ""})}


def _promoted_missing_now(state: Any, registry: ToolRegistry) -> list[str]:
    """`promoted_missing` of the promotions as Redis has them, or none when Redis cannot say: the
    store, model and tools answers do not wait on it (review 60f)."""
    try:
        return promoted_missing(state.promotions(registry.namespaces()), registry)
    except RedisError:
        return []


def promoted_missing(promotions: Mapping[str, Promotion | None], registry: ToolRegistry) -> list[str]:
    """The versions promotions serve (`head_version`) that no manifest gives: a Redis restored
    without its FITTEST_DATA_DIR, whose evolved/ held them. Their namespaces are served by an
    older version untold, and `show` called the lost one deprecated (QA 60c F3)."""
    return sorted(tool_key(ns, v) for ns, p in promotions.items()
                  if (v := head_version(p)) is not None and tool_key(ns, v) not in registry)


def tools_dir_check(settings: Settings, served: int | None = None, refused: Sequence[ManifestError] = (),
                    missing: Sequence[str] = ()) -> Check:
    """Whether FITTEST_TOOLS_DIR is there to serve from (`served`: the versions the memory worker
    serves, when it says). Gone, its versions stay registered as last read but are not run
    (workers/tasks/execution.py `code_gone`), and a restart would serve nothing from it (QA resilience: moved away, health said healthy).
    `refused`: the manifests the memory worker does not serve as they read now (its registry's
    `refused()`, kept current by the tools watch), each named with its reason in a warning: a team that
    checks its onboarding with `fittest health` saw "ok" while 3 of its 12 manifests were dropped
    (QA onboarding M3). A warning, not a failure: the other tools serve, and a probe that failed
    would have the stack restarted, which reads the same files. `missing`: promoted versions no
    manifest gives (`promoted_missing`), a warning too."""
    started = time.perf_counter()
    serving = "" if served is None else f"{served} tool versions served; "
    ok = settings.tools_dir.is_dir()
    detail = (f"{serving}FITTEST_TOOLS_DIR {settings.tools_dir} is a directory" if ok else
              f"{serving}FITTEST_TOOLS_DIR {settings.tools_dir} is not a directory: its tools stay registered, not "
              "run, until it is back, and a restart would serve none of them")
    if manifests := list(refused):
        detail += (f"; {len(manifests)} manifest{'s' if len(manifests) != 1 else ''} refused "
                   f"(`fittest tools --refused` lists them): " + "; ".join(str(e) for e in manifests))
    if missing:
        detail += (f"; promotions serve {', '.join(missing)}, which no manifest gives (FITTEST_DATA_DIR/evolved lost, "
                   "or Redis restored without it?): an older version serves in their place. Restore the directory, or "
                   "`fittest rollback` each")
    status: Status = "fail" if not ok else "warn" if manifests or missing else "ok"
    return Check(name="tools", status=status, detail=detail, ms=(time.perf_counter() - started) * 1000)


def _room_here(data_dir: Path) -> str:
    """"; " and what this host sees of the data directory's room when it is short, else ""."""
    try:
        status, detail = disk_room(data_dir)
    except OSError:  # not on this host, or not made yet
        return ""
    return f"; {detail}" if status == "fail" else ""


def disk_room(data_dir: Path, floor_mb: float = DISK_FLOOR_MB) -> tuple[Status, str]:
    """The free space of the embedded store's filesystem, failed below `floor_mb`."""
    free = shutil.disk_usage(data_dir).free / 2**20
    if free < floor_mb:
        return "fail", (f"only {free:.0f} MB free in FITTEST_DATA_DIR ({data_dir}): the store's memory-mapped files "
                        f"grow ~32 MB a collection at a time, and without room the memory worker dies with SIGBUS; "
                        f"free some, or move the data directory (keep {floor_mb:.0f} MB or more)")
    return "ok", f"{free:.0f} MB free in FITTEST_DATA_DIR"


@inspect_command(name=CONTROL_COMMAND)
def fittest_health(state: Any, **_: Any) -> dict[str, Any]:
    """fittest's health probe: the queues this worker consumes, and its store and model when it owns them."""
    queues = sorted(q.name for q in state.consumer.task_consumer.queues) if state.consumer.task_consumer else []
    answer = WorkerHealth(queues=queues, **(_local_services() if MEMORY_QUEUE in queues else {}))
    return answer.model_dump(mode="json", exclude_none=True)


# ------------------------------------------------------------------------------ probe side
def _timed(name: str, fn: Callable[[], tuple[Status, str]]) -> Check:
    started = time.perf_counter()
    try:
        status, detail = fn()
    except Exception as exc:  # noqa: BLE001 - every failure becomes a failed check
        status, detail = "fail", f"{type(exc).__name__}: {exc}"
    return Check(name=name, status=status, detail=detail, ms=round((time.perf_counter() - started) * 1000, 2))


def check_redis(settings: Settings, timeout: float) -> Check:
    from workers.client import refusal
    from workers.default_queue import misrouted_note
    from workers.redis_connection import probe_client

    def probe() -> tuple[Status, str]:
        client = probe_client(settings, timeout)
        try:
            try:
                client.ping()
                version = f"redis {client.info('server').get('redis_version', '?')}"
            except (AttributeError, TypeError) as exc:  # redis-py's reading of a greeting it did not expect ("+OK")
                raise InvalidResponse(f"{type(exc).__name__}: {exc}") from exc  # told below, as any other server's
            status, memory = redis_memory(client, settings.key_prefix)
            if (misrouted := misrouted_note(client)) and status != "fail":
                status, memory = "warn", "; ".join(filter(None, [memory, misrouted]))
            return status, f"{version}; {memory}" if memory else version
        except RedisError as exc:
            if (why := refusal(exc, settings.redis_url, settings.redis_tls())) is not None:  # it answered: say what it is
                return "fail", f"Redis at FITTEST_REDIS_URL {why} ({exc})"
            return "fail", f"cannot reach Redis (FITTEST_REDIS_URL): {exc}"
        finally:
            client.close()

    return _timed("redis", probe)


def _served_at(settings: Settings, role: str) -> tuple[str, str, str]:
    """Where a served role answers on this host: its URL, what the page must hold, and the setting
    that names its port. An address of every interface is asked on the loopback."""
    from workers.procfile import example_service_port

    def host(address: str) -> str:  # (an IPv6 address in brackets, as a URL has it: QA 51d)
        bare = address.strip("[]")
        return "127.0.0.1" if bare in ("", "0.0.0.0", "::") else f"[{bare}]" if ":" in bare else bare

    if role == "flower":
        return (f"http://{host(os.environ.get('FLOWER_ADDRESS', ''))}:{settings.flower_port}/healthcheck", "OK",
                "FITTEST_FLOWER_PORT")
    if role == "metrics":
        return f"http://{host(settings.metrics_addr)}:{settings.metrics_port}/metrics", "fittest_", "FITTEST_METRICS_PORT"
    return f"http://127.0.0.1:{example_service_port()}/health", "ok", "FITTEST_EXAMPLE_HTTP_PORT"


def _says(response: httpx.Response, holds: str) -> bool:
    """Whether a served role's page says what it should: the example service's JSON status, else text it holds."""
    if response.headers.get("content-type", "").startswith("application/json"):
        try:
            return response.json().get("status") == holds
        except (ValueError, AttributeError):
            return False
    return holds in response.text


def check_served(settings: Settings, role: str, timeout: float) -> Check:
    """Whether a served role (Flower, the metrics endpoint, the example tool service) answers its page."""

    def probe() -> tuple[Status, str]:
        url, holds, port_setting = _served_at(settings, role)  # a port setting that is no port fails the check
        try:
            response = httpx.get(url, timeout=timeout)
        except httpx.HTTPError as exc:
            return "fail", f"nothing answers {url} ({type(exc).__name__}: {exc}): start the {role} role, or set {port_setting}"
        if response.status_code != 200 or not _says(response, holds):
            return "fail", f"{url} answered {response.status_code} without {holds!r}: is it {role} on {port_setting}?"
        return "ok", f"{url} answers"

    return _timed(role, probe)


def redis_memory(client: Redis, prefix: str) -> tuple[Status, str]:
    """Whether Redis takes writes: past its maxmemory under `noeviction` it answers PING but refuses
    writes, and each worker ends on the first it meets ("Unrecoverable error: OutOfMemoryError";
    QA Q: `fittest up` gave up on the stack within a minute; `up` refuses to start on it). Tried
    with a write of a few bytes,
    which a Redis near its limit may still take while it refuses a larger message."""
    info = client.info("memory")
    used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
    policy = str(info.get("maxmemory_policy", "noeviction"))
    usage = f"{used / 2**20:.1f} of its maxmemory {limit / 2**20:.1f} MB used (maxmemory-policy {policy})" if limit else ""
    if isinstance(refused := write_refusal(client, f"{prefix}health:write"), OutOfMemoryError):
        return "fail", f"Redis refuses writes: {usage}; raise its maxmemory or free memory"
    if refused is not None:
        return "fail", f"Redis refuses writes ({refused}): point FITTEST_REDIS_URL at the primary, not a read-only replica"
    if limit and policy != "noeviction":  # a warning, as the README says (QA 57a L1: it was "ok")
        return "warn", (f"{usage}: past it Redis evicts keys fittest keeps (results, idempotency keys, the beat's "
                        "schedule); set maxmemory-policy noeviction")
    return "ok", usage


def check_beat(settings: Settings, timeout: float) -> Check:
    """Whether a beat is running: it holds its lock while it ticks (redbeat's, extended every
    BEAT_MAX_INTERVAL_S, expiring BEAT_LOCK_TIMEOUT_S after its last tick), and says when it last
    sent the weights' retrain. Without a beat nothing retrains the weights and the tool classifier,
    or prunes the history to FITTEST_HISTORY_MAX_POINTS, and nothing else says so (QA ops: a beat
    stopped for 60 s, its lock gone, and health said healthy)."""
    from redbeat.schedulers import RedBeatSchedulerEntry, ensure_conf

    from workers.app import RETRAIN_ENTRY, make_app
    from workers.redis_connection import probe_client

    def probe() -> tuple[Status, str]:
        app = make_app(settings)
        client = probe_client(settings, timeout)
        try:
            lock_key = ensure_conf(app).lock_key
            held_ms = client.pttl(lock_key)
            definition, raw = client.hmget(RedBeatSchedulerEntry.generate_key(app, RETRAIN_ENTRY), "definition", "meta")
            others = other_stacks(client, settings.key_prefix) if held_ms == -2 else None
        except RedisError as exc:
            return "fail", f"cannot reach Redis (FITTEST_REDIS_URL): {exc}"
        finally:
            client.close()
            app.close()
        meta = RedBeatSchedulerEntry.decode_meta(raw)
        # redbeat sets last_run_at when it creates the entry: only a run count says it was sent
        # (QA selection F6: "last sent 18 s ago" on a fresh stack where nothing had run)
        last = meta.get("last_run_at") if meta.get("total_run_count") else None
        # the interval the beat was started with, which its entry keeps, not this shell's setting (QA learning F5)
        every = (RedBeatSchedulerEntry.decode_definition(definition)["schedule"].run_every.total_seconds() if definition
                 else settings.retrain_interval_s)
        sent = (f"fittest.retrain_weights last sent {time.time() - last.timestamp():.0f} s ago" if last is not None
                else "fittest.retrain_weights not sent yet") + f" (every {every:g} s)"
        if held_ms == -2 and others:  # QA ops L8: "start the beat role", where the beat ran under another prefix
            return "fail", (f"no beat holds its lock ({lock_key}), and no memory worker has served FITTEST_KEY_PREFIX "
                            f"{settings.key_prefix} on this Redis, where one has served {', '.join(others)}: is this "
                            "shell's prefix the workers'?")
        if held_ms == -2:  # no such key
            return "fail", (f"no beat holds its lock ({lock_key}): the weights and the tool classifier are not "
                            f"retrained, nor the history pruned; start the beat role; {sent}")
        return "ok", f"a beat holds its lock ({lock_key}); {sent}"

    return _timed(BEAT, probe)


def ask_workers(settings: Settings, timeout: float, destination: list[str] | None = None) -> dict[str, WorkerHealth]:
    """Every worker's answer to the health command (node name -> answer) within `timeout`."""
    from workers.app import make_app

    app = make_app(settings)
    try:
        replies = app.control.broadcast(CONTROL_COMMAND, reply=True, timeout=timeout, destination=destination) or []
    finally:
        app.close()
    return {node: WorkerHealth.of(answer) for reply in replies for node, answer in reply.items()}


def _matches(node: str, wanted: str) -> bool:
    """A role (`memory`) matches every node of it (`memory@host`); a node name matches itself."""
    return node == wanted if "@" in wanted else node.partition("@")[0] == wanted


def check_workers(answers: dict[str, WorkerHealth], wanted: list[str], asked_only: list[str] | None = None) -> Check:
    """A node name (`executor@host`) is up when it answered; a role when every queue of it is
    consumed by a node that answered. `asked_only`: the nodes the health command went to, when not
    to every worker (QA U: asked of executor@nohost alone, "answered: none" read as if no worker ran)."""
    consumed = {q for answer in answers.values() for q in answer.queues}
    problems: list[str] = []
    for w in wanted:
        if "@" in w:
            if w not in answers:
                problems.append(f"no answer from {w}")
        elif w not in ROLES:  # QA ops: a typo read as a role down
            problems.append(f"{w}: not a role (the roles: {', '.join((*ROLES, BEAT, *SERVED))})")
        elif unconsumed := [q for q in ROLE_QUEUES[w] if q not in consumed]:
            named = [node for node in answers if _matches(node, w)]
            problems.append(f"no worker consumes the {' and '.join(unconsumed)} queue{'s' if len(unconsumed) > 1 else ''} of "
                            f"{w} ({', '.join(named)} answered without {'them' if len(unconsumed) > 1 else 'it'})" if named
                            else f"no answer from {w} (no worker consumes its queue{'s' if len(unconsumed) > 1 else ''} "
                            f"{', '.join(unconsumed)})")
    nodes = ", ".join(f"{node} ({','.join(a.queues) or a.problem or 'no queue'})" for node, a in sorted(answers.items())) or "none"
    if problems:
        asked = f"; asked only {', '.join(asked_only)}" if asked_only else ""
        return Check(name="workers", status="fail", detail=f"{'; '.join(problems)} (answered: {nodes}{asked})")
    return Check(name="workers", status="ok", detail=f"answered: {nodes}")


def check_qdrant_server(settings: Settings, timeout: float) -> Check:
    def probe() -> tuple[Status, str]:
        headers = {"api-key": settings.qdrant_api_key.get_secret_value()} if settings.qdrant_api_key else {}
        url = settings.qdrant_url.rstrip("/") + "/readyz"  # type: ignore[union-attr]
        response = httpx.get(url, headers=headers, timeout=timeout)
        if response.status_code == 200:
            return "ok", f"Qdrant server at {settings.qdrant_url} is ready"
        return "fail", f"Qdrant server at {settings.qdrant_url} answered {response.status_code}"

    return _timed("store", probe)


def _from_memory_worker(name: Literal["store", "model", "tools"], answers: dict[str, WorkerHealth]) -> Check | None:
    owners = {node: check for node, a in answers.items() if (check := getattr(a, name)) is not None}
    owners |= {node: Check(status="fail", detail=a.problem) for node, a in answers.items() if a.problem}
    if not owners:
        return None
    failed = {node: c for node, c in owners.items() if c.status != "ok"}  # a warning is shown before an ok too
    node, check = next(iter(failed.items())) if failed else next(iter(owners.items()))
    return Check(name=name, status=check.status, detail=f"{check.detail} (checked by {node})", ms=round(check.ms, 2))


def model_files_problem(settings: Settings) -> str | None:
    """What is wrong with the model's files as this host sees them, read without loading the model:
    a file missing, or vectors of another size than FITTEST_EMBEDDING_DIM (config.json's
    hidden_size); None when nothing is seen wrong, or FITTEST_EMBEDDING_MODEL_PATH is unset."""
    path = settings.embedding_model_path
    if path is None:
        return None
    missing = [f for f in ("model.onnx", "tokenizer.json", "config.json") if not (path / f).is_file()]
    if missing:
        return f"{path} lacks {', '.join(missing)} (FITTEST_EMBEDDING_MODEL_PATH)"
    try:
        size = json.loads((path / "config.json").read_text(encoding="utf-8")).get("hidden_size")
    except (OSError, ValueError, AttributeError):
        return None  # the model's loading tells what is wrong with it
    if isinstance(size, int) and size != settings.embedding_dim:
        return f"the model in {path} makes {size}-dimensional vectors but FITTEST_EMBEDDING_DIM is {settings.embedding_dim}"
    return None


def check_model_files(settings: Settings, not_asked: str = "") -> Check:
    """The model's files as this host sees them, where no memory worker said (`not_asked`: why none was asked)."""
    path = settings.embedding_model_path
    unanswered = not_asked or "no memory worker answered"
    if path is None:
        return Check(name="model", status="skip", detail=f"{unanswered}; FITTEST_EMBEDDING_MODEL_PATH unset")
    if (problem := model_files_problem(settings)) is not None:
        return Check(name="model", status="fail", detail=problem)
    return Check(name="model", status="ok", detail=f"files present in {path}; not loaded ({unanswered})")


def health(settings: Settings, checks: list[str], workers: list[str], timeout: float) -> HealthReport:
    """Run the named checks (redis, workers, store, model, tools, beat, and the served roles); healthy
    when none failed (a warning passes)."""
    results: list[Check] = []
    workers = [w for w in workers if w not in SERVED]
    redis_check = check_redis(settings, timeout)
    if "redis" in checks:
        results.append(redis_check)
    answers: dict[str, WorkerHealth] = {}
    destination: list[str] | None = None  # every worker
    # A warning (a message in Celery's default queue, a policy that evicts) leaves Redis answering:
    # the other checks still run (QA 57a H1: one misrouted send_task failed every probe).
    not_asked = "" if redis_check.status != "fail" else f"not asked: {redis_check.detail}"
    if not not_asked and {"workers", "store", "model", "tools"} & set(checks):
        exact = [w for w in workers if "@" in w]
        destination = exact if exact and len(exact) == len([w for w in workers if w != BEAT]) else None
        try:
            answers = ask_workers(settings, timeout, destination)
        except (RedisError, OperationalError) as exc:  # a Redis that answers PING but refuses the broadcast's writes
            not_asked = f"not asked: {type(exc).__name__}: {exc}"
    if "workers" in checks:
        if not_asked:
            results.append(Check(name="workers", status="fail", detail=not_asked))
        else:
            results.append(check_workers(answers, [w for w in workers if w != BEAT], destination))
    # Named workers none of which is a memory worker: nobody here can answer for its store and model
    # (QA ops: `-w executor@host` failed the store check of a memory worker that was fine).
    unasked = not any(w.partition("@")[0] == "memory" for w in workers)
    if unasked:
        for name in ("store", "model"):
            if name in checks and not (name == "store" and settings.qdrant_url):
                results.append(Check(name=name, status="skip", detail="not asked: no memory worker among --worker"))
        checks = [c for c in checks if c not in ("store", "model") or (c == "store" and settings.qdrant_url)]
    if "store" in checks:
        if settings.qdrant_url:  # the server's own readiness, then whether the memory worker's writes are taken
            server, worker = check_qdrant_server(settings, timeout), _from_memory_worker("store", answers)
            results.append(worker if server.status == "ok" and worker is not None and worker.status == "fail" else server)
        else:
            # QA 50e: "no memory worker answered for it" of workers never asked, Redis away; with the
            # room this host sees there, which a memory worker dying of a full disk cannot say (QA 59d L3)
            results.append(_from_memory_worker("store", answers) or Check(
                name="store", status="fail",
                detail=f"embedded store under {settings.data_dir / 'qdrant'}: {not_asked or 'no memory worker answered for it'} "
                f"(only the process that owns it can open it){_room_here(settings.data_dir)}"))
    if "model" in checks:
        results.append(_from_memory_worker("model", answers) or check_model_files(settings, not_asked))
    if "tools" in checks:  # where no memory worker says, as this host sees the directory
        results.append(_from_memory_worker("tools", answers) or tools_dir_check(settings))
    if BEAT in checks:
        results.append(check_beat(settings, timeout) if redis_check.status != "fail"
                       else Check(name=BEAT, status="fail", detail=f"not asked: {redis_check.detail}"))
    results.extend(check_served(settings, role, timeout) for role in SERVED if role in checks)
    return HealthReport(healthy=all(c.status != "fail" for c in results), checks=results, workers=answers)

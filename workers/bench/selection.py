"""`fittest bench selection`: how well selection picks the right tool, and how much it learns, on an
external benchmark (MetaTool: `{name: description}` tools and `Query,Tool` rows).

Each tool becomes one registered version; the queries stream in a seeded random order through the
workers' own code: `Selector.plan` for the ranking, then `workers/outcomes.py` (`apply_failure` per
failed attempt, `apply_outcome` per call, execution records stored as `fittest.learn` stores them),
with Celery bypassed. An attempt succeeds iff the tool's name is the row's `Tool`
(case-insensitive); a call has up to 5 attempts. Three streams of the same queries, each on a
fresh private state (its own Redis key prefix and Qdrant Edge collections in a temporary
directory, removed afterwards), nothing learned before a stream starts:

- the policy under test, learning from every earlier query, and retraining the weights and the
  tool classifier (`retrain_now`, what the beat runs) every `retrain_every` queries;
- the same policy with learning off (zero-shot: nothing is recorded);
- the `seed` policy, learning the same way (the baseline to beat);
- with `reveal_missed`, the policy under test once more, told the right tool of every query its 5
  attempts missed (recorded as a 6th, successful attempt, which no number counts): what learning
  from outcomes could reach if a miss taught as much as a hit. The real streams never learn a
  missed query's tool; this one bounds how much that costs them.

A wrong tool is recorded as a `bad_output` failure of that tool: it ran, and its output did not
serve the query. Selection time covers the whole `Selector.plan` of one query, embedding
included (each query is new to the embedder's cache, one the file repeats too); the result names
the embedding precision that ran (FITTEST_EMBEDDING_INT8).
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
import shutil
import tempfile
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ValidationError

from selection.manifest import ToolManifest
from selection.models import CallRequest, FailureClass, FailureMark, OutcomeRecord, ToolExecutionResult
from selection.percentile import percentile
from workers.bench.host import BenchResult
from workers.bench.leftovers import RENEW_S, mark_alive, mark_owner, sweep
from workers.outcomes import apply_failure, apply_outcome, execution_records, store_executions
from workers.settings import Settings

MAX_ATTEMPTS = 5
RETRAIN_EVERY = 500  # queries between two retrains of a learning stream: the beat's place in the stream
BENCH_URL = "http://127.0.0.1:9/never-called"  # the bench decides outcomes; no tool runs
TARGETS = {"top1_second_half": 0.80, "resolved_within_5": 0.95, "mean_attempts": 1.5, "p99_select_ms": 15.0}

Progress = Callable[[str, int, int], None]


class BenchInputError(ValueError):
    """The tools or queries file cannot be used; the message names the file, row and problem."""


class StreamResult(BaseModel):
    name: str
    policy: str
    learning: bool
    queries: int
    top1: float
    top1_first_half: float
    top1_second_half: float
    resolved_within_5: float
    mean_attempts: float  # the attempts a query used; an unresolved query counts 5 (since session 24)
    p50_select_ms: float
    p99_select_ms: float
    mean_first_probability: float  # how sure the policy was of its first choice, on average
    embedding_precision: str  # the embedding model that ran: its int8 copy or the fp32 file
    revealed: int = 0  # missed queries whose right tool the stream was told (reveal_missed)
    retrains: int  # retrains that stored new weights or a new classifier
    retrain_s: float  # time they took (not part of any selection's)
    elapsed_s: float


class SelectionBenchResult(BenchResult):
    queries: int
    policy: str
    seed: int
    tools: int
    top1_first_half: float
    top1_second_half: float
    resolved_within_5: float
    mean_attempts: float
    zero_shot_top1: float
    seed_top1_second_half: float
    p50_select_ms: float
    p99_select_ms: float
    embedding_precision: str
    retrain_every: int  # queries between two retrains (weights and tool classifier) of a learning stream
    targets: dict[str, float]
    streams: list[StreamResult]
    elapsed_s: float


def namespace_of(name: str) -> str:
    """A benchmark tool name as a fittest namespace, its words in snake case as fittest's own tool
    names are written (`PDF&URLTool` -> `pdf_url_tool`, `ResearchHelper` -> `research_helper`).
    Accents are dropped (`Ünïcode` -> `unicode`); a name with letters or digits a namespace cannot
    spell otherwise (天气Tool) ends in a hash of the name: its Latin words alone made 天气Tool and
    股票Tool one namespace, and the file was refused (QA 51b L5)."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    slug = "_".join(w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", folded))
    slug = slug if slug[:1].isalpha() else f"t_{slug}"
    if any(c.isalnum() and not c.isascii() for c in folded):
        return f"{slug.rstrip('_')[:55]}_{hashlib.sha1(name.strip().encode()).hexdigest()[:8]}"
    return slug[:64]  # a namespace has at most 64 characters (two names cut alike are refused by load_tools)


def load_tools(path: Path) -> tuple[list[ToolManifest], dict[str, str]]:
    """Manifests from `{name: description}`, and namespace -> the benchmark's name (lower case)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchInputError(f"{path}: cannot read the tools JSON: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise BenchInputError(f"{path}: expected a non-empty JSON object {{name: description}}")
    manifests: list[ToolManifest] = []
    names: dict[str, str] = {}
    spelled: dict[str, str] = {}  # a name in lower case -> as the file spells it
    for name, description in data.items():
        if not name.strip():  # QA AC: it ran, as a tool no query can name (a blank Tool is refused)
            raise BenchInputError(f"{path}: a tool has a blank name")
        if not isinstance(description, str):
            raise BenchInputError(f"{path}: tool {name!r}: its description must be a string, not {description!r}")
        if not description.strip():
            raise BenchInputError(f"{path}: tool {name!r} has no description")
        same = spelled.setdefault(name.strip().lower(), name)
        if same != name:  # a query's Tool is matched whatever its case: it would name both (QA J)
            raise BenchInputError(f"{path}: tools {same!r} and {name!r} differ only in case")
        ns = namespace_of(name)
        if ns in names:  # as the file spells them (QA 59c L3: "tools 'a' and 'a'" of A and a)
            raise BenchInputError(f"{path}: tools {spelled[names[ns]]!r} and {name!r} map to the same namespace {ns!r}")
        names[ns] = name.strip().lower()  # as a query's Tool is read
        try:
            manifests.append(ToolManifest(name=ns, description=description.strip()[:4000],
                                          implementation={"kind": "http", "url": BENCH_URL}))
        except ValidationError as exc:
            raise BenchInputError(f"{path}: tool {name!r} cannot be registered: {exc}") from exc
    return manifests, names


def load_queries(path: Path, known: set[str]) -> list[tuple[str, str]]:
    """(query, tool name lower-cased) rows; every tool must be one of `known`. A byte-order mark,
    which spreadsheet programs write at the start of a UTF-8 CSV, is not part of the first column's name."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            # The column names are matched whatever their case and surrounding spaces (`query,tool`,
            # ` Query , Tool `): a file written by another tool than MetaTool's (QA J).
            found = [name.strip().lower() for name in header or []]
            for column in ("query", "tool"):
                if found.count(column) != 1:
                    found_text = ",".join(header) if header else "nothing: the file is empty"  # QA AC: "found None"
                    raise BenchInputError(f"{path}: expected the columns Query,Tool (once each), found {found_text}")
            q_at, t_at = found.index("query"), found.index("tool")
            started = reader.line_num + 1
            rows = []
            for row in reader:
                # the lines it spans, as an editor counts them (QA 51b: records were counted; review 51:
                # a quote left open was named at the line its record ended on)
                first, last = started, reader.line_num
                started = last + 1
                where = f"line {first}" if first == last else f"lines {first}-{last}"
                if not row:  # a blank line, as csv.DictReader skipped it
                    continue
                raw_tool = row[t_at] if t_at < len(row) else ""
                query = (row[q_at] if q_at < len(row) else "").strip()
                tool = raw_tool.strip().lower()
                if not tool and "\n" in "".join(row):  # QA selection F10: read as an empty Tool
                    raise BenchInputError(f"{path}, {where}: a quoted field is not closed: its quote took in the "
                                          "lines after it")
                if not query or not tool:
                    raise BenchInputError(f"{path}, {where}: empty Query or Tool")
                if tool not in known:
                    # a quote left open took in the next line: its Tool is a piece of another row (QA 51b)
                    open_quote = "; a quoted field of it spans lines: is a quote not closed?" if "\n" in "".join(row) else ""
                    raise BenchInputError(f"{path}, {where}: tool {raw_tool!r} is not in the tools file{open_quote}")
                rows.append((query[:4000], tool))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchInputError(f"{path}: cannot read the queries CSV: {exc}") from exc
    if not rows:
        raise BenchInputError(f"{path}: no queries")
    return rows


def _private_settings(base: Settings, redis_url: str, data_dir: Path, policy: str) -> Settings:
    run = f"bench{random.getrandbits(40):010x}"
    tools_dir = data_dir / "tools"
    tools_dir.mkdir(parents=True, exist_ok=True)
    return base.model_copy(update={
        "redis_url": redis_url, "result_backend": None, "qdrant_url": None, "key_prefix": f"{run}:",
        "collection_prefix": f"{run}_", "data_dir": data_dir, "tools_dir": tools_dir, "policy": policy,
    })


def run_stream(base: Settings, redis_url: str, manifests: list[ToolManifest], names: dict[str, str],
               rows: list[tuple[str, str]], policy: str, learning: bool, seed: int, name: str,
               progress: Progress | None = None, retrain_every: int = RETRAIN_EVERY,
               reveal_missed: bool = False) -> StreamResult:
    """One pass of `rows` on a fresh private state, removed afterwards; with `reveal_missed` (and
    learning), a query whose attempts all missed records its right tool as a success too."""
    from workers.embedder import open_embedder
    from workers.runtime import Runtime
    from workers.tasks.learning import retrain_now

    started = time.perf_counter()
    data_dir = Path(tempfile.mkdtemp(prefix="fittest-bench-"))
    mark_owner(data_dir)
    rt = Runtime(_private_settings(base, redis_url, data_dir, policy))
    try:
        mark_alive(rt.redis, rt.settings.key_prefix)
        marked = time.monotonic()
        # The embedder and its cache are the process's: a stream after another would read the
        # vectors of the queries they share from it, and time selections without their embedding
        # (QA: with --limit under the cache's size, the zero-shot stream's p50 3.1 ms against 7.9 alone).
        open_embedder(base).clear_cache()
        for m in manifests:
            rt.registry.add(m)
        selector = rt.selector  # embeds the tool descriptions
        selector.rng = random.Random(seed)
        first: list[bool] = []
        attempts_used: list[int] = []
        resolved: list[bool] = []
        select_ms: list[float] = []
        first_probability: list[float] = []
        retrains, retrain_s, revealed = 0, 0.0, 0
        by_label = {names[m.name]: m for m in manifests}
        seen: set[str] = set()
        for i, (query, label) in enumerate(rows):
            if query in seen:  # a query the file repeats is timed with its embedding too (QA 51b: p50 2.8 ms)
                open_embedder(base).clear_cache()
            seen.add(query)
            if time.monotonic() - marked > RENEW_S:
                mark_alive(rt.redis, rt.settings.key_prefix)
                marked = time.monotonic()
            if learning and i and i % retrain_every == 0:
                t0 = time.perf_counter()
                retrains += retrain_now(rt).changed
                retrain_s += time.perf_counter() - t0
            request = CallRequest(scenario=query, max_attempts=MAX_ATTEMPTS, call_id=f"q{i}")
            t0 = time.perf_counter()
            plan = selector.plan(request)
            select_ms.append((time.perf_counter() - t0) * 1000.0)
            vector = rt.embedder.embed_one(query)  # the plan's own embedding, from the cache
            for k, candidate in enumerate(plan.candidates[:MAX_ATTEMPTS]):
                ok = names.get(candidate.manifest.name) == label
                attempt = ToolExecutionResult(
                    attempt_id=f"{request.call_id}:{k}", call_id=request.call_id, tool=candidate.manifest.name,
                    version=candidate.manifest.version, success=ok,
                    error_class=None if ok else FailureClass.bad_output,
                    error_message=None if ok else "not the tool this query needs", metadata={"attempt": k})
                plan.attempts.append(attempt)
                if not ok and learning:
                    apply_failure(rt, FailureMark(attempt_id=attempt.attempt_id, call_id=request.call_id,
                                                  tool=attempt.tool, version=attempt.version, scenario=query,
                                                  error_class=FailureClass.bad_output,
                                                  error_message=attempt.error_message or ""), vector)
                if ok:
                    break
            hit = bool(plan.attempts) and plan.attempts[-1].success
            first.append(bool(plan.attempts) and plan.attempts[0].success)
            resolved.append(hit)
            # An unresolved query counts the whole budget, whether its plan held 5 candidates or
            # fewer (QA: 1-4 were counted then, 5 for none), as the supervised reference counts it.
            attempts_used.append(len(plan.attempts) if hit else MAX_ATTEMPTS)
            first_probability.append(plan.candidates[0].probability if plan.candidates else 0.0)
            if learning and reveal_missed and not hit:
                truth = by_label[label]
                plan.attempts.append(ToolExecutionResult(
                    attempt_id=f"{request.call_id}:revealed", call_id=request.call_id, tool=truth.name,
                    version=truth.version, success=True, metadata={"attempt": MAX_ATTEMPTS}))
                revealed += 1
            if learning:
                outcome = OutcomeRecord.from_plan(plan)
                apply_outcome(rt, outcome, vector)
                records = execution_records(outcome)
                store_executions(rt, records, [vector] * len(records))
            if progress is not None:
                progress(name, i + 1, len(rows))
    finally:
        try:
            rt.state.clear()
        finally:
            # Closing the shards that were opened, and removing the directory the Edge store lives
            # in, removes the collections without opening any: `rt.memory.drop_all()` opened the store
            # again, and after a Ctrl-C while a shard was opening the half-opened one still held its
            # WAL, so the interrupt ended in a Qdrant Edge traceback, exit code 1 (QA J).
            try:
                rt.close()  # flushes the shards first: a Ctrl-C then must not skip the removal (QA J)
            finally:
                shutil.rmtree(data_dir, ignore_errors=True)
    half = len(rows) // 2
    return StreamResult(
        name=name, policy=policy, learning=learning, queries=len(rows),
        top1=_mean(first), top1_first_half=_mean(first[:half]), top1_second_half=_mean(first[half:]),
        resolved_within_5=_mean(resolved), mean_attempts=_mean(attempts_used),
        p50_select_ms=round(percentile(select_ms, 0.50), 3), p99_select_ms=round(percentile(select_ms, 0.99), 3),
        mean_first_probability=_mean(first_probability),
        embedding_precision=rt.embedder.precision, revealed=revealed, retrains=retrains, retrain_s=round(retrain_s, 1),
        elapsed_s=round(time.perf_counter() - started, 1),
    )


def _mean(values: list[float] | list[bool] | list[int]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def run_selection_bench(base: Settings, tools: Path, queries: Path, limit: int | None = None, seed: int = 0,
                        policy: str = "learned", progress: Progress | None = None,
                        retrain_every: int = RETRAIN_EVERY, reveal_missed: bool = False,
                        notice: Callable[[str], None] | None = None) -> SelectionBenchResult:
    from selection.policies import policy_names
    from workers.redis_connection import redis_client, redis_refusal
    from workers.settings import redact_url
    from workers.stack import start_private_redis

    if policy not in policy_names():
        raise BenchInputError(f"unknown policy {policy!r} (known: {', '.join(policy_names())})")
    manifests, names = load_tools(tools)
    rows = load_queries(queries, set(names.values()))
    random.Random(seed).shuffle(rows)
    rows = rows[:limit] if limit else rows
    started = time.perf_counter()
    redis_dir = None
    proc = None
    redis_url = base.redis_url
    try:
        # its directory is removed even when the server cannot start (QA J)
        if (refused := redis_refusal(redis_url, tls=base.redis_tls(redis_url))) is not None:
            if notice is not None:  # said, for one who set FITTEST_REDIS_URL and mistyped it (QA J), with what it refused (QA 51b)
                why = f"refuses the connection ({refused})" if refused else "does not answer"
                notice(f"{redact_url(redis_url)} {why}: the bench runs its own redis-server")
            redis_dir = Path(tempfile.mkdtemp(prefix="fittest-bench-redis-"))
            mark_owner(redis_dir)
            proc, redis_url = start_private_redis(redis_dir)
        client = redis_client(base.model_copy(update={"redis_url": redis_url}))
        try:
            swept = sweep(client)
        finally:
            client.close()
        if notice is not None and swept.told():
            notice(swept.told())
        streams = [
            run_stream(base, redis_url, manifests, names, rows, policy, True, seed, f"{policy}", progress,
                       retrain_every),
            run_stream(base, redis_url, manifests, names, rows, policy, False, seed, f"{policy} zero-shot", progress,
                       retrain_every),
        ]
        if policy != "seed":  # the baseline; under test itself, it is the first stream (QA J: it ran twice)
            streams.append(run_stream(base, redis_url, manifests, names, rows, "seed", True, seed, "seed", progress,
                                      retrain_every))
        if reveal_missed:
            streams.append(run_stream(base, redis_url, manifests, names, rows, policy, True, seed,
                                      f"{policy}, missed revealed", progress, retrain_every, reveal_missed=True))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        if redis_dir is not None:
            shutil.rmtree(redis_dir, ignore_errors=True)
    main, zero = streams[:2]
    baseline = main if policy == "seed" else streams[2]
    return SelectionBenchResult(
        queries=len(rows), policy=policy, seed=seed, tools=len(manifests),
        top1_first_half=main.top1_first_half, top1_second_half=main.top1_second_half,
        resolved_within_5=main.resolved_within_5, mean_attempts=main.mean_attempts,
        zero_shot_top1=zero.top1, seed_top1_second_half=baseline.top1_second_half,
        p50_select_ms=main.p50_select_ms, p99_select_ms=main.p99_select_ms,
        embedding_precision=main.embedding_precision, retrain_every=retrain_every, targets=TARGETS, streams=streams,
        elapsed_s=round(time.perf_counter() - started, 1),
    )

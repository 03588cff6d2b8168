"""Metrics for Prometheus, counted in Redis so every worker process on every host adds to one total.

Why Redis and not prometheus_client's own counters: an executor runs prefork children, `docker
compose up --scale executor=8` runs them on several hosts, and children come and go. Counters in
process memory would need one scrape target per process (or prometheus_client's multiprocess mode,
which only sees processes sharing one directory on one host). Instead each worker process buffers
its counts and adds them to one Redis hash twice a second, and `fittest metrics` serves them with
a collector that reads Redis at scrape time: what the state store knows already (quality and
counters per tool version, promotions and rollbacks) is read from the state itself, never counted
twice, queue lengths come from the broker's lists (Flower shows none), and the calls in flight
from the rescue sweep's own record (workers/state/inflight.py).

Written here as well: the short time series `fittest report` plots (attempts per tool version,
finished calls), each a capped Redis list of JSON entries.

Keys (P = FITTEST_KEY_PREFIX):

    P metrics:counters          hash  field = JSON [metric name, {label: value}], value = count
    P series:attempts:{key}     list  attempts of one tool version, oldest first (capped)
    P series:calls              list  finished calls, oldest first (capped)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from pydantic import BaseModel
from redis import Redis, RedisError
from redis.client import Pipeline

from evolution.promotions import undone_not_rolled_back
from selection.manifest import split_key
from selection.models import Promotion, ToolExecutionResult
from workers.buffered import BufferedWrites
from workers.state.base import as_text, load_scripts
from workers.state.inflight import due_key
from workers.state.once import apply_once
from workers.state.redis import SCAN_COUNT, RedisStateStore, glob_escape

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from workers.settings import Settings


log = logging.getLogger("fittest.metrics")

# The keys of the table above, after the prefix: written by MetricsRecorder, read by MetricsReader.
COUNTERS_KEY = "metrics:counters"
ATTEMPT_SERIES = "series:attempts:"  # + the tool version's key
CALL_SERIES_KEY = "series:calls"

FLUSH_INTERVAL_S = 0.5
UNACKED_KEY = "unacked"  # kombu's Redis transport: delivery tag -> [message, exchange, routing key]
UNACKED_INDEX_KEY = "unacked_index"  # kombu's Redis transport: delivery tag -> when it was delivered (the worker's clock)
ATTEMPT_SERIES_LIMIT = 2000
CALL_SERIES_LIMIT = 10_000
POINTS_PER_PUSH = 1000  # a series' points go in pushes of at most this many (workers/state/once.py MAX_ARGS)

# Counters that workers add to (metric name without the `fittest_` namespace and `_total`).
SELECTIONS = "selections"
ATTEMPTS = "attempts"
CALLS = "calls"
REDELIVERED_STEPS = "redelivered_steps"
RESENT_STEPS = "resent_steps"
EVOLUTION_RUNS = "evolution_runs"
DEGRADED_SELECTIONS = "degraded_selections"
# A finished call's duration, as a histogram: each call adds one to the count of the first bucket
# it fits in (CALL_SECONDS, by its upper bound `le`) and its milliseconds to CALL_MS_SUM; the
# collector makes the buckets cumulative, as Prometheus reads them.
CALL_SECONDS = "call_seconds"
CALL_MS_SUM = "call_ms_sum"
CALL_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# The attempts a call that ran a tool needed, alike: the bucket le="1" against the count is the share
# served by the first candidate, the rest fell back (QA 61c: no metric said how often); sum / count
# is the mean attempts the selection bench reports.
CALL_ATTEMPTS = "call_attempts"
CALL_ATTEMPTS_SUM = "call_attempts_sum"
CALL_ATTEMPT_BUCKETS = (1, 2, 3, 5, 10)
_HELP = {
    SELECTIONS: "Calls ranked by the selector, by policy and whether any candidate was found",
    ATTEMPTS: "Attempts run, by tool version, outcome and failure class",
    CALLS: "Calls finished, by status and cause: failed by input_refused (a tool that does the job refused "
           "the input: the caller's to mend) or tools_failed; no_candidates by its reason; error by the exception",
    REDELIVERED_STEPS: "Call steps delivered again, by the broker (a worker lost, an acknowledgement lost) or "
                       "the rescue sweep, by task and whether the step ran or was ignored because its call had "
                       "ended or moved on",
    RESENT_STEPS: "Call steps the rescue sweep sent again because they were lost, by task",
    EVOLUTION_RUNS: "Evolutions run, by namespace, trigger (call, quality, manual) and how they ended (evolved, "
                    "reused, no_fix, ...)",
    DEGRADED_SELECTIONS: "Calls ranked without the vector memory (it failed): by registry and Redis scores only",
}


def held_task_ids(client: Redis) -> set[str]:
    """The call task ids of the messages workers hold (reserved, running, or waiting for the
    visibility timeout after their worker died). Read once a sweep: decoding kombu's whole
    `unacked` hash for each overdue step took a sweep of 200 steps beside 2,000 held messages
    2.9 s (QA P), near its lock's 4 s."""
    held = set()
    for raw in client.hvals(UNACKED_KEY):
        try:
            message = json.loads(raw)[0]
        except (ValueError, IndexError, TypeError):
            continue
        if isinstance(message, dict) and isinstance(task_id := message.get("headers", {}).get("id"), str):
            held.add(task_id)
    return held


def queue_key(queue: str, priority: int, sep: str = ":") -> str:
    """The list kombu's Redis transport keeps a queue's messages of one priority step in (`sep`:
    the transport's option of that name, workers/app.py)."""
    return queue if priority == 0 else f"{queue}{sep}{priority}"


def _field(name: str, labels: dict[str, str]) -> str:
    return json.dumps([name, dict(sorted(labels.items()))], separators=(",", ":"))


class AttemptPoint(BaseModel):
    """One attempt of a tool version, as the report plots it."""

    t: float
    ok: bool
    quality: float  # the version's quality when the call was ranked
    ms: float
    error_class: str | None = None
    # A failure counted apart, lowering nothing: the caller's mistake, or a refusal of another tool's job
    # (FailureMark.counts_as); `fittest tools` lists them as refused inputs, the report apart (QA ops L3).
    counted_apart: bool = False


class CallPoint(BaseModel):
    """One finished call, as the report plots it."""

    t: float
    status: str
    attempts: int
    ms: float
    tool: str | None = None


class _Buffer:
    """Counts and series points a process has not sent yet."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.points: dict[str, tuple[int, list[str]]] = {}  # list key -> (cap, JSON points)

    def __bool__(self) -> bool:
        return bool(self.counts or self.points)


class MetricsRecorder(BufferedWrites[_Buffer]):
    """The writing side, used by the workers. Counts and series points are buffered in the process
    and sent in one pipeline at most every `flush_interval_s` (workers/buffered.py), so a call's
    hot path makes no Redis round trip for metrics (they showed up in its profile)."""

    name = "metrics"

    def __init__(self, client: Redis, prefix: str, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.prefix = prefix
        self.counters_key = f"{prefix}{COUNTERS_KEY}"
        self._apply_once = load_scripts(client, "apply_once")["apply_once"]
        super().__init__(client, flush_interval_s)

    def _new_buffer(self) -> _Buffer:
        return _Buffer()

    def _write(self, pipe: Pipeline, buffer: _Buffer) -> None:
        for field, n in buffer.counts.items():
            pipe.hincrby(self.counters_key, field, n)
        for key, (cap, values) in buffer.points.items():
            kept = values[-cap:]  # what the trim would keep
            for start in range(0, len(kept), POINTS_PER_PUSH):
                pipe.rpush(key, *kept[start:start + POINTS_PER_PUSH])
            pipe.ltrim(key, -cap, -1)

    def _send(self, buffer: _Buffer, token: str) -> None:
        """Counts and points would count twice if a batch ran twice: sent once per token."""
        pipe = self.client.pipeline(transaction=True)
        self._write(pipe, buffer)
        apply_once(self._apply_once, pipe, f"{self.prefix}once:metrics:{token}", client=self.client)

    def count(self, name: str, n: int = 1, **labels: str) -> None:
        with self._buffer() as buffer:
            buffer.counts[_field(name, labels)] += n

    def selection(self, policy: str, found: bool, degraded: bool = False) -> None:
        self.count(SELECTIONS, policy=policy, outcome="ranked" if found else "no_candidates")
        if degraded:  # QA ops: health showed it, the metrics did not
            self.count(DEGRADED_SELECTIONS)

    def attempt(self, result: ToolExecutionResult, quality: float, counted_apart: bool = False) -> None:
        error_class = result.error_class.value if result.error_class else ""
        point = AttemptPoint(
            t=result.timestamp, ok=result.success, quality=quality, ms=round(result.execution_time_ms, 3),
            error_class=error_class or None, counted_apart=counted_apart,
        )
        with self._buffer() as buffer:
            buffer.counts[_field(ATTEMPTS, {"tool": result.tool, "version": result.version, "error_class": error_class,
                                            "outcome": "success" if result.success else "failure"})] += 1
            _point(buffer, f"{self.prefix}{ATTEMPT_SERIES}{result.key}", point, ATTEMPT_SERIES_LIMIT)

    def call(self, status: str, attempts: int | None, elapsed_ms: float | None, tool: str | None, cause: str = "") -> None:
        """`cause`: what a status leaves open (workers/call_ends.py), "" where it says all. A call
        whose attempts and duration are not known (a step raised) is counted, and neither timed nor
        plotted."""
        with self._buffer() as buffer:
            buffer.counts[_field(CALLS, {"status": status, "cause": cause})] += 1
            if attempts is None or elapsed_ms is None:
                return
            point = CallPoint(t=time.time(), status=status, attempts=attempts, ms=round(elapsed_ms, 3), tool=tool)
            buffer.counts[_field(CALL_SECONDS, {"le": _bucket(elapsed_ms / 1000, CALL_BUCKETS_S)})] += 1
            buffer.counts[_field(CALL_MS_SUM, {})] += round(elapsed_ms)
            if attempts >= 1:
                buffer.counts[_field(CALL_ATTEMPTS, {"le": _bucket(attempts, CALL_ATTEMPT_BUCKETS)})] += 1
                buffer.counts[_field(CALL_ATTEMPTS_SUM, {})] += attempts
            _point(buffer, f"{self.prefix}{CALL_SERIES_KEY}", point, CALL_SERIES_LIMIT)

    def evolution_run(self, namespace: str, trigger: str, status: str) -> None:
        self.count(EVOLUTION_RUNS, namespace=namespace, trigger=trigger, outcome=status)


def _bucket(value: float, bounds: Iterable[float]) -> str:
    """The `le` of the first histogram bucket `value` fits in."""
    return next((str(b) for b in bounds if value <= b), "+Inf")


def _point(buffer: _Buffer, key: str, point: BaseModel, cap: int) -> None:
    buffer.points.setdefault(key, (cap, []))[1].append(point.model_dump_json())


class MetricsReader:
    """The reading side, for the collector and the report: counters, the state's own numbers
    (read through `state`, which knows its keys), the series and the broker's queue lengths."""

    def __init__(self, client: Redis, prefix: str, queues: Iterable[str] = (), priority_steps: Iterable[int] = (0,),
                 sep: str = ":", beat_lock_key: str | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.beat_lock_key = beat_lock_key
        self.state = RedisStateStore(client, prefix)
        self.queues = tuple(queues)
        self.priority_steps = tuple(priority_steps)
        self.sep = sep

    def _scan(self, pattern: str) -> Iterator[str]:
        for raw in self.client.scan_iter(match=glob_escape(self.prefix) + pattern, count=SCAN_COUNT):
            yield as_text(raw)[len(self.prefix) :]

    def counters(self) -> dict[str, list[tuple[dict[str, str], int]]]:
        out: dict[str, list[tuple[dict[str, str], int]]] = defaultdict(list)
        for field, value in self.client.hgetall(f"{self.prefix}{COUNTERS_KEY}").items():
            name, labels = json.loads(field)
            out[name].append((labels, int(value)))
        return out

    def queue_lengths(self) -> dict[tuple[str, int], int]:
        """Messages waiting per queue and priority step (kombu keeps one list per step)."""
        pairs = [(q, p) for q in self.queues for p in self.priority_steps]
        pipe = self.client.pipeline(transaction=False)
        for queue, priority in pairs:
            pipe.llen(queue_key(queue, priority, self.sep))
        return dict(zip(pairs, pipe.execute()))

    def unacked(self) -> int:
        """Messages delivered to a worker and not yet acknowledged (kombu's `unacked` hash)."""
        return int(self.client.hlen(UNACKED_KEY))

    def calls_in_flight(self, now: float | None = None) -> tuple[int, int]:
        """(calls with a step recorded and no result yet, those of them past their step's due time)."""
        key = due_key(self.prefix)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(key)
        pipe.zcount(key, "-inf", now if now is not None else time.time())
        recorded, overdue = pipe.execute()
        return int(recorded), int(overdue)

    def beat_up(self) -> bool:
        """Whether a beat holds its lock (redbeat's, which it renews as it ticks and which expires
        soon after its last tick): without one nothing retrains the weights or prunes the history."""
        return self.beat_lock_key is not None and bool(self.client.exists(self.beat_lock_key))

    def broker_idle(self) -> bool:
        """No message waits in any queue and none is delivered but unacknowledged (acks are late,
        so a running task and a message held in a batch count as not done)."""
        return self.unacked() == 0 and not any(self.queue_lengths().values())

    def attempt_keys(self) -> list[str]:
        return sorted(k.removeprefix(ATTEMPT_SERIES) for k in self._scan(f"{ATTEMPT_SERIES}*"))

    def attempts(self, key: str) -> list[AttemptPoint]:
        raws = self.client.lrange(f"{self.prefix}{ATTEMPT_SERIES}{key}", 0, -1)
        return [AttemptPoint.model_validate_json(r) for r in raws]

    def calls(self) -> list[CallPoint]:
        return [CallPoint.model_validate_json(r) for r in self.client.lrange(f"{self.prefix}{CALL_SERIES_KEY}", 0, -1)]


def evolution_events(history: list[Promotion]) -> tuple[list[Promotion], list[Promotion]]:
    """(evolutions, rollbacks) of one namespace: each new version put on trial (once: a trial that
    a by-hand promotion interrupted goes on after its rollback), each rollback (not the original's
    promotion by hand undone, which took no version out of the calls)."""
    first_trials: dict[str, Promotion] = {}
    for p in history:
        if p.status == "on_trial":
            first_trials.setdefault(p.evolved_version, p)
    evolutions = list(first_trials.values())
    rollbacks = [p for p in history if p.status == "rolled_back" and not undone_not_rolled_back(p)]
    return evolutions, rollbacks


def histogram(counters: dict[str, list[tuple[dict[str, str], int]]], counts: str, total: str,
              bounds: Iterable[float], name: str, help_text: str, scale: float = 1.0) -> HistogramMetricFamily:
    """One histogram as Prometheus's cumulative buckets, from the counts per bucket (`counts`, by
    each bucket's upper bound `le`) and the sum (`total`, in 1/`scale` of the unit)."""
    per_bucket = {labels.get("le", "+Inf"): n for labels, n in counters.pop(counts, [])}
    sum_value = sum(n for _, n in counters.pop(total, [])) / scale
    buckets, running = [], 0
    for le in [*(str(b) for b in bounds), "+Inf"]:
        running += per_bucket.get(le, 0)
        buckets.append((le, running))
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=sum_value)


class RedisCollector(Collector):
    """Reads every metric from Redis at scrape time (see the module docstring).

    `report_redis_down`: a scrape that cannot read Redis answers `fittest_redis_up 0` (and logs one
    line), as exporters do for what they export, rather than an HTTP 500 and a traceback per
    scrape (QA ops: 65 lines every 15 s of an outage); `fittest metrics --once` raises instead, to
    say so and exit 1."""

    def __init__(self, reader: MetricsReader, report_redis_down: bool = False) -> None:
        self.reader = reader
        self.report_redis_down = report_redis_down

    def collect(self) -> Iterator[Metric]:
        families: list[Metric] = []
        try:
            families, up = list(self._families()), 1
        except RedisError as exc:
            if not self.report_redis_down:
                raise
            log.warning("metrics: Redis does not answer (%s): fittest_redis_up 0", exc,
                        extra={"event": "metrics_redis_down"})
            up = 0
        yield GaugeMetricFamily("fittest_redis_up", "Whether the scrape could read Redis (1) or not (0)", value=up)
        yield from families

    def _families(self) -> Iterator[Metric]:
        r = self.reader
        counters = r.counters()
        yield histogram(counters, CALL_SECONDS, CALL_MS_SUM, CALL_BUCKETS_S, "fittest_call_duration_seconds",
                        "Finished calls by how long they took, from their first step to their result", scale=1000)
        yield histogram(counters, CALL_ATTEMPTS, CALL_ATTEMPTS_SUM, CALL_ATTEMPT_BUCKETS, "fittest_call_attempts",
                        "Finished calls that ran a tool, by the attempts they needed: le=\"1\" were served by "
                        "their first candidate, the others fell back")
        for name, rows in sorted(counters.items()):
            labels = sorted({k for row_labels, _ in rows for k in row_labels})
            family = CounterMetricFamily(f"fittest_{name}", _HELP.get(name, name), labels=labels)
            # Rows counted before a label was added (`cause` of the calls) read as that label's "", as do
            # rows that never give it: one series each, summed, or the scrape would hold two alike.
            summed: Counter[tuple[str, ...]] = Counter()
            for row_labels, value in rows:
                summed[tuple(row_labels.get(k, "") for k in labels)] += value
            for values, value in summed.items():
                family.add_metric(list(values), value)
            yield family

        quality = GaugeMetricFamily("fittest_tool_quality", "Quality score per tool version (0..1)",
                                    labels=["tool", "version"])
        # Gauges, not counters: they are the standing `fittest tools` shows, which a judgement of a call
        # (`fittest feedback add --call`) or an outage's recovery takes back, and a counter that goes
        # down reads as a reset to rate() (QA 61c-1); fittest_attempts_total counts every attempt run.
        successes = GaugeMetricFamily("fittest_tool_successes", "Successful attempts the version's standing counts now "
                                      "(a judgement of a call may take one back)", labels=["tool", "version"])
        failures = GaugeMetricFamily("fittest_tool_failures", "Failed attempts the version's standing counts now (a "
                                     "judgement or an outage's recovery may take some back)", labels=["tool", "version"])
        refused = GaugeMetricFamily("fittest_tool_refused_inputs", "Inputs refused as the caller's mistake or of another "
                                    "tool's job, per tool version (not among its failures)", labels=["tool", "version"])
        breaker = GaugeMetricFamily("fittest_tool_breaker", "Circuit breaker of each tool version (1 for its state: "
                                    "closed, open, or half_open once its cool-down passed)", labels=["tool", "version", "state"])
        all_stats = r.state.all_stats()
        _, breakers = r.state.stats_and_breakers(sorted(all_stats))
        for key, stats in sorted(all_stats.items()):
            labels = list(split_key(key))
            quality.add_metric(labels, stats.quality)
            successes.add_metric(labels, stats.successes)
            failures.add_metric(labels, stats.failures)
            refused.add_metric(labels, stats.refused_inputs)
            breaker.add_metric([*labels, breakers.get(key, "closed")], 1)
        yield from (quality, successes, failures, refused, breaker)

        evolutions = CounterMetricFamily("fittest_evolutions", "Versions put on trial: evolved ones and a manifest's new versions",
                                         labels=["namespace"])
        rollbacks = CounterMetricFamily("fittest_rollbacks", "Promotions rolled back", labels=["namespace"])
        served = GaugeMetricFamily("fittest_promotion", "The namespace's latest promotion record (1), by version and "
                                   "status: after a rollback, the version rolled back (the one before it is served)",
                                   labels=["namespace", "version", "status"])
        for namespace, history in sorted(r.state.all_promotion_histories().items()):
            evolved, rolled_back = evolution_events(history)
            evolutions.add_metric([namespace], len(evolved))
            rollbacks.add_metric([namespace], len(rolled_back))
            if history:
                served.add_metric([namespace, history[-1].evolved_version, history[-1].status], 1)
        yield from (evolutions, rollbacks, served)

        queued = GaugeMetricFamily("fittest_queue_length", "Messages waiting in a Celery queue, per priority step",
                                   labels=["queue", "priority"])
        for (queue, priority), n in r.queue_lengths().items():
            queued.add_metric([queue, str(priority)], n)
        yield queued
        yield GaugeMetricFamily("fittest_unacked_messages", "Messages delivered to workers and not yet acknowledged",
                                value=r.unacked())
        if r.beat_lock_key is not None:
            # Flower's flower_worker_online says which workers are up; no Celery worker is the beat (QA 61c-4)
            yield GaugeMetricFamily("fittest_beat_up", "Whether a beat holds its lock (1) or not (0): without one "
                                    "nothing retrains the weights or prunes the history", value=int(r.beat_up()))
        recorded, overdue = r.calls_in_flight()
        yield GaugeMetricFamily("fittest_calls_in_flight",
                                "Calls with a step handed on (or sent by fittest's client) and no result yet",
                                value=recorded)
        yield GaugeMetricFamily("fittest_calls_overdue",
                                "Calls in flight past their step's due time (the visibility timeout + 30 s): the "
                                "rescue sweep sends their step again unless it is queued or held; a count that stays "
                                "up means stuck calls", value=overdue)


SCRAPE_TIMEOUT_S = 2.0


def reader_for(settings: Settings, client: Redis | None = None) -> MetricsReader:
    """A reader of `settings`' Redis, knowing the app's queues and priority steps."""
    from workers.app import QUEUES, make_app
    from workers.redis_connection import redis_client

    from redbeat.schedulers import ensure_conf

    app = make_app(settings)
    options = app.conf.broker_transport_options
    try:
        return MetricsReader(
            client if client is not None else redis_client(settings),
            settings.key_prefix,
            queues=QUEUES,
            priority_steps=options.get("priority_steps", [0]),
            sep=options.get("sep", ":"),
            beat_lock_key=ensure_conf(app).lock_key,
        )
    finally:
        app.close()


def scrape_registry(settings: Settings, report_redis_down: bool = False) -> CollectorRegistry:
    """The registry a scrape reads. Its Redis client gives up within seconds (2 s a try, one retry),
    not after the ~30 s that ride out a restart: a scrape of a Redis that is down fails before
    Prometheus's own timeout (10 s by default), and `fittest metrics --once` says so at once."""
    from workers.redis_connection import probe_client

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(reader_for(settings, probe_client(settings, SCRAPE_TIMEOUT_S, retries=1)),
                                     report_redis_down=report_redis_down))
    return registry


def serve(settings: Settings, port: int | None = None, addr: str | None = None) -> tuple[WSGIServer, threading.Thread]:
    """Start the /metrics HTTP endpoint in a background thread; returns (server, thread)."""
    from prometheus_client import start_http_server

    return start_http_server(port if port is not None else settings.metrics_port, addr=addr or settings.metrics_addr,
                             registry=scrape_registry(settings, report_redis_down=True))


def exposition(settings: Settings) -> bytes:
    """The metrics as Prometheus text, once (what a scrape would return)."""
    from prometheus_client import generate_latest

    return generate_latest(scrape_registry(settings))

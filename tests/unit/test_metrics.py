"""The Redis-backed metrics: what workers count (from any process) is what a scrape shows."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from selection.models import FailureClass, FailureCount, Promotion, Severity, ToolExecutionResult
from tests.conftest import free_port
from workers.metrics import COUNTERS_KEY, MetricsReader, MetricsRecorder, RedisCollector
from workers.state.redis import RedisStateStore


def attempt(tool: str, ok: bool, error: FailureClass | None = None, ms: float = 3.0) -> ToolExecutionResult:
    return ToolExecutionResult(attempt_id=f"a{time.time_ns()}", call_id="c", tool=tool, version="1.0.0",
                               success=ok, error_class=error, execution_time_ms=ms)


@pytest.fixture
def prefix(run_prefix: str) -> str:
    return f"{run_prefix}:"  # its keys go with run_prefix's


def registry_of(reader: MetricsReader) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(reader))
    return registry


def scrape(reader: MetricsReader) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry_of(reader)).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_counts_from_two_processes_add_up_in_one_scrape(redis_client, redis_url, prefix) -> None:
    import redis

    worker_a = MetricsRecorder(redis_client, prefix)
    worker_b = MetricsRecorder(redis.Redis.from_url(redis_url, decode_responses=True), prefix)  # another client
    worker_a.attempt(attempt("slugify", False, FailureClass.bad_input), quality=1.0)
    worker_b.attempt(attempt("slugify", False, FailureClass.bad_input), quality=0.99)
    worker_b.attempt(attempt("slugify", True), quality=0.98)
    worker_a.selection("seed", found=True)
    worker_a.selection("seed", found=False)
    worker_b.selection("learned", found=True, degraded=True)
    worker_b.call("success", attempts=2, elapsed_ms=40.0, tool="slugify")
    worker_a.evolution_run("slugify", "call", "no_fix")
    worker_a.flush()
    worker_b.flush()

    queue = f"{prefix}q"
    redis_client.rpush(queue, "m1", "m2")  # kombu: priority 0 is the bare queue name ...
    redis_client.rpush(f"{queue}:9", "m3")  # ... and step N is "{queue}:{N}"
    state = RedisStateStore(redis_client, prefix)
    state.mark_failure("slugify@1.0.0", "x1", Severity.high)
    state.mark_failure("slugify@1.0.0", "x2", Severity.low, FailureCount.refused_input)  # a caller's bad input
    state.promote(Promotion(namespace="slugify", evolved_version="1.1.0", original_version="1.0.0"))
    state.promote(Promotion(namespace="slugify", evolved_version="1.1.0", original_version="1.0.0", status="rolled_back"))

    got = scrape(MetricsReader(redis_client, prefix, queues=[queue], priority_steps=range(10)))
    tool = (("tool", "slugify"), ("version", "1.0.0"))
    assert got[("fittest_attempts_total", (("error_class", "bad_input"), ("outcome", "failure"), *tool))] == 2
    assert got[("fittest_attempts_total", (("error_class", ""), ("outcome", "success"), *tool))] == 1
    assert got[("fittest_selections_total", (("outcome", "ranked"), ("policy", "seed")))] == 1
    assert got[("fittest_selections_total", (("outcome", "no_candidates"), ("policy", "seed")))] == 1
    assert got[("fittest_calls_total", (("cause", ""), ("status", "success")))] == 1
    assert got[("fittest_tool_quality", tool)] == pytest.approx(0.9)
    assert got[("fittest_tool_failures", tool)] == 1
    assert got[("fittest_tool_refused_inputs", tool)] == 1
    assert got[("fittest_evolutions_total", (("namespace", "slugify"),))] == 1
    assert got[("fittest_rollbacks_total", (("namespace", "slugify"),))] == 1
    assert got[("fittest_promotion", (("namespace", "slugify"), ("status", "rolled_back"), ("version", "1.1.0")))] == 1
    assert got[("fittest_queue_length", (("priority", "0"), ("queue", queue)))] == 2
    assert got[("fittest_queue_length", (("priority", "9"), ("queue", queue)))] == 1
    assert got[("fittest_queue_length", (("priority", "5"), ("queue", queue)))] == 0
    # QA ops: no latency, no breaker, no failed evolution could be alerted on
    assert got[("fittest_call_duration_seconds_bucket", (("le", "0.05"),))] == 1  # the call of 40 ms
    assert got[("fittest_call_duration_seconds_bucket", (("le", "+Inf"),))] == 1
    assert got[("fittest_call_duration_seconds_count", ())] == 1 and got[("fittest_call_duration_seconds_sum", ())] == 0.04
    assert got[("fittest_tool_breaker", (("state", "closed"), *tool))] == 1
    assert got[("fittest_evolution_runs_total", (("namespace", "slugify"), ("outcome", "no_fix"), ("trigger", "call")))] == 1
    assert got[("fittest_redis_up", ())] == 1
    assert got[("fittest_degraded_selections_total", ())] == 1


def test_a_scrape_shows_the_calls_in_flight_and_those_overdue(redis_client, prefix) -> None:
    from workers.state.inflight import HandedOnStep, InflightCalls

    inflight = InflightCalls(redis_client, prefix)
    for i, due_in_s in enumerate((-5.0, -1.0, 600.0)):
        inflight.handed_on(HandedOnStep(task_id=f"call-{i}", task="fittest.execute", args=[{}, 0]), due_in_s)
    inflight.finished("call-1")  # ended: neither in flight nor overdue
    inflight.flush()
    got = scrape(MetricsReader(redis_client, prefix))
    assert (got[("fittest_calls_in_flight", ())], got[("fittest_calls_overdue", ())]) == (2, 1)


def test_series_are_capped_and_read_back_in_order(redis_client, prefix, monkeypatch) -> None:
    from workers import metrics

    monkeypatch.setattr(metrics, "ATTEMPT_SERIES_LIMIT", 3)
    recorder = MetricsRecorder(redis_client, prefix)
    for i in range(5):
        recorder.attempt(attempt("hash_text", i % 2 == 0, None if i % 2 == 0 else FailureClass.timeout, ms=i), quality=1 - i / 10)
        if i == 1:
            recorder.flush()  # the cap holds across flushes, not only within one
    recorder.flush()
    reader = MetricsReader(redis_client, prefix)
    assert reader.attempt_keys() == ["hash_text@1.0.0"]
    points = reader.attempts("hash_text@1.0.0")
    assert [p.ms for p in points] == [2.0, 3.0, 4.0]  # the oldest two were dropped
    assert [p.error_class for p in points] == [None, "timeout", None]
    assert [p.quality for p in points] == pytest.approx([0.8, 0.7, 0.6])


def test_counts_wait_in_the_process_and_reach_redis_by_themselves(redis_client, prefix) -> None:
    recorder = MetricsRecorder(redis_client, prefix, flush_interval_s=0.2)
    reader = MetricsReader(redis_client, prefix)
    recorder.attempt(attempt("word_stats", True), quality=1.0)
    recorder.call("success", 1, 5.0, "word_stats")
    assert reader.counters() == {} and reader.calls() == []  # nothing sent on the call's path
    deadline = time.monotonic() + 10
    while not reader.calls() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [c.status for c in reader.calls()] == ["success"]
    assert sum(n for _, n in reader.counters()["attempts"]) == 1


def test_a_pool_process_sends_its_counts_as_it_ends(redis_client, prefix, monkeypatch) -> None:
    """A Celery pool process ends with os._exit, past atexit: its last interval's counts are sent
    on worker_process_shutdown (QA: a stop under load left 2 of 150 calls out of the report)."""
    import weakref

    from celery.signals import worker_process_shutdown

    from workers import buffered

    # only this test's buffer: earlier tests' buffers of this process write to Redis servers gone by now
    monkeypatch.setattr(buffered, "_started", weakref.WeakSet())
    recorder = MetricsRecorder(redis_client, prefix, flush_interval_s=3600)
    reader = MetricsReader(redis_client, prefix)
    recorder.call("success", 1, 5.0, "word_stats")
    assert reader.calls() == []
    worker_process_shutdown.send(sender=None, pid=0, exitcode=0)  # what billiard's process_destructor sends
    assert [c.status for c in reader.calls()] == ["success"]


def test_a_failed_flush_keeps_the_counts_for_the_next_one(redis_url, redis_client, prefix) -> None:
    import redis

    down = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
    recorder = MetricsRecorder(down, prefix, flush_interval_s=3600)
    recorder.selection("seed", found=True)
    with pytest.raises(redis.ConnectionError):
        recorder.flush()
    recorder.selection("seed", found=True)
    recorder.client = redis_client
    recorder.flush()
    counters = MetricsReader(redis_client, prefix).counters()
    assert counters["selections"] == [({"outcome": "ranked", "policy": "seed"}, 2)]


def test_a_flush_whose_reply_was_lost_is_sent_again_and_counted_once(redis_client, prefix, monkeypatch) -> None:
    """A batch that ran but whose reply never came back (the connection broke after it) is kept as
    it was, with its token, and sent again before newer counts: the second time it runs nothing."""
    import redis

    recorder = MetricsRecorder(redis_client, prefix, flush_interval_s=3600)
    recorder.selection("seed", found=True)
    script = recorder._apply_once

    def ran_then_lost(*args, **kwargs):
        script(*args, **kwargs)
        monkeypatch.setattr(recorder, "_apply_once", script)
        raise redis.ConnectionError("connection lost before the reply")

    monkeypatch.setattr(recorder, "_apply_once", ran_then_lost)
    with pytest.raises(redis.ConnectionError):
        recorder.flush()
    recorder.selection("seed", found=True)  # newer: waits behind the batch that failed
    recorder.flush()
    counters = MetricsReader(redis_client, prefix).counters()
    assert counters["selections"] == [({"outcome": "ranked", "policy": "seed"}, 2)]  # 3 if the batch ran twice


def histogram(got: dict, name: str, *bounds: str) -> list[float]:
    """A scraped histogram's cumulative counts at these upper bounds."""
    return [got[(f"{name}_bucket", (("le", le),))] for le in bounds]


def test_the_durations_of_calls_are_a_histogram_of_cumulative_buckets(redis_client, prefix) -> None:
    recorder = MetricsRecorder(redis_client, prefix)
    for ms in (30.0, 40.0, 700.0, 2_000.0, 400_000.0):
        recorder.call("success", attempts=1, elapsed_ms=ms, tool="slugify")
    recorder.flush()
    got = scrape(MetricsReader(redis_client, prefix))
    assert histogram(got, "fittest_call_duration_seconds", "0.05", "0.5", "1.0", "2.5", "300.0", "+Inf") == [2, 2, 3, 4, 4, 5]
    assert got[("fittest_call_duration_seconds_count", ())] == 5
    assert got[("fittest_call_duration_seconds_sum", ())] == pytest.approx(402.77)


def test_the_attempts_calls_needed_say_how_often_they_fell_back_and_the_mean(redis_client, prefix) -> None:
    """QA 61c: no metric said how often a call's first candidate failed. A call that ran no tool
    (no candidates: 0 attempts) or whose attempts are not known (a step raised) is not in it."""
    recorder = MetricsRecorder(redis_client, prefix)
    for status, attempts in (("success", 1), ("success", 1), ("success", 2), ("failed", 5), ("success", 12)):
        recorder.call(status, attempts=attempts, elapsed_ms=10.0, tool="slugify")
    recorder.call("no_candidates", attempts=0, elapsed_ms=1.0, tool=None, cause="no_match")
    recorder.call("error", attempts=None, elapsed_ms=None, tool=None, cause="ValidationError")
    recorder.flush()
    got = scrape(MetricsReader(redis_client, prefix))
    assert histogram(got, "fittest_call_attempts", "1", "2", "3", "5", "10", "+Inf") == [2, 3, 3, 4, 4, 5]
    assert got[("fittest_call_attempts_count", ())] == 5
    assert got[("fittest_call_attempts_sum", ())] == 21  # mean 4.2 attempts
    assert 1 - histogram(got, "fittest_call_attempts", "1")[0] / 5 == pytest.approx(0.6)  # fell back


def test_a_failed_call_is_counted_by_its_cause_and_one_that_raised_is_counted_untimed(redis_client, prefix) -> None:
    """QA 61c-5: a refused input and tools that failed were one row; a step that raised, none."""
    recorder = MetricsRecorder(redis_client, prefix)
    recorder.call("failed", attempts=1, elapsed_ms=30.0, tool=None, cause="input_refused")
    recorder.call("failed", attempts=3, elapsed_ms=90.0, tool=None, cause="tools_failed")
    recorder.call("error", attempts=None, elapsed_ms=None, tool=None, cause="ValidationError")
    recorder.flush()
    got = scrape(MetricsReader(redis_client, prefix))
    for status, cause in (("failed", "input_refused"), ("failed", "tools_failed"), ("error", "ValidationError")):
        assert got[("fittest_calls_total", (("cause", cause), ("status", status)))] == 1
    assert got[("fittest_call_duration_seconds_count", ())] == 2  # the error's duration is not known
    assert [p.status for p in MetricsReader(redis_client, prefix).calls()] == ["failed", "failed"]


def test_calls_counted_before_their_cause_was_a_label_are_one_series_with_those_counted_since(redis_client, prefix) -> None:
    """An upgraded stack's hash holds `calls` rows without `cause`: read as cause "", summed with the new."""
    redis_client.hincrby(f"{prefix}{COUNTERS_KEY}", '["calls",{"status":"success"}]', 5)
    recorder = MetricsRecorder(redis_client, prefix)
    recorder.call("success", attempts=1, elapsed_ms=30.0, tool="slugify")
    recorder.flush()
    text = generate_latest(registry_of(MetricsReader(redis_client, prefix))).decode()
    assert [line for line in text.splitlines() if line.startswith("fittest_calls_total")] == \
        ['fittest_calls_total{cause="",status="success"} 6.0']


def test_a_scrape_of_a_redis_that_does_not_answer_says_so_in_one_gauge(caplog) -> None:
    """QA ops: the endpoint answered HTTP 500 and printed a 65-line traceback at every scrape."""
    from workers.metrics import scrape_registry
    from workers.settings import Settings

    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    text = generate_latest(scrape_registry(settings, report_redis_down=True)).decode()
    assert "fittest_redis_up 0.0" in text and "fittest_attempts_total" not in text
    assert any("Redis does not answer" in r.getMessage() for r in caplog.records)
    import redis

    with pytest.raises(redis.ConnectionError):  # `fittest metrics --once` says so, and exits 1
        generate_latest(scrape_registry(settings))


def test_a_call_whose_evolution_is_known_without_the_evolver_counts_as_an_evolution_run(
    redis_client, prefix, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA ops L7: a crash no mutator answers ends the call before the evolver is asked, and was
    missing from fittest_evolution_runs_total, which counted every no_fix the evolver decided."""
    from types import SimpleNamespace

    from evolution.models import EvolutionReport
    from selection.models import CallPlan, CallRequest
    from workers.tasks import evolution as tasks

    recorder = MetricsRecorder(redis_client, prefix)
    known = EvolutionReport(job_id="", namespace="mean", trigger="call", status="no_fix", parent="mean@1.0.0",
                            message="no mutator could propose a version of mean@1.0.0")
    monkeypatch.setattr(tasks, "evolver", lambda: SimpleNamespace(without_evolution=lambda plan: known))
    monkeypatch.setattr(tasks, "runtime", lambda: SimpleNamespace(metrics=recorder))
    monkeypatch.setattr(tasks, "_end_call", lambda plan, evolution: {"status": "failed", "evolution": evolution.status})
    plan = CallPlan(request=CallRequest(scenario="the mean"), candidates=[])
    assert tasks.end_without_evolution(plan) == {"status": "failed", "evolution": "no_fix"}
    recorder.flush()
    got = scrape(MetricsReader(redis_client, prefix))
    assert got[("fittest_evolution_runs_total", (("namespace", "mean"), ("outcome", "no_fix"), ("trigger", "call")))] == 1


def test_a_versions_standing_is_a_gauge_as_a_recovery_takes_failures_back(redis_client, prefix) -> None:
    """QA 61c-1: the standing's counts were exposed as counters, and an outage's recovery (or a
    judgement) lowered them, which Prometheus's rate() reads as a counter reset."""
    recorder = MetricsRecorder(redis_client, prefix)
    recorder.attempt(attempt("slugify", False, FailureClass.crash), quality=1.0)
    recorder.flush()
    state = RedisStateStore(redis_client, prefix)
    applied = state.mark_failure("slugify@1.0.0", "x1", Severity.high)
    reader = MetricsReader(redis_client, prefix)
    tool = (("tool", "slugify"), ("version", "1.0.0"))
    assert scrape(reader)[("fittest_tool_failures", tool)] == 1
    assert state.forgive_failures("slugify@1.0.0", [("x1", applied.cost_bp or 0)]) == 1
    assert scrape(reader)[("fittest_tool_failures", tool)] == 0

    kinds = {f.name: f.type for f in text_string_to_metric_families(generate_latest(registry_of(reader)).decode())}
    assert {kinds[n] for n in ("fittest_tool_successes", "fittest_tool_failures", "fittest_tool_refused_inputs")} == {"gauge"}
    assert kinds["fittest_attempts"] == "counter"  # what counts every attempt run, and only goes up

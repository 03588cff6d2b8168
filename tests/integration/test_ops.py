"""Watching a running system: health probes, Prometheus metrics, JSON attempt logs and the Python
client, against real workers on the Redis broker."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import jsonschema
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import RedisServer, as_published, cli_runner, free_port
from workers.app import make_app
from workers.payloads import payload_schemas


@pytest.fixture
def cli(pipeline, monkeypatch):
    """Run `fittest …` with the pipeline's settings, as an operator's shell would."""
    return cli_runner(monkeypatch, pipeline.env)


def test_health_is_ok_with_every_role_up_and_checks_store_and_model_live(cli) -> None:
    # The pipeline runs no beat: the whole stack's health says so (QA ops: it said healthy)...
    whole = cli("health", "--json", "--timeout", "5")
    assert whole.exit_code == 1, whole.output
    beat = next(c for c in json.loads(whole.output)["checks"] if c["name"] == "beat")
    assert beat["status"] == "fail" and "no beat holds its lock" in beat["detail"], beat
    # ...and the health of the roles it runs is what a probe of those asks.
    result = cli("health", "--json", "--timeout", "5", "-w", "memory", "-w", "executor", "-w", "evolver")
    assert result.exit_code == 0, result.output
    report = as_published(json.loads(result.output), "health_output")
    checks = {c["name"]: c for c in report["checks"]}
    assert {name: c["status"] for name, c in checks.items()} == {"redis": "ok", "workers": "ok", "store": "ok", "model": "ok",
                                                                  "tools": "ok"}
    assert re.search(r"^\d+ tool versions served; FITTEST_TOOLS_DIR .* is a directory \(checked by memory@", checks["tools"]["detail"])
    assert "384-dim" in checks["model"]["detail"] and "checked by memory@" in checks["model"]["detail"]
    assert "int8 model" in checks["model"]["detail"]  # the memory worker runs the model's int8 copy by default
    assert "tool vectors" in checks["store"]["detail"]
    assert re.search(r"history \d+ feedback, \d+ failures, \d+ executions \(the newest 100000 of each kept, and every judgement\); "
                     r"\d+ evolution patterns \(all kept\)",
                     checks["store"]["detail"]), checks["store"]["detail"]  # what retention keeps, in numbers
    roles = {node.partition("@")[0]: answer["queues"] for node, answer in report["workers"].items()}
    assert roles["executor"] == ["execution"] and "selection" in roles["memory"]


def test_health_fails_for_a_missing_worker_and_when_redis_is_down(cli) -> None:
    missing = cli("health", "--check", "workers", "--worker", "executor", "--worker", "executor@nohost", "--timeout", "2")
    assert missing.exit_code == 1
    assert "no answer from executor@nohost" in words(missing.output)
    # A role that does not exist is refused (exit 2), not a worker down (QA ops L9: exit 1, which a probe reads as one).
    typo = cli("health", "--json", "--check", "workers", "--worker", "nosuchrole", "--timeout", "2")
    assert typo.exit_code == 2 and "unknown role nosuchrole (the roles: memory, executor, evolver, beat, flower, metrics, toolserver;" in words(typo.output)
    for node in ("exector@vm", "evolver@", "beat@vm"):  # QA recheck N9: the role of a node name, or its host, mistyped
        assert cli("health", "--check", "workers", "--worker", node, "--timeout", "2").exit_code == 2, node
    # A probe of the executor alone does not fail the memory worker's store and model (QA ops: it did).
    executor = cli("health", "--json", "--worker", "executor", "--timeout", "5")
    assert executor.exit_code == 0, executor.output
    assert {c["name"]: c["status"] for c in json.loads(executor.output)["checks"]} == {
        "redis": "ok", "workers": "ok", "store": "skip", "model": "skip", "tools": "ok"}
    exact = cli("health", "--check", "workers", "--worker", "executor@nohost", "--timeout", "2")
    assert exact.exit_code == 1  # QA U: "answered: none" read as if no worker ran
    assert "asked only executor@nohost" in " ".join(exact.output.split())
    down = cli("health", "--json", "--timeout", "1", FITTEST_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert down.exit_code == 1
    checks = {c["name"]: c for c in json.loads(down.output)["checks"]}
    assert checks["redis"]["status"] == "fail" and "FITTEST_REDIS_URL" in checks["redis"]["detail"]
    assert checks["workers"]["status"] == "fail"


def test_health_asks_the_served_roles_at_their_pages_when_named(pipeline, cli) -> None:
    # QA 50e L6: `-w flower` and `-w metrics` said "unknown role", and nothing checked either.
    from workers.metrics import serve

    server, _ = serve(pipeline.settings, free_port(), "127.0.0.1")
    try:
        up = cli("health", "--json", "-w", "metrics", "--timeout", "5", FITTEST_METRICS_PORT=str(server.server_port))
        assert up.exit_code == 0, up.output
        metrics = next(c for c in json.loads(up.output)["checks"] if c["name"] == "metrics")
        assert metrics["status"] == "ok" and f":{server.server_port}/metrics answers" in metrics["detail"], metrics
    finally:
        server.shutdown()
    port = free_port()
    down = cli("health", "--json", "-w", "flower", "--timeout", "2", FITTEST_FLOWER_PORT=str(port))
    assert down.exit_code == 1, down.output
    flower = next(c for c in json.loads(down.output)["checks"] if c["name"] == "flower")
    assert flower["status"] == "fail" and f"nothing answers http://127.0.0.1:{port}/healthcheck" in flower["detail"], flower
    assert "start the flower role, or set FITTEST_FLOWER_PORT" in flower["detail"]
    # Not named, they are not asked: a stack run without Flower is whole.
    whole = cli("health", "--json", "-w", "memory", "--timeout", "5", FITTEST_FLOWER_PORT=str(port))
    assert {c["name"] for c in json.loads(whole.output)["checks"]}.isdisjoint({"flower", "metrics", "toolserver"})


def test_a_call_shows_in_metrics_and_in_the_json_attempt_log(pipeline, cli) -> None:
    from fittest.client import CallResult, FittestClient

    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as client:
        result = client.run("parse this csv text into rows", input={"text": "a,b\n1,2\n"}, namespace="csv_lenient")
    assert isinstance(result, CallResult) and result.status == "success" and result.tool == "csv_lenient"

    # Each worker flushes its own counters: the memory worker's selection may land after the
    # executor's attempt (it did once, in CI), so both are waited for.
    def counted() -> bool:
        text = cli("metrics", "--once").output
        return ('fittest_attempts_total{error_class="",outcome="success",tool="csv_lenient",version="1.0.0"}' in text
                and 'fittest_selections_total{outcome="ranked",policy=' in text)

    pipeline.wait_for(counted)
    text = cli("metrics", "--once").output
    assert 'fittest_queue_length{priority="0",queue="execution"}' in text

    log = (pipeline.stack.log_dir / "executor.log").read_text()
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{") and '"event": "attempt"' in line]
    mine = [e for e in events if e["call_id"] == result.call_id]
    assert len(mine) == 1
    assert mine[0]["tool"] == "csv_lenient" and mine[0]["version"] == "1.0.0" and mine[0]["outcome"] == "success"
    assert mine[0]["execution_time_ms"] >= 0 and mine[0]["task_name"] == "fittest.execute"
    assert mine[0]["breaker"] == "closed"  # what its outcome left its circuit breaker at
    assert mine[0]["worker"].startswith("executor@") and mine[0]["host"] and mine[0]["pid"] > 0  # which process wrote it
    # ...and its ranking in the memory worker's log, under the same call id (QA ops: nothing was logged there).
    memory = (pipeline.stack.log_dir / "memory.log").read_text()
    ranked = [json.loads(line) for line in memory.splitlines() if line.startswith("{") and '"event": "ranking"' in line]
    assert [r["candidates"][0] for r in ranked if r["call_id"] == result.call_id] == ["csv_lenient@1.0.0"], ranked[-3:]


def calls_counted(cli, status: str, cause: str | None = None) -> float:
    """`fittest_calls_total` of a status (and a cause), as `fittest metrics` serves it."""
    text = cli("metrics", "--once").output
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "fittest_calls_total" and s.labels["status"] == status
               and (cause is None or s.labels.get("cause", "") == cause))


def fell_back(cli) -> float:
    """Calls that needed more than one attempt, from `fittest_call_attempts` as `fittest metrics` serves it."""
    samples = {(s.name, s.labels.get("le")): s.value for family in text_string_to_metric_families(cli("metrics", "--once").output)
               for s in family.samples if s.name.startswith("fittest_call_attempts")}
    return samples[("fittest_call_attempts_count", None)] - samples[("fittest_call_attempts_bucket", "1")]


def logged(pipeline, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of an event, from every worker's log."""
    return [json.loads(line) for log in pipeline.stack.log_dir.glob("*.log") for line in log.read_text().splitlines()
            if line.startswith("{") and f'"event": "{event}"' in line]


def test_calls_that_end_before_any_attempt_are_counted_by_their_status(pipeline, cli) -> None:
    """A call refused for its payload, or with no tool to try, is a call made all the same."""
    before = {status: calls_counted(cli, status) for status in ("invalid", "no_candidates")}
    assert pipeline.call(scenario="sort these numbers", input={}, max_attempts=0)["status"] == "invalid"
    assert pipeline.call(scenario="sort these numbers", input={}, tags=["no-tool-has-this-tag"])["status"] == "no_candidates"
    pipeline.wait_for(lambda: all(calls_counted(cli, status) == before[status] + 1 for status in before))
    assert calls_counted(cli, "no_candidates", "no_such_tag") >= 1  # its reason, as the result says it


def test_a_failed_call_is_counted_by_whom_it_is_for_to_mend_and_every_end_is_logged(pipeline, cli) -> None:
    """QA 61c-5: a refused input (the caller's to mend) and tools that failed (the tools') were both
    `fittest_calls_total{status="failed"}`, a step that raised was counted nowhere, and no log line
    said how a call ended."""
    ends = [("failed", "tools_failed"), ("failed", "input_refused"), ("error", "ValidationError")]
    before = {end: calls_counted(cli, *end) for end in ends}
    fell_back_before = fell_back(cli)
    broken = pipeline.call(scenario="lunar phase calculator for a date", input={"date": "2026-11-22"},
                           namespace="moon_a", max_attempts=2)
    assert broken["status"] == "failed", broken
    for i in range(3):  # a job csv_strict does, so that a refusal of it is the caller's mistake
        assert pipeline.call(scenario=f"make records of these comma separated lines (ops batch {i})",
                             input={"text": "a,b\n1,2\n"}, namespace="csv_strict")["status"] == "success"
    pipeline.settled()
    refused = pipeline.call(scenario="make records of these comma separated lines (ops batch 9)", input={"rows": 3},
                            namespace="csv_strict")
    assert refused["status"] == "failed" and refused["attempts"][0]["callers_mistake"], refused
    control = make_app(pipeline.settings)
    try:  # a step whose plan is not one: it raises, and its error is the call's result
        raised = control.send_task("fittest.execute", args=[{"not": "a plan"}, 0], task_id="ops-raised-step-1",
                                   queue="execution")
        raised.get(timeout=60, propagate=False)
        assert raised.state == "FAILURE" and "ValidationError" in str(raised.result), raised.result
    finally:
        control.close()
    pipeline.wait_for(lambda: all(calls_counted(cli, *end) == before[end] + 1 for end in ends))
    assert fell_back(cli) >= fell_back_before + 1  # the broken call's 2 attempts: it fell back

    pipeline.wait_for(lambda: {broken["call_id"], refused["call_id"], "ops-raised-step-1"}
                      <= {e["call_id"] for e in logged(pipeline, "call_ended")})
    ended = {e["call_id"]: e for e in logged(pipeline, "call_ended")}
    assert (ended[broken["call_id"]]["status"], ended[broken["call_id"]]["cause"]) == ("failed", "tools_failed")
    assert ended[broken["call_id"]]["level"] == "warning"
    assert ended[broken["call_id"]]["attempts"] == len(broken["attempts"]) == 2
    assert (ended[refused["call_id"]]["cause"], ended[refused["call_id"]]["level"]) == ("input_refused", "info")
    assert (ended["ops-raised-step-1"]["status"], ended["ops-raised-step-1"]["cause"]) == ("error", "ValidationError")
    assert ended["ops-raised-step-1"]["attempts"] is None  # the step knew none
    # ...and the learning of its attempts names it (QA 61c: a learn line said only how many records)
    pipeline.wait_for(lambda: broken["call_id"] in {c for e in logged(pipeline, "learn") for c in e.get("call_ids", [])})
    # ...and a success says by which version, after how many attempts
    ok = pipeline.call(scenario="make records of these comma separated lines (ops batch 10)",
                       input={"text": "a,b\n1,2\n"}, namespace="csv_strict")
    pipeline.wait_for(lambda: ok["call_id"] in {e["call_id"] for e in logged(pipeline, "call_ended")})
    line = next(e for e in logged(pipeline, "call_ended") if e["call_id"] == ok["call_id"])
    assert line["message"] == f"call {ok['call_id']} ended success by csv_strict@1.0.0 after 1 attempt in " \
                              f"{line['elapsed_ms']:.0f} ms", line


def test_a_shell_whose_key_prefix_no_worker_serves_is_told_so_where_one_is_served(pipeline, cli) -> None:
    """QA ops L8: with another FITTEST_KEY_PREFIX than the workers', `tools` read every tool as
    untouched without a word, and `health` said to start the beat, which ran."""
    from workers.state.redis import SERVED_MARK

    marks = redis.Redis.from_url(pipeline.settings.redis_url)
    pipeline.wait_for(lambda: marks.exists(pipeline.settings.key_prefix + SERVED_MARK))  # the memory worker marks it as it starts
    marks.close()
    listed = cli("tools", FITTEST_KEY_PREFIX="not_the_workers:")
    said = words(listed.output)
    assert listed.exit_code == 0 and "warning: no memory worker has served FITTEST_KEY_PREFIX not_the_workers: on this " \
        "Redis, and one has served" in said and "is this shell's prefix the workers'?" in said, said
    beat = cli("health", "--json", "--check", "beat", "-w", "beat", FITTEST_KEY_PREFIX="not_the_workers:")
    detail = json.loads(beat.output)["checks"][0]["detail"]
    assert beat.exit_code == 1 and "is this shell's prefix the workers'?" in detail and "start the beat" not in detail, detail
    assert "no memory worker has served" not in cli("tools").output  # the workers' own prefix
    # QA 57a M6: so are the other commands that show what is stored under the prefix
    for command in (["show", "csv_lenient"], ["weights"], ["feedback", "show", "csv_lenient"], ["metrics", "--once"]):
        shown = cli(*command, FITTEST_KEY_PREFIX="not_the_workers:")
        assert "is this shell's prefix the workers'?" in words(shown.output), (command, shown.output)
        assert "no memory worker has served" not in cli(*command).output, command
    assert "start the beat role" in json.loads(cli("health", "--json", "--check", "beat", "-w", "beat").output)["checks"][0]["detail"]


def test_a_revoked_call_leaves_the_calls_in_flight_at_once_and_is_counted_as_revoked(pipeline, cli) -> None:
    """QA ops L5: a call revoked from Flower stayed in fittest_calls_in_flight until the rescue sweep
    found it overdue (the visibility timeout, ~16 min), and no status counted it."""
    before = calls_counted(cli, "revoked")
    call_id = "revoked-from-flower-1"
    control = make_app(pipeline.settings)  # as Flower's: the workers' control channel
    try:
        control.control.revoke(call_id)  # before its message arrives: what a revoke does to a call's next step
        pipeline.wait_for(lambda: call_id in {i for ids in (control.control.inspect(timeout=1).revoked() or {}).values()
                                              for i in ids}, timeout=30)
    finally:
        control.close()
    pipeline.client.send("resilient_tool_call", scenario="sort these numbers", input={"numbers": [2, 1]}, call_id=call_id)
    # Recorded as in flight as it is sent, unless the worker took it and ended it first (a revoked
    # call's end keeps a later first record out: under load the clean-clone run saw that order).
    # Either way it leaves flight at once, not after the sweep's visibility timeout.
    pipeline.wait_for(lambda: not pipeline.client.in_flight(call_id), timeout=30)
    pipeline.wait_for(lambda: calls_counted(cli, "revoked") == before + 1, timeout=30)


def test_explain_refuses_an_input_a_call_would_refuse(pipeline) -> None:
    """QA: a call with a 1.1 MB input was refused as invalid while `explain` ranked it."""
    big = {"text": "x" * (pipeline.settings.input_limit_bytes + 1)}
    ranked = pipeline.client.wait(pipeline.client.send("explain", scenario="count the words", input=big), 30)
    called = pipeline.call(scenario="count the words", input=big)
    assert ranked["status"] == called["status"] == "invalid" and ranked["errors"] == called["errors"], ranked
    assert ranked["errors"][0]["field"] == "input" and ranked["ranking"] == []
    sent = pipeline.client.send("explain", scenario="count the words", max_attempts="3")  # refused by its type
    refused = pipeline.client.wait(sent, 30)
    assert refused["status"] == "invalid" and refused["call_id"] == sent.id, refused  # QA 59a L1: it read "invalid"


def test_a_service_judges_a_calls_output_and_the_next_ranking_weighs_it(pipeline, cli) -> None:
    from fittest.client import FittestClient

    scenario = "turn this comma separated text into a list of rows"  # no other test's calls near it

    def feedback_in_ranking(key: str) -> float:
        ranking = json.loads(cli("explain", scenario, "--namespace", "csv_lenient", "--json").output)["ranking"]
        return next(r["breakdown"]["feedback"] for r in ranking if r["key"] == key)

    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as client:
        result = client.run(scenario, input={"text": "a,b\n1,2\n"}, namespace="csv_lenient")
        assert result.tool is not None and result.version is not None
        key = f"{result.tool}@{result.version}"
        pipeline.settled()  # the call's own outcome is feedback too (a success: positive)
        liked = client.record_feedback(result.tool, "positive", version=result.version, scenario=scenario)
        # the plans of the calls before it cached what they searched: the ranking is not one of those
        assert feedback_in_ranking(key) == pytest.approx(liked.score_now, abs=0.01)
        answer = client.record_feedback(result.tool, "negative", version=result.version, scenario=scenario,
                                        reason="the rows came back as one")
        assert answer.feedback.tool == result.tool and answer.feedback.version == result.version
        assert answer.score_now is not None and liked.score_now is not None  # the vector memory answered
        assert answer.score_now < liked.score_now
        assert feedback_in_ranking(key) == pytest.approx(answer.score_now, abs=0.01)  # at once
        # A judgement of this call's output takes the place of the success its outcome recorded.
        judged = client.record_feedback(result.tool, "negative", version=result.version, scenario=scenario,
                                        reason="wrong rows", call_id=result.call_id)
        assert judged.score_now is not None and judged.score_now < 0 and feedback_in_ranking(key) == pytest.approx(judged.score_now, abs=0.01)
        # QA: a call judged without a scenario was judged as "the tool in general"; it is the call's job,
        # and the version it ran.
        again = client.record_feedback(result.tool, "negative", reason="wrong rows", call_id=result.call_id)
        assert again.feedback.scenario == scenario and again.feedback.version == result.version
        assert again.score_now == pytest.approx(judged.score_now, abs=0.01)  # it replaced that judgement
        assert again.feedback.id == judged.feedback.id  # QA: three judgements of one call added up
    shown = as_published(json.loads(cli("feedback", "show", result.tool, "--json").output), "feedback_show_output")
    assert any(e["reason"] == "the rows came back as one" and e["value"] < 0 for e in shown["entries"])
    # The judged call's own success no longer counts, and is not listed as if it did (QA: the trend counted both).
    of_call = [e for e in shown["entries"] if e["call_id"] == result.call_id]
    assert [e["source"] for e in of_call] == ["manual"] and shown["replaced"] >= 1
    # ...of that version: `NAME@VERSION` counts its own (QA ops: the tool's were given as the version's)
    mine = json.loads(cli("feedback", "show", f"{result.tool}@{result.version}", "--json").output)
    assert mine["replaced"] == shown["replaced_by_version"][result.version] >= 1
    assert re.search(r"left out, replaced by a judgement of (its|their) call", words(cli("feedback", "show", result.tool).output))
    schema = json.loads(cli("schema", "record_feedback").output)  # for a service that sends the task itself
    assert schema["properties"]["sentiment"]["enum"] == ["positive", "negative"]


def test_a_call_id_names_one_job_for_the_client_and_for_send_task(pipeline, cli) -> None:
    from fittest.client import FittestClient

    scenario = "rows of the nightly export, batch 42"  # far from the judged test's job, which its judgement would move
    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as client:
        # A call whose caller chose its id is found by its outcome, applied in batches: judged at once
        # it is looked for again (QA: 5 of 5 such judgements sent as the call returned were refused).
        chosen = client.run(scenario, input={"text": "x,y\n3,4\n"}, namespace="csv_lenient", call_id="my-service-call-42")
        assert chosen.tool == "csv_lenient"
        # Its result is kept under the id its caller chose (QA: `fittest result` knew only the task id).
        kept = cli("result", "my-service-call-42", "--json")
        assert kept.exit_code == 0, kept.output
        assert json.loads(kept.output)["call_id"] == "my-service-call-42" and json.loads(kept.output)["tool"] == "csv_lenient"
        assert client.record_feedback(chosen.tool, "positive", call_id="my-service-call-42").feedback.scenario == scenario
        # The same job sent again under its id goes through; another job under it is refused before it
        # is sent (QA AC B5: it was handed the first job's result, and what it taught was dropped).
        assert client.run(scenario, input={"text": "x,y\n3,4\n"}, namespace="csv_lenient", call_id="my-service-call-42").call_id \
            == "my-service-call-42"
        with pytest.raises(ValueError, match="call_id: 'my-service-call-42' names another job sent within the last 24 h"):
            client.submit(scenario, input={"text": "p,q\n5,6\n"}, namespace="csv_lenient", call_id="my-service-call-42")
        assert json.loads(cli("result", "my-service-call-42", "--json").output)["output"] == [{"x": "3", "y": "4"}]
        # A service without the client (celery's send_task, its own task ids) is told so by the worker,
        # and the job does not run under that id; the same job sent again does.
        raw = client.celery.send_task("fittest.resilient_tool_call", queue="selection", kwargs={
            "scenario": scenario, "input": {"text": "p,q\n5,6\n"}, "namespace": "csv_lenient", "call_id": "my-service-call-42"})
        refused = raw.get(timeout=60)
        assert refused["status"] == "invalid" and refused["attempts"] == [], refused
        assert refused["errors"][0]["field"] == "call_id" and "names another job sent within the last 24 h" \
            in refused["errors"][0]["message"], refused
        same = client.celery.send_task("fittest.resilient_tool_call", queue="selection", kwargs={
            "scenario": scenario, "input": {"text": "x,y\n3,4\n"}, "namespace": "csv_lenient", "call_id": "my-service-call-42"})
        assert same.get(timeout=60)["status"] == "success"
        # So is the id a call was given without one, which its result carries (QA onboarding H1: the
        # client handed a second job sent under it the first job's result, and the worker ran it).
        given = client.run(scenario, input={"text": "a,b\n1,2\n"}, namespace="csv_lenient")
        with pytest.raises(ValueError, match=f"call_id: '{given.call_id}' names another job") as taken_id:
            client.submit(scenario, input={"text": "p,q\n5,6\n"}, namespace="csv_lenient", call_id=given.call_id)
        assert [(e.field, e.type) for e in taken_id.value.errors] == [("call_id", "another_job")]  # type: ignore[attr-defined]
        echo = {"scenario": "show the argv a program gets", "namespace": "echo_args"}  # far from the other tests' calls
        made = client.celery.send_task("fittest.resilient_tool_call", queue="selection", kwargs={**echo, "input": {"text": "a"}})
        assert made.get(timeout=60)["status"] == "success"  # sent without the client: its task id is claimed by the worker
        taken = client.celery.send_task("fittest.resilient_tool_call", queue="selection", kwargs={
            **echo, "input": {"text": "b"}, "call_id": made.id})
        assert taken.get(timeout=60)["errors"][0]["field"] == "call_id"
        # A call_id sent without task_id=call_id names its call, whose result is under its task id:
        # `fittest result` says so (QA 57a L10: "none finished in the last day").
        chosen = client.celery.send_task("fittest.resilient_tool_call", queue="selection", kwargs={
            **echo, "input": {"text": "c"}, "call_id": "foreign-chosen-9"})
        assert chosen.get(timeout=60)["call_id"] == "foreign-chosen-9"
        looked = cli("result", "foreign-chosen-9", "--timeout", "30")
        assert looked.exit_code == 1 and ("a call was sent with this call_id in the last day, and no result is kept under "
                                          "it: it is kept under the task id the call was sent with") in words(looked.output), looked.output


def test_a_call_sent_again_under_its_id_is_answered_by_its_result_without_running_again(pipeline) -> None:
    """QA 52a M2: the same job sent again under its `call_id`, after its result or while it ran,
    ran its tools again each time (four lines from a ledger tool for four senders), where each
    caller was handed the first result. QA 52a L1: with an option written out at its default, it
    was refused as another job."""
    from concurrent.futures import ThreadPoolExecutor

    from fittest.client import FittestClient

    from workers.metrics import FLUSH_INTERVAL_S, reader_for

    job: dict[str, Any] = {"scenario": "rows of the resent export, batch 7", "input": {"text": "k,v\n7,8\n"},
                           "namespace": "csv_lenient"}
    reader = reader_for(pipeline.settings)

    def runs() -> int:
        """The tool's runs, as the executors' metrics saw them (its counters count an attempt id once)."""
        pipeline.settled()
        time.sleep(2 * FLUSH_INTERVAL_S)  # the executors' buffered metrics
        return len(reader.attempts("csv_lenient@1.0.0"))

    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as client:
        before = runs()
        first = client.run(**job, call_id="resent-call-7")
        assert first.status == "success" and runs() == before + 1
        again = client.run(**job, call_id="resent-call-7", max_attempts=5)  # the default, written out
        assert again == first and runs() == before + 1
        with ThreadPoolExecutor(4) as pool:  # four senders at once
            answers = list(pool.map(lambda _: client.run(**job, call_id="resent-call-8"), range(4)))
        assert {a.status for a in answers} == {"success"} and len({a.model_dump_json() for a in answers}) == 1
        assert runs() == before + 2


def test_feedback_naming_a_call_tool_or_version_that_does_not_exist_is_refused(pipeline) -> None:
    """QA: feedback of a call that does not exist, or did not run the tool, was recorded."""
    from pydantic import ValidationError

    from fittest.client import FittestClient, Refused

    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as client:
        result = client.run("rows of the weekly export, batch 7", input={"text": "a,b\n1,2\n"}, namespace="csv_lenient")
        assert result.tool == "csv_lenient"
        # QA 59a L1: each refusal typed, as a program branches on it, not its words
        with pytest.raises(Refused, match="no call 0123456789abcdef is known") as refused:
            client.record_feedback(result.tool, "negative", call_id="0123456789abcdef")
        assert [(e.field, e.type) for e in refused.value.errors] == [("call_id", "no_such_call")]
        with pytest.raises(Refused, match=f"call {result.call_id} ran {result.tool}@{result.version}, not slugify") as refused:
            client.record_feedback("slugify", "negative", call_id=result.call_id)
        assert [(e.field, e.type) for e in refused.value.errors] == [("call_id", "not_in_call")]
        with pytest.raises(ValidationError, match="sentiment"):
            client.record_feedback(result.tool, "meh")  # type: ignore[arg-type]  # refused before it is sent
        with pytest.raises(Refused, match="no tool named 'nosuch'") as refused:
            client.record_feedback("nosuch", "positive")
        assert refused.value.errors[0].type == "no_such_tool"
        # QA integrator 10: the version is what is wrong, not the tool.
        with pytest.raises(ValueError, match=rf"^version: {result.tool} has no version '9.9.9' \(it has "):
            client.record_feedback(result.tool, "positive", version="9.9.9")


def words(output: str) -> str:
    """The command's output as one line: rich wraps titles and messages to the terminal's width."""
    return " ".join(output.split())


def test_a_judgement_under_another_scenario_still_takes_the_place_of_the_calls_outcome(pipeline, cli) -> None:
    """QA: a call judged with --scenario far from its own kept its outcome's +25 in the rankings of
    its own scenario, while `feedback show` said the outcome was replaced."""
    from fittest.client import FittestClient

    # No other test's calls near it: "turn these semicolon separated records into rows" was 0.72 like
    # the judged test's job, whose negative judgements only another test's positive one had offset.
    scenario = "split the semicolon delimited records of the ledger"

    def feedback_in_ranking() -> float:
        ranking = json.loads(cli("explain", scenario, "--namespace", "csv_lenient", "--json").output)["ranking"]
        return next(r["breakdown"]["feedback"] for r in ranking if r["key"] == "csv_lenient@1.0.0")

    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as client:
        result = client.run(scenario, input={"text": "a;b\n1;2\n"}, namespace="csv_lenient")
        assert (result.tool, result.version) == ("csv_lenient", "1.0.0"), result
        pipeline.settled()  # the success's own outcome (+25 here) is applied
        client.record_feedback("csv_lenient", "negative", version="1.0.0", call_id=result.call_id,
                               scenario="compute the quarterly tax liability of a corporation in germany")
    assert abs(feedback_in_ranking()) < 1  # the outcome no longer counts; the judgement is about another job
    shown = json.loads(cli("feedback", "show", "csv_lenient", "--json").output)
    assert [e["source"] for e in shown["entries"] if e["call_id"] == result.call_id] == ["manual"]


def test_a_call_to_a_namespace_nobody_ranked_says_it_was_ranked_by_its_scenario(pipeline, cli) -> None:
    sent = cli("call", "parse this csv text into rows", "--namespace", "csv_lenint", "--input", '{"text": "a,b\\n1,2\\n"}')
    # ...and names the tool it is close to (QA 64c: `--namespace tmp_convert` named no temp_convert)
    assert ("warning: no tool named 'csv_lenint' (did you mean csv_lenient?): the call was ranked by its scenario "
            "alone") in words(sent.output)
    # A service that sends the call is told as much in the result (QA: it saw nothing).
    sent_json = cli("call", "parse this csv text into rows", "--namespace", "csv_lenint", "--json",
                    "--input", '{"text": "a,b\\n1,2\\n"}')
    assert sent_json.exit_code == 0, sent_json.output
    told = json.loads(sent_json.stdout)
    assert told["notes"] == ["no tool named 'csv_lenint' (did you mean csv_lenient?): the call was ranked by its scenario alone"]
    # What a real worker answered passes the schema `fittest schema call_output` publishes (QA 60e N5).
    jsonschema.validate(told, payload_schemas()["call_output"])
    assert told["status"] == "success" and told["tool"].startswith("csv_")
    # One whose candidates all fail ends as a call that named no tool (QA 49: its evolution said
    # "evolution could not be prepared: no tool named 'nosuchns'").
    failed = cli("call", "split this tab separated table into records", "--namespace", "nosuchns", "--input", '{"word": "abc"}',
                 "--max-attempts", "2")
    assert failed.exit_code == 1, failed.output
    assert "no tool tried matches this job clearly" in words(failed.output) and "could not be prepared" not in failed.output
    right = cli("call", "parse this csv text into rows", "--namespace", "csv_lenient", "--input", '{"text": "a,b\\n1,2\\n"}')
    assert right.exit_code == 0 and "warning" not in right.output
    # A version that does not exist, of a tool that does (QA: "no tool matches", and the typo warning),
    # is refused as other commands refuse it (QA AA: exit code 1).
    missing = cli("call", "parse this csv text into rows", "--namespace", "csv_lenient@9.0.0", "--input", '{"text": "a"}')
    assert missing.exit_code == 2 and "csv_lenient has no version 9.0.0 (it has 1.0.0" in words(missing.output)
    assert "warning" not in missing.output
    nobody = cli("explain", "parse this csv text into rows", "--namespace", "csv_nosuch@1.0.0")  # QA AB: exit code 0
    assert nobody.exit_code == 2 and "csv_nosuch has no version 1.0.0: no tool is named 'csv_nosuch'" in words(nobody.output)
    assert "ranking for" not in nobody.output  # no empty table before the refusal
    typo = cli("explain", "parse this csv text into rows", "--namespace", "csv_lenent@1.0.0")  # QA 65a: no hint
    assert typo.exit_code == 2 and "no tool is named 'csv_lenent' (did you mean csv_lenient@1.0.0?)" in words(typo.output)
    untagged = cli("explain", "parse this csv text into rows", "--tag", "nosuchtag", "--json")
    assert json.loads(untagged.stdout)["status"] == "no_candidates"  # as a call ends (QA AC)
    # A tag no tool has is named, and refused as a version no tool has is (QA new user: exit 1)
    assert untagged.exit_code == 2 and json.loads(untagged.stdout)["no_candidates_reason"] == "no_such_tag"
    untagged_call = cli("call", "parse this csv text into rows", "--tag", "csv", "--tag", "nosuchtag", "--input", '{"text": "a"}')
    assert untagged_call.exit_code == 2, untagged_call.output
    assert "no tool has the tag 'nosuchtag' (the tags: astronomy, csv, debug, parsing)" in words(untagged_call.output)
    # Tags that exist but no tool has together: no tool matches, as before
    apart = cli("call", "parse this csv text into rows", "--tag", "csv", "--tag", "astronomy", "--input", '{"text": "a"}')
    assert apart.exit_code == 1 and "no tool matches this scenario, namespace and tags" in words(apart.output)
    # A context key nothing reads, close to one that it reads, is named with the key it likely meant.
    typo = cli("call", "parse this csv text into rows", "--context", '{"langauge": "python", "user_id": 7}', "--json",
               "--input", '{"text": "a,b\\n1,2\\n"}')
    assert typo.exit_code == 0, typo.output
    assert json.loads(typo.stdout)["notes"] == ["context key 'langauge' is not read by selection: did you mean 'language'?"]


def test_the_call_command_refuses_a_bad_payload_before_sending(cli) -> None:
    blank = cli("call", "   ", "--timeout", "1")
    assert blank.exit_code == 2 and "error: scenario: it is blank (spaces only): say what you need done" in blank.output
    attempts = cli("call", "sort numbers", "--max-attempts", "0", "--timeout", "1")
    assert attempts.exit_code == 2 and "--max-attempts" in words(attempts.output)


def test_a_call_is_shown_again_by_its_id_and_one_nobody_ran_says_so(pipeline, cli, private_redis: RedisServer) -> None:
    sent = cli("call", "parse this csv text into rows", "--namespace", "csv_lenient", "--input", '{"text": "a,b\\n1,2\\n"}',
               "--json")
    assert sent.exit_code == 0, sent.output
    first = json.loads(sent.output)
    again = cli("result", first["call_id"], "--json")
    assert again.exit_code == 0 and json.loads(again.output) == first
    assert f"call {first['call_id']}: success by csv_lenient@1.0.0" in words(cli("result", first["call_id"]).output)

    # A Redis no worker reads: the call stays queued, and the command says how to find it later.
    waited = cli("call", "parse this csv text into rows", "--timeout", "1", FITTEST_REDIS_URL=private_redis.url,
                 FITTEST_RESULT_BACKEND=private_redis.url)
    assert waited.exit_code == 1
    found = re.search(r"`fittest result (\S+)`", words(waited.output))
    assert found is not None, waited.output
    call_id = found.group(1)
    assert f"no result for call {call_id} within 1 s" in words(waited.output)
    later = cli("result", call_id, "--timeout", "1", FITTEST_REDIS_URL=private_redis.url, FITTEST_RESULT_BACKEND=private_redis.url)
    assert later.exit_code == 1 and "it is waiting for a selection worker (fittest.resilient_tool_call) and goes on" in words(later.output)
    assert cli("result", "no such id!").exit_code == 2


def test_the_client_tells_a_call_it_cannot_get_from_one_that_goes_on(pipeline, private_redis: RedisServer) -> None:
    """QA integrator 1 and 2: `result()` of an id nobody sent, or whose result expired, waited its
    whole timeout (120 s by default) and then said the call "goes on"; a timeout of 0 waited for ever."""
    import time

    import redis as redis_py

    from fittest.client import CallTimeout, FittestClient, UnknownCall

    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as client:
        started = time.monotonic()
        with pytest.raises(UnknownCall, match="no result for call never-sent-1: no call with this id is queued"):
            client.result("never-sent-1", timeout=60)
        assert time.monotonic() - started < 10
        done = client.run("parse this csv text into rows", {"text": "a,b\n1,2\n"}, namespace="csv_lenient")
        assert done.status == "success" and client.result(done.call_id, timeout=0).output == done.output
    redis_py.Redis.from_url(pipeline.settings.backend_url).delete(f"celery-task-meta-{done.call_id}")  # its day is over
    with FittestClient(pipeline.settings.redis_url, settings=pipeline.settings) as later:
        pipeline.wait_for(lambda: not later.in_flight(done.call_id), timeout=10)  # its end is written just after its result
        with pytest.raises(UnknownCall):
            later.result(done.call_id, timeout=0)
    # Sent where no worker reads: it goes on, and a timeout of 0 or less says so at once.
    with FittestClient(private_redis.url) as idle:
        # QA recheck F6: a foreign send_task's call, queued, is not "unknown" (its caller might send it again).
        idle.celery.send_task("fittest.resilient_tool_call", kwargs={"scenario": "x", "input": {}}, queue="selection",
                              task_id="foreign-1")
        with pytest.raises(CallTimeout):
            idle.result("foreign-1", timeout=4)
        for timeout in (0, -1, 0.001):
            started = time.monotonic()
            with pytest.raises(CallTimeout, match="it goes on"):
                idle.run("parse this csv text into rows", {"text": "a\n"}, timeout=timeout)
            assert time.monotonic() - started < 5, timeout


def test_a_new_memory_worker_indexes_the_tools_before_its_first_call(tmp_path, redis_url, model_path, monkeypatch) -> None:
    from tests.integration.conftest import TEST_TOOLS, pipeline_running
    from workers.tool_catalog import load_registry

    with pipeline_running(tmp_path, redis_url, model_path, TEST_TOOLS, roles=("memory",)) as fresh:
        texts = sum(1 + len(m.examples) for m in load_registry(fresh.settings).all())
        health = cli_runner(monkeypatch, fresh.env)

        def indexed() -> bool:
            result = health("health", "--json", "--check", "store", "--timeout", "5")
            return {c["name"]: c["detail"] for c in json.loads(result.output)["checks"]}["store"].startswith(f"{texts} tool vectors")

        fresh.wait_for(indexed, timeout=60)  # no call was sent

"""The whole call path on real services: a Celery worker per role, Redis broker, Qdrant Edge,
fastembed with the shipped model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.integration.conftest import TEST_TOOLS, pipeline_running

CSV_RAGGED = "a,b,c\n1,2,3\n4,5\n"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, redis_url, model_path):
    """These tests check the seed formulas and the fallback order they give, so they pin the
    deterministic `seed` policy (the default policy explores on purpose)."""
    with pipeline_running(tmp_path_factory.mktemp("pipeline_seed"), redis_url, model_path, TEST_TOOLS,
                          FITTEST_POLICY="seed") as p:
        yield p


def test_success_on_first_candidate(pipeline):
    result = pipeline.call(scenario="parse this csv text into rows", input={"text": "a,b\n1,2\n"},
                           namespace="csv_strict")
    assert result["status"] == "success", result
    assert result["tool"] == "csv_strict"
    assert result["output"] == [{"a": "1", "b": "2"}]
    assert len(result["attempts"]) == 1
    top = result["ranking"][0]
    assert top["key"] == "csv_strict@1.0.0"
    assert top["breakdown"]["source"] == "original" and top["breakdown"]["base"] == 0.9


def test_fallback_to_second_candidate_and_demotion(pipeline):
    before = pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"]
    result = pipeline.call(scenario="parse this csv text into json rows", input={"text": CSV_RAGGED},
                           namespace="csv_strict")
    assert result["status"] == "success", result
    assert [a["tool"] for a in result["attempts"]] == ["csv_strict", "csv_lenient"]
    assert result["attempts"][0]["outcome"] == "failure"
    assert result["attempts"][0]["error_class"] == "crash"
    assert "ragged row" in result["attempts"][0]["error_message"]
    assert result["output"] == [{"a": "1", "b": "2", "c": "3"}, {"a": "4", "b": "5", "c": ""}]
    # mark_failure runs on the feedback queue: a crash is high severity, -0.10.
    pipeline.wait_for(lambda: pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"].failures
                      == before.failures + 1)
    after = pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"]
    assert round(before.quality - after.quality, 4) == 0.10


def test_all_candidates_fail(pipeline):
    result = pipeline.call(scenario="lunar phase calculator for a date", input={"date": "2026-11-22"},
                           namespace="moon_a", max_attempts=2)
    assert result["status"] == "failed", result
    assert {a["tool"] for a in result["attempts"]} == {"moon_a", "moon_b"}
    assert all(a["outcome"] == "failure" and a["error_class"] == "crash" for a in result["attempts"])
    assert "failed" in result["message"]
    keys = ["moon_a@1.0.0", "moon_b@1.0.0"]
    pipeline.wait_for(lambda: all(s.failures >= 1 for s in pipeline.state().stats(keys).values()))
    assert all(s.quality < 1.0 for s in pipeline.state().stats(keys).values())


def test_invalid_payload_names_the_field_and_worker_stays_up(pipeline):
    bad = pipeline.client.wait(pipeline.client.send("resilient_tool_call", scenario="", input="not an object", max_attempts=-3,
                                                    namespace="Sort Numbers!", version="latest"), 30)
    assert bad["status"] == "invalid"
    fields = {e["field"] for e in bad["errors"]}
    assert {"scenario", "input", "max_attempts", "namespace", "version"} <= fields  # no tool has such a name or version
    good = pipeline.call(scenario="parse csv text", input={"text": "x\n1\n"}, namespace="csv_lenient")
    assert good["status"] == "success"


def test_call_tool_by_name_and_without_one(pipeline):
    result = pipeline.client.run_tool("csv_lenient", input={"text": "x\n1\n"})
    assert result.status == "success" and result.tool == "csv_lenient", result
    assert result.output == [{"x": "1"}]
    nameless = pipeline.client.wait(pipeline.client.send("call_tool", input={"text": "x"}), 30)
    assert nameless["status"] == "invalid" and [e["field"] for e in nameless["errors"]] == ["name"], nameless
    # `namespace` is `name` (the schema says so), and a key neither payload has is named beside a
    # missing name (QA ops L1: `{"tool": …}` and `{"namespace": …}` were told only that name is required).
    by_namespace = pipeline.client.wait(pipeline.client.send("call_tool", namespace="csv_lenient", input={"text": "x\n1\n"}), 30)
    assert by_namespace["status"] == "success" and by_namespace["tool"] == "csv_lenient", by_namespace
    miscalled = pipeline.client.wait(pipeline.client.send("call_tool", tool="csv_lenient", input={"text": "x"}), 30)
    assert [e["field"] for e in miscalled["errors"]] == ["name", "tool"], miscalled
    unknown = pipeline.client.run_tool("no_such_tool")
    assert unknown.status == "no_candidates" and "no_such_tool" in unknown.message
    assert unknown.no_candidates_reason == "no_such_tool"  # QA integrator 5: a service branches on it (it was None)
    # A call whose own `exclude` left nothing says so, not only "no tool matches".
    nothing = pipeline.client.run("parse this csv text into rows", {"text": "x\n1\n"}, tags=["csv"],
                                  exclude=["csv_lenient@1.0.0", "csv_strict@1.0.0"])
    assert nothing.status == "no_candidates" and nothing.message == (
        "no tool matches this scenario, namespace and tags (the call excludes csv_lenient@1.0.0, csv_strict@1.0.0)"), nothing


def test_a_call_that_wants_only_clear_matches_gets_no_answer_rather_than_a_weak_matchs(pipeline):
    """QA ops L4: a fallback 0.44 like the job answered it, status success, exit 0."""
    strict = pipeline.client.run("parse this csv text into rows", {"text": "x\n1\n"}, min_similarity=0.99)
    assert strict.status == "no_candidates" and strict.no_candidates_reason == "no_match", strict
    assert strict.message == "no tool matches this scenario, namespace and tags at least 0.99"
    served = pipeline.client.run("parse this csv text into rows", {"text": "x\n1\n"}, min_similarity=0.3)
    assert served.status == "success" and served.tool is not None and served.tool.startswith("csv_"), served
    assert served.ranking and all(r.breakdown.similarity >= 0.3 for r in served.ranking), served.ranking


def test_a_call_naming_a_tool_ends_where_the_tool_refuses_its_input(pipeline):
    """QA AD: `run_tool("fast_sort", {"numbers": "x"})` went on to four other tools, three of them
    text tools, each demoted for a job it was never meant for."""
    pipeline.settled()  # the earlier calls' outcomes (batched) are applied: they would change it meanwhile
    before = pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"]
    result = pipeline.client.run_tool("csv_lenient", input={"rows": 3})
    assert result.status == "failed", result
    assert [(a.tool, a.error_class) for a in result.attempts] == [("csv_lenient", "bad_input")]
    # with the tool's own words, as a call by scenario gives them (QA 52a L3: "(bad_input)" alone)
    said = f"csv_lenient@1.0.0 refused the input ({result.attempts[0].error_message}): the tools outside csv_lenient were not tried"
    assert result.attempts[0].error_message and said in result.message, result.message
    after = pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"]
    assert after.model_dump() == before.model_dump(), (before, after)


def test_a_refused_input_of_a_job_the_tool_does_is_the_callers_mistake_and_does_not_demote_it(pipeline):
    """QA AD: a caller left a key out of a job its tool had done, and the refusal demoted the tool
    (QA AE: 11 took it from 1.00 to 0.43). Selection decides, when it plans the call, that the tool
    does the job; the execution worker marks the refusal, and the feedback worker counts it without
    demoting the tool."""
    for i in range(3):
        done = pipeline.call(scenario=f"turn these comma separated lines into records (batch {i})",
                             input={"text": "a,b\n1,2\n"}, namespace="csv_strict")
        assert done["status"] == "success", done
    pipeline.settled()  # the successes are in the vector memory (fittest.learn is batched)
    before = pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"]
    result = pipeline.call(scenario="turn these comma separated lines into records (batch 9)", input={"rows": 3},
                           namespace="csv_strict")
    assert result["status"] == "failed", result
    assert [(a["tool"], a["error_class"], a["callers_mistake"]) for a in result["attempts"]] == [("csv_strict", "bad_input", True)]
    assert "it does such jobs (3 or more like this one succeeded): check the input" in result["message"]
    pipeline.wait_for(lambda: pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"].refused_inputs
                      == before.refused_inputs + 1)
    after = pipeline.state().stats(["csv_strict@1.0.0"])["csv_strict@1.0.0"]
    assert (after.quality, after.failures) == (before.quality, before.failures)  # counted apart, not demoted
    # By scenario alone, the input is not handed on to the tools that do not do such jobs (echo_args
    # takes any input, and would have "succeeded"), nor does the call start an evolution (QA ops).
    keys = ["csv_strict@1.0.0", "csv_lenient@1.0.0", "echo_args@1.0.0"]
    qualities = {k: s.quality for k, s in pipeline.state().stats(keys).items()}
    by_scenario = pipeline.call(scenario="turn these comma separated lines into records (batch 10)", input={"rows": 3})
    assert by_scenario["status"] == "failed", by_scenario
    tried = [(a["tool"], a["callers_mistake"]) for a in by_scenario["attempts"]]
    assert ("csv_strict", True) in tried and "echo_args" not in {tool for tool, _ in tried}, tried
    assert by_scenario["message"].startswith("csv_strict@1.0.0, which does such jobs, refused the input"), by_scenario
    assert "evolution" not in by_scenario["message"] and by_scenario["evolution"] is None
    pipeline.settled()
    assert {k: s.quality for k, s in pipeline.state().stats(keys).items()} == qualities


def test_shell_metacharacters_reach_the_program_as_one_argument(pipeline):
    nasty = "; rm -rf / && echo $(whoami) | cat > /tmp/pwned"
    result = pipeline.call(scenario="show which argv the program gets", input={"text": nasty}, namespace="echo_args")
    assert result["status"] == "success", result
    assert result["output"] == {"argv": [nasty]}


def test_foreign_service_sends_by_task_name(pipeline, tmp_path):
    """A process that does not import fittest: only celery, the broker URL and the task name."""
    script = textwrap.dedent(
        """
        import json, sys
        from celery import Celery
        url = sys.argv[1]
        app = Celery("foreign", broker=url, backend=url)
        app.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
        r = app.send_task("fittest.resilient_tool_call", queue="selection",
                          kwargs={"scenario": "parse csv text into rows", "input": {"text": "k,v\\n1,2\\n"},
                                  "namespace": "csv_lenient"})
        print(json.dumps(r.get(timeout=60)))
        """
    )
    out = subprocess.run([sys.executable, "-c", script, pipeline.settings.redis_url], cwd=tmp_path,
                         capture_output=True, text=True, timeout=90,
                         env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})
    assert out.returncode == 0, out.stderr
    assert "workers" not in out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == "success"
    assert result["output"] == [{"k": "1", "v": "2"}]


def test_the_demo_will_not_run_beside_another_stacks_workers_on_one_database(pipeline, model_path, tmp_path):
    """QA new user: `fittest demo` beside `fittest up` on one Redis database had its calls run by
    up's workers (Celery's queues are not under FITTEST_KEY_PREFIX), and still said it had kept
    its state apart."""
    from pathlib import Path

    env = {**pipeline.env, "FITTEST_REDIS_URL": pipeline.settings.redis_url, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
           "FITTEST_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([str(Path(sys.executable).parent / "fittest"), "demo", "--calls", "2"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "workers already take the calls of this Redis database" in done.stdout and "/1" in done.stdout, done.stdout
    assert "sending 2 calls" not in done.stdout


@pytest.mark.parametrize("queue", ["execution", "evolution"])
def test_a_call_sent_to_another_workers_queue_is_handed_on_to_selection(pipeline, tmp_path, queue):
    """QA 59a H1: `send_task("fittest.resilient_tool_call", queue="execution")` ran the call's
    selection in the executor, which served it degraded (no vector store there), loaded the model
    into its pool processes, and left the memory worker's embedded store damaged by its try to open
    it. The call is now handed on to its own queue, where the memory worker ranks it as any call."""
    sent = pipeline.client.send("resilient_tool_call", queue=queue, scenario="parse this csv text into rows",
                                input={"text": "a,b\n1,2\n"}, namespace="csv_strict")
    result = pipeline.client.wait(sent, 60)
    assert result["status"] == "success" and result["tool"] == "csv_strict", result
    assert not result.get("degraded"), result["degraded"]
    logs = pipeline.stack.log_dir
    assert logs is not None
    worker_log = (logs / ("executor.log" if queue == "execution" else "evolver.log")).read_text()
    handed = [json.loads(line) for line in worker_log.splitlines()
              if '"misrouted_handed_on"' in line and sent.id in line]
    assert [(h["queue"], h["to"]) for h in handed] == [(queue, "selection")], handed
    assert "vector memory unavailable" not in worker_log and "Qdrant Edge shard" not in worker_log


def test_a_call_sent_with_a_countdown_is_not_said_unknown_while_a_worker_holds_it(pipeline):
    """QA 59a M1: a call a service sent with Celery's `countdown` waits in the worker that took it
    until its time, neither in flight nor queued: `result()` raised UnknownCall after 3.5 s, and a
    caller told so may send the job again, which then runs twice."""
    from fittest.client import CallTimeout
    from tests.integration.delivery import foreign_sender

    sender = foreign_sender(pipeline)
    try:
        sent = sender.send_task("fittest.resilient_tool_call", queue="selection", countdown=10,
                                kwargs={"scenario": "parse this csv text into rows", "input": {"text": "a\n1\n"},
                                        "namespace": "csv_lenient"})
        with pytest.raises(CallTimeout) as waited:  # not UnknownCall: it waits for its time
            pipeline.client.result(sent.id, timeout=5)
        # ...and says where (QA 63g: `where` was None)
        assert waited.value.where is not None and "sent with a countdown or an eta" in waited.value.where, waited.value
        assert pipeline.client.result(sent.id, timeout=60).status == "success"
    finally:
        sender.close()


def test_a_compressed_call_sent_to_another_queue_is_handed_on_whole(pipeline):
    """QA 59f F1: a service sending large inputs compressed (`compression="zlib"`) and to the wrong
    queue had its call handed on with its header saying zlib and its body plain: the selection
    worker could not decode it, and dropped it."""
    from tests.integration.delivery import foreign_sender

    sender = foreign_sender(pipeline)
    try:
        sent = sender.send_task("fittest.resilient_tool_call", queue="execution", compression="zlib",
                                kwargs={"scenario": "parse this csv text into rows", "input": {"text": "a,b\n1,2\n"},
                                        "namespace": "csv_strict"})
        assert sent.get(timeout=60)["status"] == "success"
    finally:
        sender.close()

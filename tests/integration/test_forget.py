"""`fittest forget`: every record of a call that holds what its caller sent is removed, on the real
stack (Celery workers on Redis, the embedded vector store owned by the memory worker), and nothing
of the other calls (QA 61a-2: no way to erase one call's data, short of editing every store by hand)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import as_published, cli_runner
from tests.integration.conftest import Pipeline
from workers.state import open_learning_state
from workers.state.evolution import EvolutionState

CSV = {"text": "name,mail\nalice,alice@example.com\n"}


@pytest.fixture
def cli(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> Any:
    return cli_runner(monkeypatch, pipeline.env)


def test_forget_removes_a_calls_records_from_every_store_and_keeps_the_others(pipeline: Pipeline, cli: Any) -> None:
    forgotten = pipeline.call(scenario="parse csv text into rows: PII-A alice@example.com", input=CSV,
                              namespace="csv_lenient", call_id="forget-me-1")
    kept = pipeline.call(scenario="parse csv text into rows: the quarterly report", input={"text": "a,b\n1,2\n"},
                         namespace="csv_lenient", call_id="keep-me-1")
    failed = pipeline.call(scenario="lunar phase for PII-C carol@example.com", input={"date": "carol"},
                           namespace="moon_a", max_attempts=1, call_id="forget-me-2")
    assert (forgotten["status"], kept["status"], failed["status"]) == ("success", "success", "failed")
    judged = cli("feedback", "add", "csv_lenient", "negative", "--call", "forget-me-1", "--reason", "alice complained")
    assert judged.exit_code == 0, judged.output
    pipeline.settled()
    learning = open_learning_state(pipeline.settings)
    recent = EvolutionState(learning.client, pipeline.settings.key_prefix)

    def shown_calls() -> set[str]:
        shown = json.loads(cli("feedback", "show", "csv_lenient", "--json").output)
        return {e["call_id"] for e in shown["entries"]}

    assert {"forget-me-1", "keep-me-1"} <= shown_calls()
    assert {"forget-me-1", "keep-me-1", "forget-me-2"} <= {r.call_id for r in learning.recent()}

    done = cli("forget", "forget-me-1", "forget-me-2", "--json")
    assert done.exit_code == 0, done.output
    report = as_published(json.loads(done.stdout), "forget_reply")
    removed = report["removed"]
    # the success's outcome and the person's judgement that replaced it; the failure's outcome
    assert removed["feedback"] >= 2 and removed["executions"] == 2 and removed["failures"] == 1, report
    assert removed["recent_successes"] == 1 and removed["learning_window"] == 2 and removed["results"] == 2, report
    assert report["again_in_s"] == 60 and report["running"] == []

    assert "forget-me-1" not in shown_calls() and "keep-me-1" in shown_calls()
    window = {r.call_id for r in learning.recent()}
    assert "forget-me-1" not in window and "forget-me-2" not in window and "keep-me-1" in window
    runs = recent.recent_successes("csv_lenient@1.0.0")
    assert [r.call_id for r in runs if r.call_id in ("forget-me-1", "keep-me-1")] == ["keep-me-1"]
    assert "PII-A" not in json.dumps([r.model_dump() for r in runs])
    gone = cli("result", "forget-me-1", "--json", "--timeout", "1")
    assert json.loads(gone.stdout)["status"] != "success", gone.output
    assert cli("result", "keep-me-1", "--json").exit_code == 0

    again = json.loads(cli("forget", "forget-me-1", "--json").stdout)  # nothing is left to remove
    assert set(again["removed"].values()) == {0}, again
    refused = cli("forget", "not a call id")
    assert refused.exit_code == 2 and "call_ids" in refused.output, refused.output


def test_a_call_still_running_is_left_alone_and_named(pipeline: Pipeline, cli: Any) -> None:
    """Its later records would land after the erasure: it is named, and the command ends with 1."""
    from workers.state.inflight import HandedOnStep, InflightCalls

    inflight = InflightCalls(open_learning_state(pipeline.settings).client, pipeline.settings.key_prefix)
    inflight.sent(HandedOnStep(task_id="running-1", task="fittest.resilient_tool_call", kwargs={"scenario": "x"}), 3600)
    inflight.flush()
    try:
        done = cli("forget", "running-1", "--json")
        assert done.exit_code == 1, done.output
        report = json.loads(done.stdout)
        assert report["running"] == ["running-1"] and report["call_ids"] == [] and report["again_in_s"] is None
    finally:
        inflight.finished("running-1")
        inflight.flush()

"""A tool that broke and was fixed gets its job back through its breaker's probe, on real workers.

QA W: a tool whose circuit breaker opened fell behind the tool that took over its job; once fixed,
no call tried it again (first on 0 of 90 calls), so its half-open breaker's probe never ran. Here a
real memory worker and executor, on the real Redis broker, Qdrant Edge and fastembed, serve a job
with two tools that do it; the first breaks (a file beside it says so), is fixed, and is probed;
the probe's success forgives the failures of its outage.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selection.manifest import tool_key
from tests.conftest import write_tool
from tests.integration.conftest import Pipeline, pipeline_running

SCENARIO = "convert 200 US dollars to Japanese yen at today's exchange rate"
TOOL = '''from pathlib import Path


def run(payload):
    if payload.get("refuse"):
        raise KeyError("amount")  # a refused input: bad_input, which says nothing of the tool
    if (Path(__file__).parent / "broken").exists():
        raise RuntimeError("the rates service answers 503")
    return {"yen": 29000}
'''
DESCRIPTIONS = {
    "rates_a": "Converts an amount of money from one currency to another at today's exchange rate.",
    "rates_b": "Looks up exchange rates between world currencies.",
}


@pytest.fixture(scope="module")
def probe_pipeline(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    tools = tmp_path_factory.mktemp("probe-tools")
    for name, description in DESCRIPTIONS.items():
        write_tool(tools, name, TOOL, description=description)
    with pipeline_running(tmp_path_factory.mktemp("probe"), redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_EVOLUTION_ENABLED="false", FITTEST_BREAKER_THRESHOLD="1", FITTEST_BREAKER_COOLDOWN_S="4",
                          # the defaults (30 s and 60 s) scaled down: the evidence a cool-down's end
                          # meets is at most a TTL old
                          FITTEST_SELECTION_CACHE_TTL_S="1") as p:
        yield p


def ranking(p: Pipeline) -> list[str]:
    return [r["key"] for r in p.client.wait(p.client.send("explain", scenario=SCENARIO), 30)["ranking"]]


def first_tool(result: dict[str, Any]) -> str:
    return tool_key(result['attempts'][0]['tool'], result['attempts'][0]['version'])


def test_a_fixed_tool_behind_the_one_that_took_over_its_job_is_probed_first_and_served_again(probe_pipeline: Pipeline) -> None:
    p = probe_pipeline
    broken = Path(p.settings.tools_dir) / "rates_a" / "broken"
    a, b = "rates_a@1.0.0", "rates_b@1.0.0"
    assert ranking(p)[:2] == [a, b]
    for _ in range(6):  # the first tool serves the job
        result = p.call(scenario=SCENARIO)
        assert result["status"] == "success" and first_tool(result) == a, result

    broken.touch()  # then it breaks: its breaker opens at its first crash, and the other tool serves the job
    for _ in range(12):
        assert p.call(scenario=SCENARIO)["status"] == "success"
    assert p.state().stats_and_breakers([a])[1][a] in ("open", "half_open")
    p.settled()
    p.wait_for(lambda: ranking(p)[0] == b, timeout=30)  # the other tool's successes put it first

    # Still broken at its probe: the probe fails and uses up none of the call's attempts (QA X:
    # with one attempt allowed, the call failed where the other tool would have served it).
    p.wait_for(lambda: p.state().stats_and_breakers([a])[1][a] == "half_open", timeout=10)
    refused = p.call(scenario=SCENARIO, input={"refuse": True})  # a probe that says nothing of the tool...
    assert refused["attempts"][0]["tool"] == "rates_a" and refused["attempts"][0]["error_class"] == "bad_input"
    assert p.state().stats_and_breakers([a])[1][a] == "half_open"  # ...leaves it half-open, for the next call to probe
    failed_probe = p.call(scenario=SCENARIO, max_attempts=1)
    assert failed_probe["status"] == "success", failed_probe
    assert [(x["tool"], x["outcome"], x["probe"]) for x in failed_probe["attempts"]] == [
        ("rates_a", "failure", True), ("rates_b", "success", False)]  # the result says which was the probe
    assert p.state().stats_and_breakers([a])[1][a] == "open"

    broken.unlink()  # fixed; once its cool-down is over, the next call probes it first
    p.wait_for(lambda: p.state().stats_and_breakers([a])[1][a] == "half_open", timeout=10)
    probe = p.call(scenario=SCENARIO)
    assert probe["status"] == "success" and first_tool(probe) == a, probe["attempts"]
    assert len(probe["attempts"]) == 1
    assert p.state().stats_and_breakers([a])[1][a] == "closed"
    # The probe's success forgives the failures of its outage (workers/outage.py): they, and the
    # negative feedback their calls gave it, no longer count against it for this job.
    p.settled()
    explained = p.client.wait(p.client.send("explain", scenario=SCENARIO), 30)["ranking"]
    mine = next(r["breakdown"] for r in explained if r["key"] == a)
    assert mine["extra"]["failures_nearby"] == 0, mine
    report = p.client.wait(p.client.send("feedback_report", queue="feedback", tool="rates_a", per="hour"), 30)
    assert report["forgiven"] >= 2, report  # the crash that opened its breaker, and the failed probe
    assert report["per"] == "hour" and report["trend"][-1]["start"] % 3600 == 0, report  # the trend a first day wants
    # The other one served the job more often meanwhile (13 calls to 7 in the run I looked at), but
    # it matches the job weakly and never did it confirmed: the job's clear best match, which does
    # it, goes first again (QA recheck N11: such a tool's unconfirmed successes kept a job from the
    # tools that clearly did it).
    theirs = next(r["breakdown"] for r in explained if r["key"] == b)
    assert theirs["extra"]["successes_nearby"] > mine["extra"]["successes_nearby"] and explained[0]["key"] == a, explained
    assert "the job's clear best match, which does it here" in explained[0]["breakdown"]["rationale"]

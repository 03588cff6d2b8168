"""Selection that learns, on real stores without Celery: the workers' Selector and outcome code on the
private Redis, Qdrant Edge in a temporary directory and fastembed with the shipped model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from selection.manifest import ToolManifest
from selection.models import CallPlan, CallRequest, Candidate, FailureClass, FailureMark, OutcomeRecord, ToolExecutionResult
from selection.ports import TOOLS as TOOLS_COLLECTION
from selection.ports import FAILURES, FEEDBACK, ClassifierFit, Match, SelectionWeights, VectorFilter, VectorPoint
from tests.integration.conftest import runtime_in_use
from workers.feedback_store import feedback_report

TOOLS = {
    "currency_rates": "Current exchange rates between world currencies, and conversions of amounts.",
    "stock_quotes": "Live stock prices, market data and company financials for ticker symbols.",
    "weather_now": "Current weather conditions and the forecast for a city.",
    "py_linter": "Checks source code for style problems and bugs.",
    "doc_writer": "Writes documentation for source code.",
}
SPARC = {"py_linter": {"languages": ["python"], "task_types": ["analysis", "bug_fix"], "phases": ["refinement"]},
         "doc_writer": {"languages": ["java"], "task_types": ["documentation"], "phases": ["completion"]}}


@pytest.fixture
def rt(tmp_path: Path, redis_url: str, run_prefix: str, model_path: Path) -> Iterator:
    from workers.runtime import Runtime
    from workers.settings import Settings

    (tmp_path / "tools").mkdir()
    settings = Settings(redis_url=redis_url, key_prefix=f"{run_prefix}:", collection_prefix=run_prefix,
                        data_dir=tmp_path / "data", tools_dir=tmp_path / "tools", embedding_model_path=model_path)
    runtime = Runtime(settings)
    for name, description in TOOLS.items():
        runtime.registry.add(ToolManifest(name=name, description=description, sparc=SPARC.get(name),
                                          implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    # The selector, which syncs the tool index, drawing among near-ties the same way at each run (a
    # count of 16 or more of 20 drawn fell to 15 once).
    runtime.selector.rng.seed(0)
    with runtime_in_use(runtime):
        yield runtime


def fit_of(retrained: Any) -> ClassifierFit:
    """The classifier's refit in a retrain's evidence (a RetrainResult's, or weights')."""
    assert retrained.evidence.classifier is not None, retrained.evidence
    return retrained.evidence.classifier


def run_call(rt, scenario: str, right: str, call_id: str) -> list[str]:
    """Plan a call and play its attempts until `right` is tried, recording what each teaches."""
    from workers.outcomes import apply_failure, apply_outcome, execution_records, store_executions

    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id=call_id))
    for k, c in enumerate(plan.candidates[:5]):
        ok = c.manifest.name == right
        plan.attempts.append(ToolExecutionResult(attempt_id=f"{call_id}:{k}", call_id=call_id, tool=c.manifest.name,
                                                 version=c.manifest.version, success=ok,
                                                 error_class=None if ok else FailureClass.bad_output))
        if not ok:
            apply_failure(rt, FailureMark(attempt_id=f"{call_id}:{k}", call_id=call_id, tool=c.manifest.name,
                                          version=c.manifest.version, scenario=scenario,
                                          error_class=FailureClass.bad_output))
        if ok:
            break
    outcome = OutcomeRecord.from_plan(plan)
    apply_outcome(rt, outcome)
    store_executions(rt, execution_records(outcome))
    return [a.tool for a in plan.attempts]


def serve_judged(rt, scenario: str, call_id: str, tool: str | None = None,
                 judged: Literal["positive", "negative"] | None = None, judged_tool: str | None = None,
                 unconfirmed: bool = False) -> str:
    """Plan a call whose `tool` (default: its first candidate) gives an output without an error
    (`unconfirmed`: as the executor flags a weak match's), record what it teaches, and have a
    person judge that output (`judged`; only of `judged_tool` when given); the tool that ran."""
    from workers.feedback_store import JudgedCall, record_tool_feedback
    from workers.outcomes import apply_outcome, execution_records, store_executions

    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id=call_id))
    ran = next(c for c in plan.candidates if c.manifest.name == (tool or plan.candidates[0].manifest.name))
    plan.attempts.append(ToolExecutionResult(attempt_id=f"{call_id}:0", call_id=call_id, tool=ran.manifest.name,
                                             version=ran.manifest.version, success=True, unconfirmed=unconfirmed))
    outcome = OutcomeRecord.from_plan(plan)
    apply_outcome(rt, outcome)
    store_executions(rt, execution_records(outcome))
    if judged and judged_tool in (None, ran.manifest.name):
        record_tool_feedback(rt, ran.manifest.name, ran.manifest.version, None, judged,
                             call=JudgedCall(call_id=call_id, ran=[ran.key], scenario=scenario))
    return ran.manifest.name


def test_outcomes_teach_the_next_similar_call(rt) -> None:
    scenario = "how many yen do I get for 200 dollars today"
    first = rt.selector.plan(CallRequest(scenario=scenario))
    assert first.candidates[0].manifest.name == "currency_rates" and first.candidates[0].probability > 0
    # Suppose the stock tool is what served such questions, and the currency tool failed them.
    for i, text in enumerate(["what is 200 dollars in yen", "convert 50 euros to yen", "yen for 80 dollars now"]):
        run_call(rt, text, "stock_quotes", f"c{i}")
    after = rt.selector.plan(CallRequest(scenario=scenario))
    top = after.candidates[0]
    assert top.manifest.name == "stock_quotes"
    assert top.breakdown.extra["successes_nearby"] > 0
    assert top.breakdown.feedback > 0  # outcome feedback: strong positive at quality 1.0
    currency = next(c for c in after.candidates if c.manifest.name == "currency_rates")
    assert currency.breakdown.extra["failures_nearby"] > 0 and currency.breakdown.feedback < 0
    assert currency.breakdown.quality < 1.0
    # Every attempt reached the learner's window once, with the components it was ranked with.
    records = rt.learning.recent()
    assert {r.call_id for r in records} == {"c0", "c1", "c2"}
    assert all(set(r.components) == {"phase", "language", "complexity", "task_type", "history"} for r in records)


def test_a_job_sent_again_and_again_moves_to_the_tool_that_took_over_when_its_tool_broke(rt) -> None:
    """QA W: a service sent the same words on every call; its tool broke, and another that does the
    same job served the calls as the fallback. The broken tool's old successes filled the 32
    nearest, so the fallback's counted 3 of ~50, and the broken tool stayed first on 36 of 36
    calls (its breaker off)."""
    rt.selector.index.ensure_tool(ToolManifest(name="money_convert", description="Converts an amount of money from one currency to another at today's exchange rate.",
                                         implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    scenario = "how many yen do I get for 200 dollars today"
    assert {"currency_rates", "money_convert"} <= {c.manifest.name for c in rt.selector.plan(CallRequest(scenario=scenario)).candidates}
    for i in range(40):  # the currency tool serves this job
        run_call(rt, scenario, "currency_rates", f"before{i}")
    firsts = [run_call(rt, scenario, "money_convert", f"after{i}")[0] for i in range(40)]  # then only the other one does
    # ~18 failing calls, then the other tool, with a draw of the broken one now and then (a near-tie
    # explored); before, the broken one on 40 of 40
    assert firsts[-20:].count("money_convert") >= 16, " ".join(f[0] for f in firsts)
    plan = rt.selector.plan(CallRequest(scenario=scenario))
    taken_over = next(c for c in plan.candidates if c.manifest.name == "money_convert")
    assert taken_over.breakdown is not None and taken_over.breakdown.extra["successes_nearby"] >= 10  # 3 of ~50 before


def test_a_tool_whose_breaker_opened_is_probed_first_once_its_cool_down_is_over(rt, monkeypatch) -> None:
    """QA W: a tool that broke and was fixed had fallen behind the tool that took over its job;
    no call came to run it, so its half-open breaker's probe never ran (first on 0 of 90 calls)."""
    rt.selector.index.ensure_tool(ToolManifest(name="money_convert", description="Converts an amount of money from one currency to another at today's exchange rate.",
                                         implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    scenario = "how many yen do I get for 200 dollars today"
    for i in range(40):  # the currency tool serves this job...
        run_call(rt, scenario, "currency_rates", f"before{i}")
    for i in range(30):  # ...then breaks, and the other one serves it
        run_call(rt, scenario, "money_convert", f"after{i}")
    key, other = "currency_rates@1.0.0", "stock_quotes@1.0.0"
    for k in (key, other):  # five failures in a row open their breakers for 1 s
        for _ in range(5):
            rt.state.record_run(k, 10.0, False, threshold=5, cooldown_s=1.0)
    held = rt.selector.plan(CallRequest(scenario=scenario))
    assert key in held.held_back and key not in [c.key for c in held.candidates]
    named = rt.selector.plan(CallRequest(scenario=scenario, namespace="currency_rates"))  # the caller is told (QA evolution L3)
    assert named.candidates and named.notes == [
        "currency_rates@1.0.0 held back by its circuit breaker: the call was ranked by its scenario alone"]

    time.sleep(1.1)
    assert rt.state.stats_and_breakers([key])[1][key] == "half_open"
    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)  # every tool a candidate, the stock tool too
    probe = rt.selector.plan(CallRequest(scenario=scenario))
    first = probe.candidates[0]
    assert first.key == key and first.probability == 1.0, [(c.key, c.probability) for c in probe.candidates]
    assert first.breakdown is not None and first.breakdown.extra["breaker_probe"] == 1.0
    # The stock tool's breaker is half-open too, but it never did this job: it keeps its place.
    assert other in [c.key for c in probe.candidates[1:]]  # ranked, and not moved first
    # A call naming a tool nobody has is ranked as one naming none, the probe first (review 50).
    typo = rt.selector.plan(CallRequest(scenario=scenario, namespace="currency_ratez"))
    assert typo.named_unknown and typo.candidates[0].key == key, [c.key for c in typo.candidates]

    rt.state.record_run(key, 10.0, True, threshold=5, cooldown_s=1.0)  # the probe's success closes the breaker
    after = rt.selector.plan(CallRequest(scenario=scenario))
    assert after.candidates[0].manifest.name == "money_convert"  # ranked by its outcomes again, as without the probe
    assert not any(c.breakdown is not None and "breaker_probe" in c.breakdown.extra for c in after.candidates)


def test_a_tool_that_recovers_from_an_outage_gets_back_the_job_it_did_most(rt) -> None:
    """QA X: a tool that broke, and was fixed, stayed behind the tool that took its job over, on 20
    of 20 calls: its failures during the outage counted against it for good. The success that closes
    its breaker (its probe) forgives them, for that job."""
    from workers.evolution_jobs import build_job
    from workers.outage import forgive_outage
    from workers.outcomes import apply_failure, apply_outcome, execution_records, store_executions
    from selection.recommend import recommendation_report
    from workers.tasks.learning import window_as_known

    rt.selector.index.ensure_tool(ToolManifest(name="money_convert", description="Converts an amount of money from one currency to another at today's exchange rate.",
                                         implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    scenario, key = "how many yen do I get for 200 dollars today", "currency_rates@1.0.0"
    vector = rt.embedder.embed_one(scenario)

    def firsts(tag: str) -> list[str]:
        return [rt.selector.plan(CallRequest(scenario=scenario, call_id=f"{tag}{i}")).candidates[0].manifest.name for i in range(20)]

    for i in range(40):  # the currency tool serves this job...
        run_call(rt, scenario, "currency_rates", f"before{i}")
    served = rt.state.stats([key])[key]
    for i in range(30):  # ...then is down, and the other one takes the job over
        run_call(rt, scenario, "money_convert", f"after{i}")
    assert rt.state.stats([key])[key].failures > served.failures
    assert firsts("down").count("money_convert") >= 16  # (a near-tie drawn now and then)
    assert build_job(rt, "manual", namespace="currency_rates").evidence.failures  # what an evolution would fix
    for _ in range(5):  # its failures opened its breaker
        rt.state.record_run(key, 10.0, False, threshold=5, cooldown_s=0.2)
    time.sleep(0.3)
    assert rt.state.record_run(key, 10.0, True, threshold=5, cooldown_s=0.2) == "recovered"  # its probe succeeded
    probe = ToolExecutionResult(attempt_id="probe:0", call_id="probe", tool="currency_rates", version="1.0.0",
                                success=True, metadata={"breaker": "recovered"})
    assert feedback_report(rt, "currency_rates").forgiven == 0
    apply_outcome(rt, OutcomeRecord(call_id="probe", scenario=scenario, attempts=[probe]))
    # Its failures and their negative feedback no longer count; it did this job more than the other.
    back = firsts("back")
    assert back.count("currency_rates") >= 18, back
    plan = rt.selector.plan(CallRequest(scenario=scenario))
    currency = next(c for c in plan.candidates if c.key == key)
    assert currency.breakdown is not None and currency.breakdown.extra["failures_nearby"] == 0
    assert feedback_report(rt, "currency_rates").forgiven > 0  # kept, and counted apart
    # What its failures cost is given back (QA 56a M3: kept at 0.21, its successes after gave no feedback).
    recovered = rt.state.stats([key])[key]
    assert (recovered.quality, recovered.failures) == (served.quality, served.failures), (served, recovered)
    # `fittest recommend` and the weights leave its outage's runs out (QA 56a M3: they counted them).
    outage = [r for r in rt.learning.recent() if r.key == key and not r.success]
    report = recommendation_report(window_as_known(rt), min_runs=5, max_rate=0.5, judgements_applied=True)
    assert outage and report.set_aside == len(outage), (len(outage), report)
    # Nor are they inputs for an evolution to fix: the tool works on them again.
    assert build_job(rt, "manual", namespace="currency_rates").evidence.failures == []
    # A version that never did the job has nothing forgiven: its failures there may be its own.
    assert forgive_outage(rt, "weather_now@1.0.0", vector, time.time(), "probe2") == 0
    # Nor has a flaky one, which failed between its successes (QA AB: with the breaker's threshold at
    # 2, each pair of failures of a tool failing two runs in three was forgiven at the next success).
    for i, ok in enumerate([True, True, False, True, False, False]):
        ran = ToolExecutionResult(attempt_id=f"flaky{i}:0", call_id=f"flaky{i}", tool="stock_quotes", version="1.0.0",
                                  success=ok, error_class=None if ok else FailureClass.bad_output)
        if not ok:
            apply_failure(rt, FailureMark(attempt_id=ran.attempt_id, call_id=ran.call_id, tool="stock_quotes",
                                          version="1.0.0", scenario=scenario, error_class=FailureClass.bad_output))
        done = OutcomeRecord(call_id=ran.call_id, scenario=scenario, attempts=[ran])
        apply_outcome(rt, done)
        store_executions(rt, execution_records(done))
    assert forgive_outage(rt, "stock_quotes@1.0.0", vector, time.time(), "flaky-probe") == 0


def test_a_failure_mark_delivered_again_keeps_its_cost_and_its_forgiveness(rt) -> None:
    """QA 59b F2: a mark delivered again (its worker killed before the ack) rewrote its failure's
    point from the mark: after the outage's recovery it was no longer forgiven, and counted again near
    the job; before it, its cost was lost, so the recovery left the quality 0.1 short for good."""
    from selection.learner import ExecutionRecord
    from workers.outage import forgive_outage, outages_forgiven
    from workers.outcomes import apply_failure, store_executions

    scenario, key = "convert 200 US dollars to Japanese yen at today's exchange rate", "currency_rates@1.0.0"
    vector, now = rt.embedder.embed_one(scenario), time.time()
    store_executions(rt, [ExecutionRecord(attempt_id=f"ok{i}:0", call_id=f"ok{i}", tool="currency_rates", version="1.0.0",
                                          scenario=scenario, success=True, timestamp=now - 100 + i) for i in range(3)])
    marks = [FailureMark(attempt_id=f"down{i}:0", call_id=f"down{i}", tool="currency_rates", version="1.0.0",
                         scenario=scenario, error_class=FailureClass.crash, error_message="503", timestamp=now - 50 + i)
             for i in range(3)]
    before = rt.state.stats([key])[key].quality
    assert [apply_failure(rt, mark, vector).applied for mark in marks] == [True, True, True]
    assert not apply_failure(rt, marks[2].model_copy(), vector).applied  # delivered again during the outage
    assert forgive_outage(rt, key, vector, now, "probe") == 3
    assert not apply_failure(rt, marks[0].model_copy(), vector).applied  # and once more after the recovery

    points = rt.memory.scroll(FAILURES, filter=VectorFilter(must=[Match(key="tool", any_of=[key])]), limit=10)
    assert sorted((p.id, p.payload.get("forgiven"), p.payload.get("cost_bp") is not None) for p in points) == [
        ("down0:0", True, True), ("down1:0", True, True), ("down2:0", True, True)]
    assert rt.state.stats([key])[key].quality == before  # every failure's cost given back
    window = [ExecutionRecord(attempt_id=m.attempt_id, call_id=m.call_id, tool="currency_rates", version="1.0.0",
                              scenario=scenario, success=False, timestamp=m.timestamp) for m in marks]
    assert sorted(call for _, call in outages_forgiven(rt, window)) == ["down0", "down1", "down2"]

    stopped = FailureMark(attempt_id="cut:0", call_id="cut", tool="currency_rates", version="1.0.0", scenario=scenario,
                          error_class=FailureClass.crash, timestamp=now - 10)
    rt.state.mark_failure(key, "cut:0", stopped.effective_severity(), stopped.counts_as())  # stopped before its point
    assert not apply_failure(rt, stopped, vector).applied
    assert [p.id for p in rt.memory.scroll(FAILURES, filter=VectorFilter.where(call_id="cut"), limit=5)] == ["cut:0"]


def test_a_failure_mark_delivered_again_finds_its_point_when_the_store_rounded_its_time_down(rt) -> None:
    """CI, stop 60: Qdrant Edge read this time back as 1796135821.41424, one unit in the last place
    below it, so the redelivery's look for its point (from the mark's own time on) missed it and
    rewrote it without its cost and its forgiveness."""
    from workers.outcomes import apply_failure

    mark = FailureMark(attempt_id="down:0", call_id="down", tool="currency_rates", version="1.0.0",
                       scenario="convert 200 US dollars to yen", error_class=FailureClass.crash, timestamp=1796135821.4142401)
    assert apply_failure(rt, mark).applied
    [stored] = rt.memory.scroll(FAILURES, filter=VectorFilter.where(call_id="down"), limit=5)
    assert stored.payload["timestamp"] != mark.timestamp  # what the store does, and this test is about
    rt.memory.upsert(FAILURES, [stored.model_copy(update={"payload": {**stored.payload, "forgiven": True}})])

    assert not apply_failure(rt, mark.model_copy()).applied
    [kept] = rt.memory.scroll(FAILURES, filter=VectorFilter.where(call_id="down"), limit=5)
    assert kept.payload.get("forgiven") is True and kept.payload.get("cost_bp") == stored.payload["cost_bp"]


def test_a_recovery_on_a_small_input_does_not_forgive_timeouts_on_large_ones(rt) -> None:
    """QA ops: a sort timed out on 30,000 numbers five times, which its manifest says it does; one
    probe on 3 numbers "recovered" it, and the five timeouts and their negative feedback stopped
    counting near the job, as if the tool had been down."""
    from workers.outcomes import apply_failure, apply_outcome

    scenario, key = "how many yen do I get for 200 dollars today", "currency_rates@1.0.0"
    for i in range(5):  # it does the job
        run_call(rt, scenario, "currency_rates", f"ok{i}")
    failed = {"big0": (FailureClass.timeout, 0.8), "big1": (FailureClass.timeout, 0.8),
              "small": (FailureClass.timeout, 0.15), "crash": (FailureClass.crash, 0.8)}
    for call, (error, complexity) in failed.items():
        attempt = ToolExecutionResult(attempt_id=f"{call}:0", call_id=call, tool="currency_rates", version="1.0.0",
                                      success=False, error_class=error)
        apply_failure(rt, FailureMark(attempt_id=attempt.attempt_id, call_id=call, tool="currency_rates", version="1.0.0",
                                      scenario=scenario, error_class=error, features={"complexity": complexity}))
        apply_outcome(rt, OutcomeRecord(call_id=call, scenario=scenario, attempts=[attempt],
                                        features={"complexity": complexity}))
    probe = ToolExecutionResult(attempt_id="probe:0", call_id="probe", tool="currency_rates", version="1.0.0",
                                success=True, metadata={"breaker": "recovered"})
    apply_outcome(rt, OutcomeRecord(call_id="probe", scenario=scenario, attempts=[probe], features={"complexity": 0.1}))

    of_tool = VectorFilter(must=[Match(key="tool", any_of=[key])])
    forgiven = {p.payload["call_id"]: bool(p.payload.get("forgiven")) for p in rt.memory.scroll(FAILURES, filter=of_tool, limit=50)}
    assert forgiven == {"big0": False, "big1": False, "small": True, "crash": True}
    negative = {p.payload["call_id"]: bool(p.payload.get("forgiven")) for p in rt.memory.scroll(FEEDBACK, filter=of_tool, limit=50)
                if p.payload["call_id"] in failed}
    assert negative == forgiven

    # QA 59b S4: an outcome delivered again after the recovery (its worker killed before the ack)
    # rewrote its entry unflagged, and the outage counted against the version again.
    small = ToolExecutionResult(attempt_id="small:0", call_id="small", tool="currency_rates", version="1.0.0",
                                success=False, error_class=FailureClass.timeout)
    apply_outcome(rt, OutcomeRecord(call_id="small", scenario=scenario, attempts=[small], features={"complexity": 0.15}))
    again = [p.payload.get("forgiven") for p in rt.memory.scroll(FEEDBACK, filter=VectorFilter.where(call_id="small"), limit=5)]
    assert again == [True]


def test_refused_inputs_of_a_job_its_tool_does_neither_count_against_it_nor_go_to_a_tool_that_does_not_do_it(rt) -> None:
    """QA AD: a caller left a key out of a job hash_text had served 10 times; hash_text refused the
    input (bad_input), a lowercasing tool 0.37 similar took it without an error, and every later
    call of the job, with the right input, went to the lowercasing tool. QA AE: after one such call
    the job stayed, after four it went; and the refusals took hash_text's quality to 0.43."""
    from selection.job_record import does_such_jobs
    from workers.outcomes import apply_failure, apply_outcome, execution_records, store_executions

    def call(call_id: str, scenario: str, attempts: list[tuple[str, bool]]) -> CallPlan:
        """A call planned by selection whose attempts ran `attempts` (tool, succeeded), applied as
        the workers apply them; a tool the plan did not rank is taken as one that does not do the job."""
        plan = rt.selector.plan(CallRequest(scenario=scenario, call_id=call_id))
        ranked = {c.manifest.name: c for c in plan.candidates}
        error = FailureClass.bad_input
        ran = [ToolExecutionResult(attempt_id=f"{call_id}:{k}", call_id=call_id, tool=tool, version="1.0.0", success=ok,
                                   error_class=None if ok else error,
                                   callers_mistake=not ok and tool in ranked and ranked[tool].callers_mistake(error))
               for k, (tool, ok) in enumerate(attempts)]
        for a in ran:
            if not a.success:
                apply_failure(rt, FailureMark(attempt_id=a.attempt_id, call_id=call_id, tool=a.tool, version="1.0.0",
                                              scenario=scenario, error_class=error, callers_mistake=a.callers_mistake))
        done = OutcomeRecord(call_id=call_id, scenario=scenario, attempts=ran)
        apply_outcome(rt, done)
        store_executions(rt, execution_records(done))
        return plan

    scenario = "how many yen do I get for 200 dollars today"
    for i in range(10):  # the currency tool does this job
        plan = call(f"ok{i}", f"how many yen do I get for {100 + i} dollars today", [("currency_rates", True)])
        # A success or two may be a fallback's luck: from the third on the version does the job.
        assert next(c.does_the_job for c in plan.candidates if c.manifest.name == "currency_rates") is (i >= 3)
    for i in range(4):  # a key left out, again and again
        plan = call(f"mistake{i}", scenario, [("currency_rates", False)])
        # The stock tool, which would take the input without an error, is not tried with it (QA ops).
        assert not any(does_such_jobs(c) for c in plan.candidates if c.manifest.name == "stock_quotes")
    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id="next"))
    assert plan.candidates[0].manifest.name == "currency_rates"
    by_name = {c.manifest.name: c.breakdown for c in plan.candidates if c.breakdown is not None}
    assert by_name["currency_rates"].extra["failures_nearby"] == 0
    assert feedback_report(rt, "currency_rates").forgiven == 4
    counted = rt.state.stats(["currency_rates@1.0.0"])["currency_rates@1.0.0"]
    assert (counted.refused_inputs, counted.failures, counted.quality) == (4, 0, 1.0)  # counted apart, not demoted
    # A tool that did not do the job has its refusals counted: they say it is not for such jobs.
    call("wrong_tool", scenario, [("stock_quotes", False), ("currency_rates", True)])
    stock = [p.payload for p in rt.memory.scroll(FAILURES, filter=VectorFilter.where(tool="stock_quotes@1.0.0"))]
    assert len(stock) == 1 and "forgiven" not in stock[0]
    assert rt.state.stats(["stock_quotes@1.0.0"])["stock_quotes@1.0.0"].quality < 1.0
    # A version that refuses REFUSED_IN_A_ROW inputs since its last success may be broken rather than
    # every caller wrong: its next refusal counts, and demotes it (an evolution may then fix it).
    for i in range(6):
        call(f"again{i}", scenario, [("currency_rates", False)])
    counted = rt.state.stats(["currency_rates@1.0.0"])["currency_rates@1.0.0"]
    assert (counted.refused_inputs, counted.failures) == (9, 1) and counted.quality < 1.0
    mistakes = [p.payload for p in rt.memory.scroll(FAILURES, filter=VectorFilter.where(tool="currency_rates@1.0.0"))]
    assert sorted(bool(p.get("forgiven")) for p in mistakes) == [False] + [True] * 9


def test_a_version_does_the_job_however_many_nearer_successes_of_another_tool_there_are(rt) -> None:
    """Whether a version does the job (its refusal then the caller's mistake) was read from the plan's
    32 nearest successes: where another tool's successes, nearer the scenario, filled them, the
    version's own three went unseen and its refusal of a bad input counted against it (session 36's
    note: crowding untested)."""
    rt.selector.index.ensure_tool(ToolManifest(name="money_convert", description="Converts an amount of money from one currency to another at today's exchange rate.",
                                               implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    scenario = "how many yen do I get for 200 dollars today"
    for i in range(3):  # 0.955 similar to the scenario
        serve_judged(rt, "how many yen do I get for 200 dollars tomorrow", f"ok{i}", "currency_rates")
    for i in range(40):  # 0.98 similar: nearer, and enough to fill the 32 places
        serve_judged(rt, "how many yen would I get for 200 dollars today", f"crowd{i}", "money_convert")
    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id="next"))
    currency = next(c for c in plan.candidates if c.manifest.name == "currency_rates")
    assert currency.does_the_job and currency.callers_mistake(FailureClass.bad_input)
    assert currency.breakdown is not None and currency.breakdown.extra["successes_nearby"] > 0


def test_a_job_whose_tool_is_held_back_wears_down_no_fallback_that_refuses_its_input(rt, monkeypatch) -> None:
    """QA new user: with the Fibonacci tool's breaker open, ~20 calls of its job each went to the
    other tools, which refused {"n": 30}: word_stats fell from 1.00 to 0.21, and sort_numbers, the
    first to run, was evolved to take that input (and then served the job with a wrong answer)."""
    from selection.call_endings import targeted
    from selection.recommend import recommendation_report
    from workers.outcomes import apply_failure, execution_records, store_executions
    from workers.tasks.execution import outcome_record

    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)  # every tool a fallback, as a small catalog's are
    rt.selector.index.ensure_tool(ToolManifest(name="fibonacci", description="Computes the n-th Fibonacci number.",
                                               implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    for _ in range(5):
        rt.state.record_run("fibonacci@1.0.0", 10.0, False, threshold=5, cooldown_s=600)  # it crashed: held back
    scenario, tried, set_aside = "the 10th fibonacci number", set(), 0
    for i in range(6):
        plan = rt.selector.plan(CallRequest(scenario=scenario, input={"n": 10}, call_id=f"fib{i}"))
        assert plan.held_back == ["fibonacci@1.0.0"] and plan.held_back_match > 0.5
        for k, c in enumerate(plan.candidates[:3]):
            ran = ToolExecutionResult(attempt_id=f"fib{i}:{k}", call_id=f"fib{i}", tool=c.manifest.name, version="1.0.0",
                                      success=False, error_class=FailureClass.bad_input)
            plan.attempts.append(ran)
            tried.add(c.key)
            mark = FailureMark(attempt_id=ran.attempt_id, call_id=ran.call_id, tool=ran.tool, version="1.0.0",
                               scenario=scenario, error_class=FailureClass.bad_input, input={"n": 10},
                               targeted=targeted(plan, ran))
            assert not mark.targeted  # not a job meant for it: no evolution of it starts from this
            apply_failure(rt, mark)
        records = execution_records(outcome_record(plan))
        set_aside += len(records)
        store_executions(rt, records)
    stats = rt.state.stats(sorted(tried))
    assert stats and all(s.quality == 1.0 and s.failures == 0 and s.refused_inputs > 0 for s in stats.values()), stats
    # `fittest recommend` leaves them out as `tools` counts them apart (QA 56a M2: "bad_input" failures there).
    report = recommendation_report(rt.learning.recent(), min_runs=1, max_rate=0.99, judgements_applied=False)
    assert report.set_aside == set_aside and not [r for r in report.recommendations if r.tool in tried], report
    # Remembered near the job, though, where they rank the tools that refused it down.
    plan = rt.selector.plan(CallRequest(scenario=scenario, input={"n": 10}, call_id="next"))
    assert {c.key for c in plan.candidates if c.breakdown.similar_failures > 0} == tried


def test_a_weak_matchs_successes_do_not_make_it_a_tool_that_does_the_job_until_a_person_says_so(rt, monkeypatch) -> None:
    """QA evolution: a word counter, 0.43 similar, answered vowel-count calls with word counts, and
    after three such successes "did the job": its refusals were the callers' mistakes, and a crash
    of it there would have been evolved for vowel counting."""
    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)  # every tool a candidate, the stock tool too
    scenario = "how many yen do I get for 200 dollars today"
    for i in range(3):  # unconfirmed: it matched weakly, with no record (as the executor flags it)
        serve_judged(rt, scenario, f"weak{i}", "stock_quotes", unconfirmed=True)
    rt.selector.cache.clear()  # as FITTEST_SELECTION_CACHE_TTL_S would: the same words were ranked before
    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id="next"))
    stock = next(c for c in plan.candidates if c.manifest.name == "stock_quotes")
    assert stock.breakdown.extra["successes_nearby"] > 0 and not stock.does_the_job  # ranked by them, not a doer
    for i in range(3):  # a person says its outputs were right
        serve_judged(rt, scenario, f"judged{i}", "stock_quotes", judged="positive", unconfirmed=True)
    rt.selector.cache.clear()
    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id="after"))
    assert next(c for c in plan.candidates if c.manifest.name == "stock_quotes").does_the_job


def test_a_success_a_person_judged_right_counts_once_toward_doing_the_job(rt, monkeypatch) -> None:
    """A confirmed success that a person also judged right is one call that did the job: two such
    calls counted four toward the three that make a version one that does it."""
    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)  # the stock tool a candidate, as above
    scenario = "how many yen do I get for 200 dollars today"

    def stock() -> Candidate:
        rt.selector.cache.clear()  # as FITTEST_SELECTION_CACHE_TTL_S would: the same words were ranked before
        return next(c for c in rt.selector.plan(CallRequest(scenario=scenario)).candidates
                    if c.manifest.name == "stock_quotes")

    for i in range(2):
        serve_judged(rt, scenario, f"right{i}", "stock_quotes", judged="positive")
    assert not stock().does_the_job
    serve_judged(rt, scenario, "right2", "stock_quotes", judged="positive")
    assert stock().does_the_job


def test_a_tool_whose_outputs_people_keep_judging_wrong_gives_way_to_another_that_does_the_job(rt) -> None:
    """QA W: a tool's outputs turned wrong after it had served a job well; 31 of them judged wrong
    (`fittest feedback add ... --call`) and it stayed first on every call, since it ran without an
    error, so no call fell back to the other tool that does the job, which never ran."""
    def served(call_id: str, judged: Literal["positive", "negative"] | None = None) -> str:
        """One call served by its first candidate, judged (`judged`) if that is the money tool."""
        return serve_judged(rt, scenario, call_id, judged=judged, judged_tool="money_convert")

    rt.selector.index.ensure_tool(ToolManifest(name="money_convert", description="Converts an amount of money from one currency to another at today's exchange rate.",
                                         implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    scenario = "how many yen do I get for 200 dollars today"
    # The money tool, whose words match the job best, serves it well...
    before = [served(f"before{i}") for i in range(30)]
    assert before.count("money_convert") >= 28, before
    # ...then its outputs go wrong, and a person says so of each one.
    firsts = [served(f"after{i}", judged="negative") for i in range(80)]
    # Tried in its place on a share of the calls once two outputs were judged wrong, the currency
    # tool takes the job over; before, the money tool was first on every call.
    assert firsts[:2] == ["money_convert"] * 2, firsts
    assert firsts[-20:].count("currency_rates") >= 16, " ".join(f[0] for f in firsts)
    plan = rt.selector.plan(CallRequest(scenario=scenario))
    judged = next(c for c in plan.candidates if c.manifest.name == "money_convert")
    assert judged.breakdown is not None and judged.breakdown.extra["failures_nearby"] > 1  # its wrong outputs count as failures
    stats = rt.state.stats(["money_convert@1.0.0"])["money_convert@1.0.0"]  # as `fittest tools` shows them
    assert (stats.successes, stats.failures) == (before.count("money_convert"), firsts.count("money_convert"))


def test_peoples_judgements_count_however_many_outcomes_a_job_sent_again_and_again_has(rt, monkeypatch) -> None:
    """QA X: selection read the 64 feedback entries nearest the scenario; on a job sent again and
    again they were its outcomes, in no order of time, and ten positive judgements left a score at
    -29.6, while further negative ones no longer moved it. QA Y: the same past ~64 judgements."""
    scenario, key = "how many yen do I get for 200 dollars today", "currency_rates@1.0.0"
    vector = rt.embedder.embed_one(scenario)
    # A second tool for the job, to be asked a second opinion once people judge the first one wrong
    rt.selector.index.ensure_tool(ToolManifest(name="money_convert", description="Converts an amount of money from one currency to another at today's exchange rate.",
                                               implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))

    def served(call_id: str, judged: Literal["positive", "negative"] | None = None) -> float:
        """One call the currency tool serves, judged if `judged`; its feedback score after it."""
        serve_judged(rt, scenario, call_id, "currency_rates", judged)
        return rt.selector.feedback_points([key], vector)[key]

    def second_opinions() -> int:
        """Of 30 calls of the job, how many try another tool first in place of the currency tool."""
        plans = [rt.selector.plan(CallRequest(scenario=scenario, call_id=f"look{i}")) for i in range(30)]
        return sum(bool(p.candidates[0].breakdown and "second_opinion" in p.candidates[0].breakdown.extra) for p in plans)

    for i in range(100):
        served(f"c{i}")
    wrong = [served(f"wrong{i}", "negative") for i in range(70)]  # QA Y: past ~64 of them, they stopped counting
    assert wrong == sorted(wrong, reverse=True) and len(set(wrong)) == 70, wrong[60:]  # each one counts
    assert second_opinions() > 0
    plan = rt.selector.plan(CallRequest(scenario=scenario))
    currency = next(c for c in plan.candidates if c.key == key)
    assert currency.breakdown is not None and currency.breakdown.extra["failures_nearby"] >= 64  # judged wrong
    right = [served(f"right{i}", "positive") for i in range(6)]  # fixed, and judged right again
    assert right == sorted(right) and len(set(right)) == 6 and right[0] > wrong[-1], right
    assert second_opinions() == 0  # the latest judgement says right


def test_context_features_and_sparc_in_the_plan(rt, monkeypatch) -> None:
    # Every tool a candidate, however weak its description's match: "Writes documentation for source
    # code." is only 0.20-0.23 similar to the scenario (by the model's precision), near the default floor.
    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)
    plan = rt.selector.plan(CallRequest(scenario="review this code for bugs",
                                        context={"files": ["app/main.py", "tests/test_main.py"]}))
    assert plan.features["languages"] == ["python"] and plan.features["phase"] == "refinement"
    by_name = {c.manifest.name: c for c in plan.candidates}
    linter, writer = by_name["py_linter"].breakdown, by_name["doc_writer"].breakdown
    assert linter.sparc_components["language"] == 1.0 and writer.sparc_components["language"] == 0.0
    assert linter.sparc > 0.5 > writer.sparc
    assert "supports python" in linter.rationale
    assert by_name["weather_now"].breakdown.sparc == 0.5  # no metadata: neutral, not zero


def test_a_tool_that_declares_none_of_the_languages_a_call_states_is_tried_after_the_others(rt) -> None:
    """QA: py_linter, `languages: [python]`, ran first for a call stating javascript (its two
    successes on the job outweigh any SPARC score), its rationale saying "no support for javascript"."""
    rt.selector.index.ensure_tool(ToolManifest(name="js_linter", description="Checks javascript programs for style problems and bugs.",
                                               sparc={"languages": ["javascript"]},
                                               implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    rt.selector.index.ensure_tool(ToolManifest(name="text_stats", description="Counts the words and lines of a text or of a program's code.",
                                               implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    for i in range(2):
        assert run_call(rt, "review this code for bugs", "py_linter", f"py{i}")[-1] == "py_linter"

    def order(context: dict[str, str]) -> list[str]:
        plan = rt.selector.plan(CallRequest(scenario="review this code for bugs", context=context))
        return [c.manifest.name for c in plan.candidates]

    assert order({})[0] == "py_linter"  # its successes: first when nothing says which language
    stated = rt.selector.plan(CallRequest(scenario="review this code for bugs", context={"language": "javascript"}))
    names = [c.manifest.name for c in stated.candidates]
    assert names[0] == "js_linter"
    # After the tools that do such jobs, not after those that do others (QA integration M1: two
    # linters went after five text tools, and neither ran in 5 attempts).
    weak = next(c for c in stated.candidates if c.manifest.name == "text_stats")
    assert weak.breakdown.similarity < 0.5 and names.index("py_linter") < names.index("text_stats"), names
    linter = next(c for c in stated.candidates if c.manifest.name == "py_linter")
    assert "it declares none of the languages the call states (javascript)" in linter.breakdown.rationale
    assert "declares none" not in weak.breakdown.rationale
    assert stated.candidates[0].probability > 0
    assert order({"language": "python"})[0] == "py_linter"


def test_cache_serves_repeats_until_the_state_changes_and_new_weights_apply(rt, monkeypatch) -> None:
    searches: list[str] = []
    real_search = rt.memory.search

    def counting(collection, *args, **kwargs):
        searches.append(collection)
        return real_search(collection, *args, **kwargs)

    monkeypatch.setattr(rt.memory, "search", counting)
    request = CallRequest(scenario="weather forecast for Oslo tomorrow")
    assert rt.selector.plan(request).evidence_age_s is None
    cold = len(searches)
    assert cold >= 3
    time.sleep(0.2)
    again = rt.selector.plan(request)
    assert len(searches) == cold  # the same scenario at the same state version: from the cache
    assert again.evidence_age_s is not None and again.evidence_age_s >= 0.2  # said, as `fittest explain` says it (QA AD)
    rt.state.set_quality("weather_now@1.0.0", 0.9)  # any state change invalidates
    rt.selector.plan(request)
    assert len(searches) == 2 * cold
    rt.state.set_weights(SelectionWeights(weights={"phase": 0, "language": 0, "complexity": 0, "task_type": 0,
                                                   "history": 1.0}))
    plan = rt.selector.plan(request)
    assert len(searches) == 3 * cold
    assert "weather_now@1.0.0" in [c.key for c in plan.candidates]
    for c in plan.candidates:  # all weight on history: the SPARC score is the history component
        assert c.breakdown.sparc == pytest.approx(c.breakdown.sparc_components["history"], abs=1e-3)


def test_promotions_are_read_again_only_when_a_promotion_changes(rt, monkeypatch) -> None:
    from selection.models import Promotion

    reads: list[list[str]] = []
    real_promotions = rt.state.promotions

    def counting(namespaces):
        reads.append(list(namespaces))
        return real_promotions(namespaces)

    monkeypatch.setattr(rt.state, "promotions", counting)
    rt.selector.plan(CallRequest(scenario="weather forecast for Oslo tomorrow"))
    assert len(reads) == 1
    rt.state.set_quality("weather_now@1.0.0", 0.9)  # the outcome of a call: quality moves, promotions do not
    rt.selector.plan(CallRequest(scenario="weather forecast for Bergen tomorrow"))
    assert len(reads) == 1
    rt.registry.add(ToolManifest(name="weather_now", version="1.1.0", description=TOOLS["weather_now"],
                                 implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    plan = rt.selector.plan(CallRequest(scenario="weather forecast for Bergen tomorrow"))
    assert "weather_now@1.1.0" not in [c.key for c in plan.candidates] and len(reads) == 1
    rt.state.promote(Promotion(namespace="weather_now", evolved_version="1.1.0", original_version="1.0.0",
                               reason="test", mutation="timeout", status="active"))
    plan = rt.selector.plan(CallRequest(scenario="weather forecast for Bergen tomorrow"))
    assert len(reads) == 2  # the promotion is seen by the very next plan
    assert "weather_now@1.1.0" in [c.key for c in plan.candidates]  # served in place of the version that matched


def test_promotions_read_before_the_state_was_lost_are_not_served_after_it(rt) -> None:
    """A Redis with nothing on disk restarts empty and counts its versions again from 0 (here: clear)."""
    from selection.models import Promotion

    for version in ("1.1.0", "1.2.0"):
        rt.registry.add(ToolManifest(name="weather_now", version=version, description=TOOLS["weather_now"],
                                     implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))

    def served() -> list[str]:
        plan = rt.selector.plan(CallRequest(scenario="weather forecast for Bergen tomorrow"))
        return [c.key for c in plan.candidates if c.manifest.name == "weather_now"]

    def promote(version: str) -> None:
        rt.state.promote(Promotion(namespace="weather_now", evolved_version=version, original_version="1.0.0",
                                   reason="test", mutation="timeout", status="active"))

    promote("1.1.0")
    assert "weather_now@1.1.0" in served()
    seen = rt.state.versions()
    rt.state.clear()
    promote("1.2.0")
    assert rt.state.versions()[:3] == seen[:3]  # the same counts as when 1.1.0 was read
    now = served()
    assert "weather_now@1.2.0" in now and "weather_now@1.1.0" not in now


def test_feedback_on_a_name_alone_judges_the_version_serving_most_calls_during_a_trial(rt) -> None:
    """QA F8: `fittest feedback add NAME` while NAME@1.1.0 was on trial (serving FITTEST_TRIAL_SHARE,
    25 %, of the calls) judged 1.1.0, not the version serving the rest; NAME@VERSION picks either."""
    from selection.models import Promotion
    from workers.feedback_store import record_tool_feedback

    rt.registry.add(ToolManifest(name="weather_now", version="1.1.0", description=TOOLS["weather_now"], parent_version="1.0.0",
                                 implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    trial = Promotion(namespace="weather_now", evolved_version="1.1.0", original_version="1.0.0", status="on_trial")
    rt.state.promote(trial)
    assert rt.settings.trial_share < 0.5
    judged = record_tool_feedback(rt, "weather_now", None, "rain forecast for Paris", "negative")
    assert judged.key == "weather_now@1.0.0"
    assert record_tool_feedback(rt, "weather_now", "1.1.0", "rain forecast for Paris", "negative").key == "weather_now@1.1.0"
    rt.state.promote(trial.model_copy(update={"status": "active"}))  # it serves every call now
    assert record_tool_feedback(rt, "weather_now", None, "rain forecast for Paris", "negative").key == "weather_now@1.1.0"


def test_feedback_score_weights_similar_scenarios_more(rt) -> None:
    from workers.feedback_store import feedback_report, feedback_score, record_tool_feedback

    record = record_tool_feedback(rt, "weather_now", None, "rain forecast for Paris this weekend", "positive",
                                  reason="accurate", quality=1.0)
    assert record.version == "1.0.0" and record.value == 1.0
    near = feedback_score(rt, "weather_now", "1.0.0", "rain forecast for Paris on Saturday")
    far = feedback_score(rt, "weather_now", "1.0.0", "stock price of a tech company")
    assert 0 <= far < near <= 50
    record_tool_feedback(rt, "weather_now", "1.0.0", "rain forecast for Paris this weekend", "negative", quality=0.5)
    report = feedback_report(rt, "weather_now")
    assert report.total == 2 and [e.value for e in report.entries] == [-0.5, 1.0]
    assert report.trend[-1].count == 2
    # QA AD: one in general was shown under the description, as if a job had been worded so
    general = record_tool_feedback(rt, "weather_now", "1.0.0", None, "positive")
    entry = feedback_report(rt, "weather_now").entries[0]
    assert general.general and entry.general and entry.scenario == TOOLS["weather_now"].strip()
    assert not feedback_report(rt, "weather_now").entries[1].general
    with pytest.raises(LookupError):
        record_tool_feedback(rt, "no_such_tool", None, None, "positive")


def test_retrain_needs_ten_records_and_stores_a_new_version(rt) -> None:
    from selection.learner import ExecutionRecord
    from workers.outcomes import store_executions
    from workers.tasks.learning import retrain_now

    def record(i: int) -> ExecutionRecord:
        phase = 1.0 if i % 2 else 0.0
        return ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="weather_now", version="1.0.0",
                               scenario=f"weather in city {i}", success=bool(i % 2),
                               # language varies, telling nothing; the others never vary (FLOOR_WEIGHT each)
                               components={"phase": phase, "language": 0.4 + 0.2 * (i // 2 % 2), "complexity": 0.5,
                                           "task_type": 0.5, "history": 0.5})

    assert store_executions(rt, [record(i) for i in range(9)]) == 9
    assert store_executions(rt, [record(0)]) == 0  # a redelivered record is not counted twice
    unchanged = retrain_now(rt)
    assert unchanged.changed is False and rt.state.weights().version == 0
    note = rt.state.last_retrain()  # what `fittest weights` says of it (QA AC: nothing was kept)
    assert note is not None and note.evidence.unchanged == "9 records, fewer than 10"
    store_executions(rt, [record(i) for i in range(9, 12)])
    changed = retrain_now(rt)
    assert changed.changed is True
    weights = rt.state.weights()
    assert weights.version == 1 and weights.weights == {"phase": 0.8, "language": 0.05, "complexity": 0.05, "task_type": 0.05,
                                                         "history": 0.05}
    assert weights.evidence.records == 12
    assert [w.version for w in rt.state.weights_history()] == [1]


def test_retrain_refits_the_tool_classifier_and_selection_ranks_by_it(rt, monkeypatch) -> None:
    """Successes teach the classifier which tool serves a kind of job (here, against the descriptions:
    conversions served by stock_quotes); the retrain stores it with the weights, and the next plan's
    breakdown carries its probabilities."""
    from selection.classifier import ToolClassifier
    from selection.learner import ExecutionRecord
    from workers.outcomes import store_executions
    from workers.tasks.learning import retrain_now

    amounts = ["100 euros", "250 dollars", "40 pounds", "3,000 yen", "75 francs", "12 euros", "90 dollars",
               "600 kronor", "15 pounds", "8,000 yen", "55 euros", "320 dollars"]
    records = [ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="stock_quotes", version="1.0.0",
                               scenario=f"convert {amount} into another currency", success=True)
               for i, amount in enumerate(amounts)]
    assert retrain_now(rt).changed is False  # nothing learned yet: no classifier
    assert rt.state.classifier() is None

    def classifier_p(plan) -> dict[str, float]:
        return {c.manifest.name: c.breakdown.extra.get("classifier_p") for c in plan.candidates}

    scenario = "convert 42 euros to swiss francs"
    assert all(p is None for p in classifier_p(rt.selector.plan(CallRequest(scenario=scenario))).values())

    store_executions(rt, records)
    answer = retrain_now(rt)
    assert answer.changed is True and answer.classifier
    weights = rt.state.weights()
    assert weights.classifier == answer.classifier and fit_of(weights).successes == 12
    assert rt.state.classifier()
    p = classifier_p(rt.selector.plan(CallRequest(scenario=scenario)))
    assert p["stock_quotes"] > p["currency_rates"]
    # Nothing new since: the classifier is not refitted (nor the weights stored again).
    again = retrain_now(rt)
    assert again.changed is False and fit_of(again).unchanged == "no success since the last refit"
    assert rt.state.weights().version == weights.version
    # A tool registered since gets its column at the next refit, and learns from its successes.
    rt.selector.index.ensure_tool(ToolManifest(name="fx_desk", description="Foreign exchange desk.",
                                      implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    desk = CallRequest(scenario="convert 42 euros at the desk rate")
    scored_by_description = classifier_p(rt.selector.plan(desk))["fx_desk"]  # no column yet
    store_executions(rt, [ExecutionRecord(attempt_id=f"fx{i}", call_id=f"fx{i}", tool="fx_desk", version="1.0.0",
                                          scenario=f"convert {amount} at the desk rate", success=True)
                          for i, amount in enumerate(amounts[:4])])
    assert retrain_now(rt).changed is True
    assert "fx_desk" in ToolClassifier.from_text(rt.state.classifier()).names
    assert classifier_p(rt.selector.plan(desk))["fx_desk"] > scored_by_description
    # Turned off (QA 58c L4): the retrain says so, and selection ranks without it; its revision stays stored.
    from workers.tool_classifier import CLASSIFIER_OFF

    monkeypatch.setattr(rt.settings, "tool_classifier", False)
    assert fit_of(retrain_now(rt)).unchanged == CLASSIFIER_OFF and rt.state.classifier()
    assert all(p is None for p in classifier_p(rt.selector.plan(desk)).values())


def test_the_tool_that_served_most_calls_is_not_the_classifiers_choice_for_the_others_jobs(rt) -> None:
    """QA selection F5: refitted on successes alone, the classifier made a string reverser that had
    served 60 calls of one job its choice (p 0.79) for sorting, hashing and word counting, above the
    tools whose descriptions say so; each tool's description is an example of its jobs in every refit."""
    import numpy as np

    from selection.classifier import ToolClassifier
    from selection.learner import ExecutionRecord
    from workers.outcomes import store_executions
    from workers.tasks.learning import retrain_now

    rt.selector.index.ensure_tool(ToolManifest(name="reverser", description="Reverses a string of text.",
                                               implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    for beat in range(4):  # a service sends the same job again and again, beat after beat
        store_executions(rt, [ExecutionRecord(attempt_id=f"r{beat}.{i}", call_id=f"r{beat}.{i}", tool="reverser",
                                              version="1.0.0", scenario="reverse this string", success=True)
                              for i in range(15)])
        assert retrain_now(rt).classifier
    # QA recheck: a weak match's unconfirmed "success" on another tool's job taught the classifier
    # that the job was the reverser's (p 0.98 for sha256 jobs, after one such call)
    store_executions(rt, [ExecutionRecord(attempt_id=f"u{i}", call_id=f"u{i}", tool="reverser", version="1.0.0",
                                          scenario="convert 42 euros to swiss francs", success=True, unconfirmed=True)
                          for i in range(3)])
    assert retrain_now(rt).classifier
    classifier = ToolClassifier.from_text(rt.state.classifier() or "")

    def chances(scenario: str) -> dict[str, float]:
        scores = classifier.predict_one(rt.embedder.embed_one(scenario))
        exps = np.exp(np.array(list(scores.values())) - max(scores.values()))
        return dict(zip(scores, (exps / exps.sum()).tolist()))

    for scenario, tool in (("convert 42 euros to swiss francs", "currency_rates"), ("live price of the AAPL ticker", "stock_quotes"),
                           ("is it going to snow in Oslo", "weather_now"), ("write docs for this class", "doc_writer")):
        p = chances(scenario)
        assert p[tool] > 0.5 and p["reverser"] < 0.1, (scenario, p)
    assert chances("reverse the letters of this word")["reverser"] > 0.5


def test_a_refit_past_the_namespace_cap_fits_the_busiest_and_keeps_the_others(rt) -> None:
    """FITTEST_CLASSIFIER_MAX_NAMESPACES bounds a refit's work: only the namespaces with the most
    successes are fitted, the others keep the columns they had (here, their descriptions')."""
    import numpy as np

    from selection.classifier import ToolClassifier
    from selection.learner import ExecutionRecord
    from workers.outcomes import store_executions
    from workers.tasks.learning import retrain_now

    rt.settings = rt.settings.model_copy(update={"classifier_max_namespaces": 2})
    served = ["stock_quotes"] * 8 + ["weather_now"] * 5 + ["currency_rates"] * 2
    store_executions(rt, [ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool=tool, version="1.0.0",
                                          scenario=f"job {i} for {tool}", success=True)
                          for i, tool in enumerate(served)])
    answer = retrain_now(rt)
    assert answer.changed is True
    fit = fit_of(rt.state.weights())
    assert (fit.successes, fit.namespaces, fit.namespaces_fitted) == (15, 5, 2)
    stored = ToolClassifier.from_text(rt.state.classifier())
    untrained = ToolClassifier.from_descriptions(
        {name: rt.embedder.embed_one(description) for name, description in TOOLS.items()})
    for name in TOOLS:
        same = np.allclose(stored.weights[:, stored.index[name]], untrained.weights[:, untrained.index[name]])
        assert same == (name not in ("stock_quotes", "weather_now")), name


def test_past_the_record_cap_a_refit_learns_from_the_newest_successes(rt) -> None:
    """Conversions were served by currency_rates long ago and by stock_quotes lately; a refit that
    may read only 12 successes reads the 12 newest, so the classifier follows what serves now."""
    from selection.learner import ExecutionRecord
    from workers.outcomes import store_executions
    from workers.tasks.learning import retrain_now

    rt.settings = rt.settings.model_copy(update={"classifier_max_records": 12})
    amounts = ["100 euros", "250 dollars", "40 pounds", "3,000 yen", "75 francs", "12 euros", "90 dollars",
               "600 kronor", "15 pounds", "8,000 yen", "55 euros", "320 dollars"]

    def served(tool: str, at: float) -> list[ExecutionRecord]:
        return [ExecutionRecord(attempt_id=f"{tool}{i}", call_id=f"{tool}{i}", tool=tool, version="1.0.0",
                                scenario=f"convert {amount} into another currency", success=True, timestamp=at + i)
                for i, amount in enumerate(amounts)]

    store_executions(rt, served("currency_rates", at=1_000.0) + served("stock_quotes", at=2_000_000_000.0))
    assert retrain_now(rt).changed is True
    fit = fit_of(rt.state.weights())
    assert fit.successes == 12 and fit.newest == 2_000_000_011.0
    plan = rt.selector.plan(CallRequest(scenario="convert 42 euros to swiss francs"))
    p = {c.manifest.name: c.breakdown.extra.get("classifier_p") for c in plan.candidates}
    assert p["stock_quotes"] > p["currency_rates"]


def test_successes_of_a_namespace_without_a_column_do_not_make_every_beat_refit(rt) -> None:
    """A namespace with no original version has no description to start a column from, so its
    successes are not fitted; with nothing else new, the next beat leaves the classifier alone."""
    from selection.learner import ExecutionRecord
    from workers.outcomes import store_executions
    from workers.tasks.learning import retrain_now

    rt.registry.add(ToolManifest(name="adopted", version="1.0.1", parent_version="1.0.0",
                                 description="An evolved version whose original is gone.",
                                 implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    records = [ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="stock_quotes", version="1.0.0",
                               scenario=f"price of ticker number {i}", success=True) for i in range(12)]
    records += [ExecutionRecord(attempt_id=f"o{i}", call_id=f"o{i}", tool="adopted", version="1.0.1",
                                scenario=f"adopted job {i}", success=True) for i in range(3)]
    store_executions(rt, records)
    first = retrain_now(rt)
    assert first.changed is True and fit_of(first).successes == 15
    again = retrain_now(rt)
    assert again.changed is False
    assert fit_of(again).unchanged == "no success since the last refit"


def test_a_beat_with_nothing_new_does_not_read_the_successes_again(rt, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle system's beat looks at how many successes there are and the newest one's time, and
    reads them with their vectors only when that moved: the next success makes it refit."""
    from selection.learner import ExecutionRecord
    from selection.ports import EXECUTIONS
    from workers.outcomes import store_executions
    from workers.tasks.learning import retrain_now

    def served(first: int, n: int) -> list[ExecutionRecord]:
        return [ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="stock_quotes", version="1.0.0",
                                scenario=f"price of ticker number {i}", success=True) for i in range(first, first + n)]

    store_executions(rt, served(0, 12))
    assert retrain_now(rt).changed is True
    scrolled: list[int] = []
    scroll = rt.memory.scroll

    def recorded_scroll(collection: str, *args: Any, **kwargs: Any) -> list[VectorPoint]:
        if collection == EXECUTIONS:  # the successes (the window's judgements are read from FEEDBACK)
            scrolled.append(kwargs.get("limit", 1000))
        return scroll(collection, *args, **kwargs)

    monkeypatch.setattr(rt.memory, "scroll", recorded_scroll)
    for _ in range(2):
        again = retrain_now(rt)
        assert again.changed is False and fit_of(again).unchanged == "no success since the last refit"
    assert scrolled and max(scrolled) == 1  # the newest success only
    store_executions(rt, served(12, 1))
    answer = retrain_now(rt)
    assert answer.changed is True and fit_of(answer).successes == 13
    assert rt.settings.classifier_max_records in scrolled


def test_a_plan_carries_the_scenarios_word_match_and_follows_new_tools(rt) -> None:
    """Each candidate's breakdown says how well the scenario's words match its texts (relative to the
    best match); a tool registered since is matched by its words from the next plan on."""
    def word_match(scenario: str) -> dict[str, float]:
        plan = rt.selector.plan(CallRequest(scenario=scenario))
        return {c.manifest.name: c.breakdown.extra["lexical"] for c in plan.candidates}

    scores = word_match("the forecast for Lisbon tomorrow")
    assert scores["weather_now"] == 1.0 and all(v == 0.0 for name, v in scores.items() if name != "weather_now")
    rt.selector.index.ensure_tool(ToolManifest(name="tide_tables", description="Tide tables and the surf forecast for a beach.",
                                      implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}))
    scores = word_match("the surf forecast for Nazare beach")
    assert scores["tide_tables"] == 1.0 and 0.0 < scores["weather_now"] < 1.0


def test_a_version_changed_in_place_is_searched_as_its_manifest_now_reads(rt, tmp_path: Path) -> None:
    """What the tools watch does when a manifest file changes: the version is searched by its new
    texts and flags. Taking `deprecated` back must bring it back to the searches, and an example
    the manifest dropped must no longer match."""
    source = tmp_path / "tools" / "tide.yaml"
    tide = ToolManifest(name="tide_tables", description="Tide tables and the surf forecast for a beach.",
                        examples=["when is low water at Nazare"], implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})

    def similarity(scenario: str) -> float | None:
        plan = rt.selector.plan(CallRequest(scenario=scenario))
        return next((c.breakdown.similarity for c in plan.candidates if c.manifest.name == "tide_tables"), None)

    rt.selector.index.ensure_tools([(tide.model_copy(update={"deprecated": True}), source)])  # indexed deprecated
    assert similarity("when is low water at Nazare") is None
    rt.selector.index.revise_tools([(tide, source)], [])  # taken back
    assert (before := similarity("when is low water at Nazare")) is not None and before > 0.99  # its example
    rt.selector.index.revise_tools([(tide.model_copy(update={"examples": []}), source)], [])
    after = similarity("when is low water at Nazare")
    assert after is None or after < 0.9  # by its description alone
    rt.selector.index.revise_tools([], ["tide_tables@1.0.0"])  # its file removed
    assert similarity("tide tables and the surf forecast for the beach") is None and "tide_tables@1.0.0" not in rt.registry
    searchable = VectorFilter(must=[Match(key="tool", any_of=["tide_tables@1.0.0"])], must_not=[Match(key="deprecated", any_of=[True])])
    assert rt.memory.count(TOOLS_COLLECTION, searchable) == 0  # its points take no search's slots
    rt.selector.index.ensure_tools([(tide, source)])  # and back again
    assert similarity("tide tables and the surf forecast for the beach") is not None
    assert rt.memory.count(TOOLS_COLLECTION, searchable) == 2  # its description and its example


def test_promotions_decide_which_version_of_a_namespace_is_tried_first(rt) -> None:
    """The policy orders namespaces by what outcomes taught; within one, `fittest promote`,
    `rollback` and trials decide. The evolved version here has the better record throughout."""
    from selection.models import Promotion

    evolved = ToolManifest(name="currency_rates", version="1.1.0", parent_version="1.0.0", description=TOOLS["currency_rates"],
                           implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})
    rt.selector.index.ensure_tool(evolved)
    rt.state.set_quality("currency_rates@1.0.0", 0.2)

    def order(**call: Any) -> list[str]:
        plan = rt.selector.plan(CallRequest(scenario="how many yen for 200 dollars", **call))
        return [c.key for c in plan.candidates if c.manifest.name == "currency_rates"]

    assert order() == ["currency_rates@1.0.0", "currency_rates@1.1.0"]  # nothing promoted: the original serves
    promotion = Promotion(namespace="currency_rates", evolved_version="1.1.0", original_version="1.0.0",
                          parent_version="1.0.0", status="active")
    rt.state.promote(promotion)
    rt.state.set_quality("currency_rates@1.1.0", 0.1)  # now the original has the better record
    assert order() == ["currency_rates@1.1.0", "currency_rates@1.0.0"]
    plan = rt.selector.plan(CallRequest(scenario="convert currencies", namespace="currency_rates"))
    assert plan.candidates[0].key == "currency_rates@1.1.0"  # a namespace call starts with what it serves
    rt.state.promote(promotion.model_copy(update={"status": "rolled_back"}))
    assert order() == ["currency_rates@1.0.0"]  # rolled back: not tried
    assert order(namespace="currency_rates", version="1.1.0")[0] == "currency_rates@1.1.0"  # unless asked for
    # A later promotion (the original, by hand) leaves it rolled back (QA AA: it ran again as a fallback).
    by_hand = Promotion(namespace="currency_rates", evolved_version="1.0.0", original_version="1.0.0",
                        parent_version="1.0.0", status="active")
    rt.state.promote(by_hand)
    assert order() == ["currency_rates@1.0.0"]
    rt.state.promote(promotion.model_copy(update={"status": "active"}))  # until it is promoted again
    assert order() == ["currency_rates@1.1.0", "currency_rates@1.0.0"]


def test_a_trials_share_is_in_the_logged_probability_of_the_version_it_drew(rt) -> None:
    """QA V: with a version on trial, it and the version it is tried against both logged
    probability 1.0 first, where each went first on its share of the calls."""
    from evolution.served_version import in_share
    from selection.models import Promotion

    evolved = ToolManifest(name="currency_rates", version="1.1.0", parent_version="1.0.0", description=TOOLS["currency_rates"],
                           implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})
    rt.selector.index.ensure_tool(evolved)
    rt.state.promote(Promotion(namespace="currency_rates", evolved_version="1.1.0", original_version="1.0.0",
                               parent_version="1.0.0", status="on_trial"))
    share = rt.settings.trial_share
    drawn = {}
    for i in range(40):
        call_id = f"trial-call-{i}"
        plan = rt.selector.plan(CallRequest(scenario="how many yen for 200 dollars", namespace="currency_rates", call_id=call_id))
        first = plan.candidates[0]
        on_trial = in_share(call_id, "currency_rates", share)
        assert first.key == ("currency_rates@1.1.0" if on_trial else "currency_rates@1.0.0")
        assert first.breakdown is not None and first.breakdown.extra["trial_share"] == (share if on_trial else 1 - share)
        assert first.probability == (share if on_trial else 1 - share)  # a call to the namespace: first on its share
        drawn[on_trial] = True
    assert drawn == {True: True, False: True}  # both sides of the share were seen


def test_a_call_retried_after_its_evolution_tries_the_new_version_before_any_other(rt) -> None:
    from selection.models import Promotion

    evolved = ToolManifest(name="currency_rates", version="1.1.0", parent_version="1.0.0", description=TOOLS["currency_rates"],
                           implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})
    rt.selector.index.ensure_tool(evolved)
    rt.state.promote(Promotion(namespace="currency_rates", evolved_version="1.1.0", original_version="1.0.0",
                               parent_version="1.0.0", status="on_trial"))
    for key in ("currency_rates@1.0.0", "currency_rates@1.1.0"):
        rt.state.set_quality(key, 0.01)  # both far behind every other tool on their record
    scenario = "stock prices and exchange rates for my portfolio"
    first = rt.selector.plan(CallRequest(scenario=scenario)).candidates[0].key
    assert first != "currency_rates@1.1.0"
    retry = rt.selector.plan(CallRequest(scenario=scenario, after_evolution=True))
    assert retry.candidates[0].key == "currency_rates@1.1.0"


def succeeded(rt, tool: str, scenario: str, call_id: str, unconfirmed: bool = False, named: bool = False) -> None:
    """Record that `tool` served `scenario` (an outcome as a finished call hands it on; `unconfirmed`:
    as a weak match that has not done such jobs serves one; `named`: a call that named it)."""
    from workers.outcomes import apply_outcome, execution_records, store_executions

    attempt = ToolExecutionResult(attempt_id=f"{call_id}:0", call_id=call_id, tool=tool, version="1.0.0", success=True,
                                  unconfirmed=unconfirmed)
    outcome = OutcomeRecord(call_id=call_id, scenario=scenario, attempts=[attempt], namespace=tool if named else None)
    apply_outcome(rt, outcome)
    store_executions(rt, execution_records(outcome))
    rt.selector.cache.clear()  # a success moves no state version: cached selections would last their TTL


def test_the_clear_best_match_is_tried_first_again_after_one_outage_handed_its_job_to_a_weak_match(rt) -> None:
    """QA integration H1: one HTTP 500 of a text reverser (1.00 similar), a word counter (0.25) "served"
    the call as its fallback, and it was first for every later call of the job, reported as success."""
    from workers.outcomes import apply_failure, apply_outcome, execution_records, store_executions

    scenario = "the current exchange rate between two world currencies"
    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id="outage0"))
    best, weak = plan.candidates[0], next(c for c in plan.candidates if c.breakdown.similarity < 0.5)
    assert best.manifest.name == "currency_rates" and best.breakdown.similarity >= 0.5
    plan.attempts = [
        ToolExecutionResult(attempt_id="outage0:0", call_id="outage0", tool=best.manifest.name, version="1.0.0",
                            success=False, error_class=FailureClass.unavailable),
        ToolExecutionResult(attempt_id="outage0:1", call_id="outage0", tool=weak.manifest.name, version="1.0.0",
                            success=True, unconfirmed=True),
    ]
    apply_failure(rt, FailureMark(attempt_id="outage0:0", call_id="outage0", tool=best.manifest.name, version="1.0.0",
                                  scenario=scenario, error_class=FailureClass.unavailable))
    outcome = OutcomeRecord.from_plan(plan)
    apply_outcome(rt, outcome)
    store_executions(rt, execution_records(outcome))
    rt.selector.cache.clear()
    firsts = [rt.selector.plan(CallRequest(scenario=scenario, call_id=f"after{i}")).candidates[0] for i in range(40)]
    again = [c for c in firsts if c.manifest.name == "currency_rates"]
    # The weak match took the job over (first on every other call), and the best match goes first on
    # the trial share's calls (0.25: ~10 of 40), each saying why, with that share as its probability.
    assert {c.manifest.name for c in firsts if c not in again} == {weak.manifest.name}
    assert 3 <= len(again) <= 20, len(again)
    assert all(c.breakdown.extra.get("best_match_again") == 1.0 and c.probability == 0.25 for c in again)
    # A failure that says it does the job wrong (a wrong output) is no outage: the policy's order stands.
    apply_failure(rt, FailureMark(attempt_id="outage1:0", call_id="outage1", tool=best.manifest.name, version="1.0.0",
                                  scenario=scenario, error_class=FailureClass.bad_output))
    rt.selector.cache.clear()
    firsts = [rt.selector.plan(CallRequest(scenario=scenario, call_id=f"later{i}")).candidates[0] for i in range(20)]
    assert "currency_rates" not in {c.manifest.name for c in firsts}
    # Its confirmed successes there, more than its failures, make it one that does the job: first on
    # every call, though the weak match's successes are confirmed too (QA ops H1: a squaring tool 0.63
    # like a cube job was confirmed by its first success, and kept the job for good).
    for i in range(4):
        succeeded(rt, weak.manifest.name, scenario, f"weak{i}")
    for i in range(3):
        succeeded(rt, "currency_rates", scenario, f"back{i}")
    firsts = [rt.selector.plan(CallRequest(scenario=scenario, call_id=f"last{i}")).candidates[0] for i in range(20)]
    assert {(c.manifest.name, c.probability) for c in firsts} == {("currency_rates", 1.0)}, firsts


@pytest.mark.parametrize("parent", ["1.0.0", None])
def test_an_evolved_version_on_trial_gets_back_the_job_its_parent_lost_by_timeouts(rt, parent: str | None) -> None:
    """QA 50: a text reverser timed out 4 times, a word counter took "reverse this string", and the
    reverser's evolved 1.1.0, which did the job 4 times out of 4 on its trial's share, was never
    tried again (its parent's timeouts matched its successes), so its trial never ended. QA 50c: so
    too a fixed 1.1.0 given as a manifest's new version (no parent), on trial against 1.0.0."""
    from evolution.served_version import in_share
    from selection.models import Promotion
    from workers.outcomes import apply_failure, apply_outcome, execution_records, store_executions

    scenario = "the current exchange rate between two world currencies"
    plan = rt.selector.plan(CallRequest(scenario=scenario, call_id="lost0"))
    weak = next(c for c in plan.candidates if c.breakdown.similarity < 0.5)
    for i in range(4):
        apply_failure(rt, FailureMark(attempt_id=f"lost{i}:0", call_id=f"lost{i}", tool="currency_rates", version="1.0.0",
                                      scenario=scenario, error_class=FailureClass.timeout))
        succeeded(rt, weak.manifest.name, scenario, f"lost{i}")
    evolved = ToolManifest(name="currency_rates", version="1.1.0", parent_version=parent, description=TOOLS["currency_rates"],
                           implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})
    rt.selector.index.ensure_tool(evolved)
    rt.state.promote(Promotion(namespace="currency_rates", evolved_version="1.1.0", original_version="1.0.0",
                               parent_version="1.0.0", status="on_trial"))
    for i in range(4):
        attempt = ToolExecutionResult(attempt_id=f"trial{i}:0", call_id=f"trial{i}", tool="currency_rates", version="1.1.0",
                                      success=True)
        outcome = OutcomeRecord(call_id=f"trial{i}", scenario=scenario, attempts=[attempt])
        apply_outcome(rt, outcome)
        store_executions(rt, execution_records(outcome))
    rt.selector.cache.clear()
    share = rt.settings.trial_share
    firsts = {f"next{i}": rt.selector.plan(CallRequest(scenario=scenario, call_id=f"next{i}")).candidates[0] for i in range(40)}
    # The calls whose trial's draw serves 1.1.0 try it first, logged with the trial's share; the
    # others serve its parent, whose 4 timeouts are past the retries of a best match that fell over:
    # the policy's order stands on them.
    drawn = {call_id for call_id in firsts if in_share(call_id, "currency_rates", share)}
    assert drawn and len(drawn) < len(firsts)
    assert {firsts[c].key for c in drawn} == {"currency_rates@1.1.0"}, firsts
    # (the policy places the namespace first on some of them itself)
    moved = [firsts[c] for c in drawn if firsts[c].breakdown.extra.get("best_match_again") == 1.0]
    assert moved and all(c.probability == share for c in moved), moved
    assert all("in a version evolved from one that failed here" in c.breakdown.rationale for c in moved)
    others = [firsts[c] for c in firsts if c not in drawn]
    assert not any(c.key == "currency_rates@1.1.0" or c.breakdown.extra.get("best_match_again") for c in others)
    # Promoted (its trial's 5th success), it serves every call, and goes first on each.
    rt.state.promote(Promotion(namespace="currency_rates", evolved_version="1.1.0", original_version="1.0.0",
                               parent_version="1.0.0", status="active"))
    firsts = {f"then{i}": rt.selector.plan(CallRequest(scenario=scenario, call_id=f"then{i}")).candidates[0] for i in range(20)}
    assert {c.key for c in firsts.values()} == {"currency_rates@1.1.0"}, firsts
    assert all(c.probability == 1.0 for c in firsts.values() if c.breakdown.extra.get("best_match_again")), firsts


def test_a_call_asks_for_tools_that_match_its_job_at_least_so_much(rt) -> None:
    """QA ops L4: a fallback that matched the job weakly answered it, status success; a caller had no
    way to want no answer rather than such a tool's."""
    scenario = "the current exchange rate between two world currencies"
    loose = rt.selector.plan(CallRequest(scenario=scenario, max_attempts=20)).candidates
    assert any(c.breakdown.similarity < 0.5 for c in loose)  # weak matches are fallbacks by default
    strict = rt.selector.plan(CallRequest(scenario=scenario, max_attempts=20, min_similarity=0.5)).candidates
    assert strict and {c.manifest.name for c in strict} == {c.manifest.name for c in loose if c.breakdown.similarity >= 0.5}
    # A tool the call names is tried whatever its match; nothing that clear ends the call with none, saying why.
    named = rt.selector.plan(CallRequest(scenario=scenario, namespace="weather_now", min_similarity=0.9)).candidates
    assert [c.manifest.name for c in named] == ["weather_now"]
    none = rt.selector.plan(CallRequest(scenario=scenario, min_similarity=0.99))
    assert none.candidates == [] and none.no_candidates_message() == "no tool matches this scenario, namespace and tags at least 0.99"
    # Degraded (no vector memory), no cosine holds the floor: only a namespace the call names is tried (review).
    assert rt.selector.gather(CallRequest(scenario=scenario), None, {})  # word matches serve a call without a floor
    assert rt.selector.gather(CallRequest(scenario=scenario, min_similarity=0.5), None, {}) == []
    assert {e.manifest.name for e in rt.selector.gather(
        CallRequest(scenario=scenario, namespace="currency_rates", min_similarity=0.5), None, {})} == {"currency_rates"}
    # A weak match's unconfirmed success does not get it past the floor (QA recheck N2: one call
    # without the floor, served by a 0.44 tool, let that tool past it from then on)...
    succeeded(rt, "weather_now", scenario, "floor_weak", unconfirmed=True)
    assert "weather_now" not in {c.manifest.name for c in rt.selector.plan(
        CallRequest(scenario=scenario, max_attempts=20, min_similarity=0.6)).candidates}
    # ...nor does a success of a call that named it (QA live F4: one `--namespace` call did so)...
    succeeded(rt, "weather_now", scenario, "floor_named", named=True)
    assert "weather_now" not in {c.manifest.name for c in rt.selector.plan(
        CallRequest(scenario=scenario, max_attempts=20, min_similarity=0.6)).candidates}
    assert "weather_now" in {c.manifest.name for c in rt.selector.plan(CallRequest(scenario=scenario, max_attempts=20)).candidates}
    # ...where a success that says it does the job clears the floor as a description would (the same job: 1.0 similar).
    succeeded(rt, "weather_now", scenario, "floor0")
    brought = {c.manifest.name: c for c in rt.selector.plan(CallRequest(scenario=scenario, max_attempts=20,
                                                                        min_similarity=0.6)).candidates}
    assert "weather_now" in brought and brought["weather_now"].breakdown.similarity < 0.6


def test_a_past_success_brings_its_tool_in_only_for_a_similar_job(rt) -> None:
    """QA: in a young system the nearest successes of a job include unrelated ones, and their tools
    ran (and failed) as its fallbacks. A success brings its tool in as a description match would:
    from FITTEST_MIN_SIMILARITY on."""
    scenario = "reindent this javascript program"
    def candidates() -> list[str]:
        return [c.manifest.name for c in rt.selector.plan(CallRequest(scenario=scenario, max_attempts=20)).candidates]

    assert "weather_now" not in candidates()  # its description has nothing to do with it
    succeeded(rt, "weather_now", "sort these numbers", "u0")  # 0.09 similar
    assert "weather_now" not in candidates()
    succeeded(rt, "weather_now", "reformat this javascript source file", "u1")
    assert "weather_now" in candidates()


def test_an_output_judged_wrong_stops_counting_as_a_success_nearby(rt) -> None:
    """QA: a converter whose answers were wrong kept every similar call after 108 negative
    judgements of its calls (feedback -46): each judged output still counted as a success of its
    namespace nearby, which a feedback factor of at most one half cannot outweigh. A call judged
    wrong is no success; judged right again, it is its own outcome once more."""
    from workers.feedback_store import JudgedCall, record_tool_feedback

    scenario = "how many yen do I get for 200 dollars today"
    def ranking() -> list:
        return rt.selector.plan(CallRequest(scenario=scenario, max_attempts=20)).candidates

    assert ranking()[0].manifest.name == "currency_rates"
    jobs = ["what is 200 dollars in yen", "convert 50 euros to yen", "yen for 80 dollars now"]
    for i, text in enumerate(jobs):
        succeeded(rt, "weather_now", text, f"w{i}")
    served = ranking()[0]
    assert served.manifest.name == "weather_now" and served.breakdown.extra["successes_nearby"] > 0
    for i, text in enumerate(jobs):
        record_tool_feedback(rt, "weather_now", None, None, "negative", reason="not a conversion",
                             call=JudgedCall(call_id=f"w{i}", ran=["weather_now@1.0.0"], scenario=text))
    after = ranking()
    assert after[0].manifest.name == "currency_rates"
    assert all(c.breakdown.extra["successes_nearby"] == 0 for c in after if c.manifest.name == "weather_now")
    record_tool_feedback(rt, "weather_now", None, None, "positive",
                         call=JudgedCall(call_id="w0", ran=["weather_now@1.0.0"], scenario=jobs[0]))
    weather = [c for c in ranking() if c.manifest.name == "weather_now"]
    assert weather and weather[0].breakdown.extra["successes_nearby"] > 0
    # QA AB: a judgement of quality 0 counts for nothing: the output counts as it ran, in the
    # counters and nearby, and its call's outcome feedback counts again (before: as a negative one).
    key, vector = "weather_now@1.0.0", rt.embedder.embed_one(jobs[1])
    judged = rt.selector.feedback_points([key], vector)[key]
    record_tool_feedback(rt, "weather_now", None, None, "negative", quality=0.0,
                         call=JudgedCall(call_id="w1", ran=[key], scenario=jobs[1]))
    assert rt.state.stats([key])[key].failures == 1  # w2's; w1's output counts as the success it ran as
    assert rt.selector.feedback_points([key], vector)[key] > judged  # w1's outcome counts in place of -1
    assert sum(c.breakdown.extra["successes_nearby"] > 0 for c in ranking() if c.manifest.name == "weather_now") == 1


def test_a_judgement_made_before_its_calls_records_came_applies_to_them(rt) -> None:
    """A judgement waits OUTCOME_WAIT_S for its call's records (batched); one made earlier (a slow
    batch, a judgement sent as the call returned) is applied as the records are stored: the outcome
    entry no longer counts and the execution record is no success."""
    from selection.ports import EXECUTIONS, FEEDBACK, VectorFilter
    from workers.feedback_store import JudgedCall, record_tool_feedback

    text = "what is 200 dollars in yen"
    record_tool_feedback(rt, "weather_now", "1.0.0", text, "negative", reason="not a conversion",  # waits 2.5 s in vain
                         call=JudgedCall(call_id="late1", ran=["weather_now@1.0.0"], scenario=text))
    succeeded(rt, "weather_now", text, "late1")
    mine = VectorFilter.where(call_id="late1", tool="weather_now@1.0.0")
    (outcome,) = rt.memory.scroll(FEEDBACK, filter=VectorFilter.where(call_id="late1", source="outcome"), limit=5)
    assert outcome.payload.get("replaced") is True
    (record,) = rt.memory.scroll(EXECUTIONS, filter=mine, limit=5)
    assert (record.payload["success"], record.payload.get("judged")) == (False, "negative")


def test_a_deprecated_version_is_not_offered_but_is_served_to_a_call_that_names_it_by_version(rt) -> None:
    """examples/tools/README.md: `deprecated` -- still callable by exact version, not offered by
    selection. QA M: a call naming the deprecated version (fittest call -n NAME@VERSION, or
    call_tool with a version) ended no_candidates."""
    old = ToolManifest(name="weather_now", version="0.9.0", description=TOOLS["weather_now"], deprecated=True,
                       implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})
    rt.selector.index.ensure_tool(old)

    plan = rt.selector.plan(CallRequest(scenario="the forecast for Lisbon tomorrow"))
    assert "weather_now@0.9.0" not in [c.key for c in plan.candidates]
    plan = rt.selector.plan(CallRequest(scenario="the forecast for Lisbon tomorrow", namespace="weather_now"))
    assert "weather_now@0.9.0" not in [c.key for c in plan.candidates]
    plan = rt.selector.plan(CallRequest(scenario="the forecast for Lisbon tomorrow", namespace="weather_now", version="0.9.0"))
    assert [c.key for c in plan.candidates][:1] == ["weather_now@0.9.0"]
    assert plan.notes == []


def test_a_call_naming_a_tool_whose_versions_are_all_deprecated_says_it_was_ranked_by_its_scenario(rt) -> None:
    """QA integration M5: served by another tool with empty notes; only the CLI warned, of "no tool
    named" a tool that exists."""
    rt.registry.replace(ToolManifest(name="weather_now", description=TOOLS["weather_now"], deprecated=True,
                                     implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}), "test")
    rt.selector.cache.clear()
    plan = rt.selector.plan(CallRequest(scenario="the forecast for Lisbon tomorrow", namespace="weather_now"))
    assert "weather_now" not in {c.manifest.name for c in plan.candidates}
    assert plan.notes == ["every version of 'weather_now' is deprecated, so none is offered (a call naming one, "
                          "weather_now@1.0.0, runs it): the call was ranked by its scenario alone"]
    assert rt.selector.plan(CallRequest(scenario="the forecast for Lisbon tomorrow", namespace="stock_quotes")).notes == []


def test_a_tool_that_past_successes_bring_in_is_not_matched_by_an_example_its_manifest_dropped(rt, tmp_path: Path) -> None:
    """QA P: a scenario-only call takes in the tools of similar past successes with their best
    match among their texts; that search alone did not leave out the points marked deprecated, so an
    example the manifest no longer has still gave its version a match of 1.0."""
    from workers.outcomes import execution_records, store_executions

    scenario = "when is low water at Nazare"
    source = tmp_path / "tools" / "numerals.yaml"
    tool = ToolManifest(name="numerals", description="Converts Roman numerals to integers.", examples=[scenario],
                        implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})
    rt.selector.index.ensure_tools([(tool, source)])
    won = ToolExecutionResult(attempt_id="won:0", call_id="won", tool="numerals", version="1.0.0", success=True)
    store_executions(rt, execution_records(OutcomeRecord(call_id="won", scenario=scenario, attempts=[won])))
    rt.selector.index.revise_tools([(tool.model_copy(update={"examples": []}), source)], [])  # the example is dropped
    plan = rt.selector.plan(CallRequest(scenario=scenario))
    (numerals,) = [c for c in plan.candidates if c.manifest.name == "numerals"]  # brought in by its success
    assert numerals.breakdown.similarity < 0.5, numerals.breakdown


def test_recommend_reads_the_manifests_for_its_advice_on_sparc_metadata(rt, monkeypatch) -> None:
    """QA AE: the advice that names a version's SPARC fields was given only in unit tests: the
    workers' task never passed it the manifests, so it said "narrow its SPARC task_types" whatever
    the manifest listed."""
    from selection.learner import ExecutionRecord
    from workers.outcomes import store_executions
    from workers.tasks.learning import recommend

    def record(i: int, task_type: str, ok: bool) -> ExecutionRecord:
        return ExecutionRecord(attempt_id=f"r{i}:0", call_id=f"r{i}", tool="py_linter", version="1.0.0",
                               scenario=f"check this python code, file {i}", success=ok,
                               error_class=None if ok else "crash", features={"task_type": task_type})

    store_executions(rt, [record(i, "analysis", True) for i in range(4)] + [record(4 + i, "bug_fix", False) for i in range(4)])
    monkeypatch.setattr("workers.tasks.learning.runtime", lambda: rt)  # the task, on this test's stores
    answer = recommend(min_runs=3)
    found = {r["context"]: r for r in answer["recommendations"] if r["tool"] == "py_linter@1.0.0"}
    assert "task_type=bug_fix" in found, answer
    assert "take bug_fix out of its SPARC task_types (analysis, bug_fix)" in found["task_type=bug_fix"]["advice"]


def test_a_named_namespace_is_first_however_low_the_policy_ranks_it(rt, monkeypatch) -> None:
    """QA resilience: `--namespace` of a tool the policy ranked 9th (after a failure) was cut with the
    ranking's tail, and the call said no tool of that name was ranked."""
    from workers.outcomes import apply_failure

    monkeypatch.setattr(rt.selector.settings, "max_candidates", 2)
    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)  # every tool a candidate
    scenario = "how many yen do I get for 200 dollars today"
    last = "doc_writer"  # a tool for other jobs; it failed this one many times, and two others do it
    for i in range(8):
        apply_failure(rt, FailureMark(attempt_id=f"f{i}:0", call_id=f"f{i}", tool=last, version="1.0.0",
                                      scenario=scenario, error_class=FailureClass.crash))
    for i in range(10):
        run_call(rt, scenario, "currency_rates" if i % 2 else "stock_quotes", f"ok{i}")
    rt.selector.cache.clear()
    plan = rt.selector.plan(CallRequest(scenario=scenario, namespace=last, max_attempts=1))
    assert [c.manifest.name for c in plan.candidates][:1] == [last]


def test_a_named_tool_that_matches_the_job_poorly_is_ranked_with_its_own_similarity(rt) -> None:
    """`explain -n NAME` of a job the tool matches poorly showed the named tool's similarity as 0.00,
    as if its description were not compared at all: below the floor a named version's cosine was
    dropped, and 0 stood in for it."""
    scenario = "write the exchange rate of yen to dollars in a report"
    plan = rt.selector.plan(CallRequest(scenario=scenario, namespace="doc_writer"))
    named = next(c for c in plan.candidates if c.manifest.name == "doc_writer")
    vector = rt.embedder.embed([scenario])[0]
    cosine = max(h.score for h in rt.memory.search(TOOLS_COLLECTION, vector, limit=10,
                                                   filter=VectorFilter(must=[Match(key="name", any_of=["doc_writer"])])))
    assert 0.0 < cosine < rt.settings.min_similarity  # the case: a match under the floor
    assert named.breakdown.similarity == pytest.approx(cosine, abs=1e-3), named.breakdown


def test_a_feedback_report_of_a_name_no_tool_has_is_refused_and_of_a_tool_nobody_judged_is_empty(rt, monkeypatch) -> None:
    """QA 55b L7: `fittest.feedback_report` answered an empty report for a name no tool has, where
    `fittest feedback show` says there is no such tool: a service could not tell the two apart."""
    from workers.tasks import feedback
    from workers.tasks.feedback import feedback_report_task

    monkeypatch.setattr(feedback, "runtime", lambda: rt)
    reply = feedback_report_task.run(tool="nope_tool")
    assert reply["status"] == "invalid" and reply["message"] == "no tool named 'nope_tool'"
    assert [(e["field"], e["type"]) for e in reply["errors"]] == [("tool", "no_such_tool")]
    report = feedback_report_task.run(tool="weather_now")
    assert (report["tool"], report["total"], report["entries"]) == ("weather_now", 0, [])


def test_an_exclude_that_names_no_tool_version_is_noted(rt) -> None:
    """QA 59a L4: `exclude: ["sort_numbers@7.0.0"]`, a version no tool has, passed with no word, and
    sort_numbers ran, where a namespace no tool has is noted as a likely typo."""
    plan = rt.selector.plan(CallRequest(scenario="how many yen do I get for 200 dollars today",
                                        exclude=["currency_rates@7.0.0", "nosuch@1.0.0", "weather_now@1.0.0"]))
    assert [n for n in plan.notes if n.startswith("exclude names")] == [
        "exclude names currency_rates@7.0.0, which no tool is, so it excludes nothing (currency_rates has 1.0.0)",
        "exclude names nosuch@1.0.0, which no tool is, so it excludes nothing (no tool named 'nosuch')",
    ]
    assert "weather_now@1.0.0" not in [c.key for c in plan.candidates]  # a real one is excluded, unsaid


def test_a_tool_with_side_effects_is_no_candidate_for_a_job_it_matches_weakly_unless_named(rt, monkeypatch) -> None:
    """QA 63f: a lookup that crashed fell back to a shipment notifier 0.20 like it, which sent a
    shipment notice; an email job, to it at 0.45, which sent 20. A tool that changes things outside
    itself is tried only on jobs it clearly matches, does, or is named for."""
    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)  # every tool a candidate, by its match alone
    rt.selector.index.ensure_tools([(ToolManifest(name="ship_notify", description="Send a shipment notification for a "
                                                  "parcel and log it to the dispatch outbox file.", side_effects=True,
                                                  implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}), None)])
    weak = "look up the current weather in Lyon"
    assert "ship_notify" not in [c.manifest.name for c in rt.selector.plan(CallRequest(scenario=weak)).candidates]
    assert "weather_now" in [c.manifest.name for c in rt.selector.plan(CallRequest(scenario=weak)).candidates]
    named = rt.selector.plan(CallRequest(scenario=weak, namespace="ship_notify"))
    assert [c.manifest.name for c in named.candidates] == ["ship_notify"]  # named: its versions alone (side effects)
    clear = rt.selector.plan(CallRequest(scenario="notify the customer that the parcel has shipped"))
    assert clear.candidates[0].manifest.name == "ship_notify", [(c.key, c.breakdown.similarity) for c in clear.candidates]


def test_one_output_judged_wrong_does_not_hand_the_job_to_a_tool_that_does_other_jobs(rt, monkeypatch) -> None:
    """QA 64c: one output of a young word counter (1.00 like the job, one success) judged wrong, and a
    word reverser 0.40 like it went first on 17 of the next 22 calls, answering with reversed words."""
    monkeypatch.setattr(rt.selector.settings, "min_similarity", -1.0)  # the reverser a candidate, as in QA 64c
    rt.selector.index.ensure_tools([(ToolManifest(name=name, description=text, implementation={"kind": "http", "url": "http://127.0.0.1:9/x"}), None)
                                    for name, text in (("word_tally", "Count the words in a paragraph of text."),
                                                       ("word_flip", "Reverse the order of the words in a sentence."))])
    scenario = "how many words are in this paragraph"
    assert serve_judged(rt, scenario, "tally-1", "word_tally", judged="negative") == "word_tally"
    first = rt.selector.plan(CallRequest(scenario=scenario, call_id="look")).candidates[0]
    assert first.manifest.name == "word_tally" and first.probability == 1.0, first
    assert first.breakdown is not None and "one of whose outputs here a person judged wrong" in first.breakdown.rationale
    firsts = []
    for i in range(12):
        rt.selector.cache.clear()
        firsts.append(serve_judged(rt, scenario, f"after-{i}"))
    assert firsts == ["word_tally"] * 12, firsts  # before: word_flip, 12 of 12

"""Trial, rollback, locking and memory of evolution on real services (Redis, Qdrant Edge, fastembed,
the subprocess sandbox), without Celery: the functions the feedback and evolution tasks run."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from evolution.models import CandidateVersion, ChangelogEntry, EvolutionJob, EvolutionRecord, EvolutionReport, Evidence, FailedRun, StageResult
from evolution.mutation import Mutator, load_mutators
from evolution.mutators.code import CodeMutator
from evolution.verification import StageRun
from evolution.promotions import (AlreadyPromoted, PromotionChanged, PromotionError, conclude_trial, promote_by_hand,
                                 rollback, trial_new_manifests)
from evolution.served_version import (fallback_version, head_version, served_version, withdrawn_version,
                                      withdrawn_versions)
from evolution.trial import JudgedTrial, TrialCounts
from selection.manifest import split_key
from selection.models import CallPlan, CallRequest, FailureClass, FailureMark, OutcomeRecord, Promotion, Severity, ToolExecutionResult
from tests.conftest import upstream, write_tool
from workers.cli.tools import tool_rows
from workers.evolution_jobs import apply_evolution_record, build_job, maybe_evolve_for_quality
from workers.feedback_store import JudgedCall, judged_as, record_tool_feedback
from workers.evolver import Evolver, mutator_config
from workers.outcomes import apply_failure, apply_outcome, execution_records, store_executions
from workers.runners import RunOutcome
from workers.runtime import Runtime
from workers.settings import Settings
from workers.trials import judge_trial

SLOW = "import time\ndef run(value):\n    time.sleep(value['n'] / 10)\n    return {'n': value['n']}\n"
BUGGY = "def run(value):\n    return {'mean': sum(value['xs']) / len(value['xs'])}\n"
STILL_BUGGY = "def run(value):\n    xs = value['xs']\n    return {'mean': sum(xs) / len(xs)}\n"
FIXED = "def run(value):\n    xs = value['xs']\n    return {'mean': sum(xs) / len(xs) if xs else 0.0}\n"


@pytest.fixture
def rt(settings_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    tools = tmp_path / "tools"
    write_tool(tools, "slowish", SLOW, timeout_s=0.3, test_cases=[{"input": {"n": 1}, "expect": {"n": 1}}])
    # Its rewrites are verified by running them: 0.3 s, slowish's, was too short for a loaded host
    # to start the sandbox's run (CI: "test case 1: … timeout: no result within 0.3s").
    write_tool(tools, "mean", BUGGY, test_cases=[{"input": {"xs": [1, 2, 3]}, "expect": {"mean": 2.0}}], timeout_s=5.0)
    monkeypatch.setenv("FITTEST_TOOLS_DIR", str(tools))
    monkeypatch.setenv("FITTEST_EVOLUTION_QUALITY_THRESHOLD", "0.92")
    runtime = Runtime(Settings())
    yield runtime
    runtime.state.clear()
    runtime.close()


def attempt(key: str, ok: bool, aid: str) -> ToolExecutionResult:
    name, version = split_key(key)
    return ToolExecutionResult(attempt_id=aid, call_id=aid, tool=name, version=version, success=ok,
                               result={"n": 1} if ok else None, error_class=None if ok else FailureClass.crash)


def outcome(*attempts: ToolExecutionResult) -> OutcomeRecord:
    return OutcomeRecord(call_id=attempts[0].call_id, scenario="count slowly", attempts=list(attempts), input={"n": 1})


def on_trial(rt: Runtime, parent_successes: int, parent_failures: int) -> None:
    for i in range(parent_successes):
        rt.state.record_successes([("slowish@1.0.0", f"ps{i}")])
    for i in range(parent_failures):
        rt.state.mark_failure("slowish@1.0.0", f"pf{i}", Severity.high)
    rt.state.promote(Promotion(namespace="slowish", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0"))


def test_the_retries_of_the_calls_that_made_a_version_do_not_decide_its_trial(rt: Runtime) -> None:
    """QA evolution: a version was activated, "3/3 successes on trial", by the retries of the 4
    concurrent calls whose failure made it, before any other call had run it."""
    on_trial(rt, parent_successes=0, parent_failures=3)
    for i in range(6):
        retried = outcome(attempt("slowish@1.1.0", True, f"r{i}")).model_copy(update={"after_evolution": True})
        apply_outcome(rt, retried)
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "on_trial"  # still undecided
    for i in range(5):  # the version's own traffic decides
        apply_outcome(rt, outcome(attempt("slowish@1.1.0", True, f"a{i}")))
    assert rt.state.promotion("slowish").status == "active"  # type: ignore[union-attr]


def test_a_better_version_on_trial_becomes_active(rt: Runtime) -> None:
    on_trial(rt, parent_successes=3, parent_failures=3)
    for i in range(4):
        apply_outcome(rt, outcome(attempt("slowish@1.1.0", True, f"a{i}")))
    apply_outcome(rt, outcome(attempt("slowish@1.1.0", True, "a0")))  # a redelivery counts once
    fallback = [attempt("other@1.0.0", False, "x0"), attempt("slowish@1.1.0", False, "x1")]
    apply_outcome(rt, OutcomeRecord(call_id="x", scenario="s", namespace="other", attempts=fallback))  # not its traffic
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "on_trial"  # the redelivery was no fifth success
    apply_outcome(rt, outcome(attempt("slowish@1.1.0", True, "a4")))
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "active"
    # what `fittest show` prints of the verdict: the fallback's failure was not counted either
    assert [(e.event, e.reason) for e in rt.evolution.changelog("slowish")] == [
        ("activated", "5/5 successes on trial against the parent's rate of 0.50")]
    assert len(rt.evolution.recent_successes("slowish@1.1.0")) == 5


def test_a_callers_bad_input_counts_in_no_trial_and_is_no_example_of_the_job(rt: Runtime) -> None:
    """Review: a parent's refusal set aside as the caller's mistake counted as a parent failure in
    the trial, pushing its verdict toward the version on trial; a success set aside became an
    example of the job that evolution replays."""
    on_trial(rt, parent_successes=3, parent_failures=3)
    refused = attempt("slowish@1.0.0", False, "m0").model_copy(update={"error_class": FailureClass.bad_input,
                                                                       "callers_mistake": True})
    lucky = attempt("slowish@1.1.0", True, "m1").model_copy(update={"took_a_refused_input": True})
    apply_outcome(rt, outcome(refused, lucky))
    assert rt.evolution.recent_successes("slowish@1.1.0") == []
    assert rt.state.stats(["slowish@1.1.0"])["slowish@1.1.0"].successes == 0  # no success of its version either
    for i in range(3):  # the parent's own traffic: from 3 runs on, the trial takes the parent's rate from them
        apply_outcome(rt, outcome(attempt("slowish@1.0.0", True, f"p{i}")))
    for i in range(4):  # the version's own traffic still counts
        apply_outcome(rt, outcome(attempt("slowish@1.1.0", True, f"a{i}")))
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "on_trial"  # the set-aside success was no fifth
    apply_outcome(rt, outcome(attempt("slowish@1.1.0", True, "a4")))
    # a parent rate of 0.75 would say the refusal counted as a parent failure
    assert [(e.event, e.reason) for e in rt.evolution.changelog("slowish")] == [
        ("activated", "5/5 successes on trial against the parent's rate of 1.00")]


def test_a_worse_version_on_trial_is_rolled_back_and_the_parent_served_again(rt: Runtime) -> None:
    on_trial(rt, parent_successes=9, parent_failures=1)
    results = [True, False, True, False, False]
    for i, ok in enumerate(results):
        ran = attempt("slowish@1.1.0", ok, f"w{i}")
        apply_outcome(rt, outcome(ran if ok else ran.model_copy(update={"error_message": f"KeyError: 'sentence' (w{i})"})))
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "rolled_back"
    assert served_version(promotion, "any-call", after_evolution=True, share=1.0) is None  # the original, the parent
    (entry,) = rt.evolution.changelog("slowish")
    assert entry.event == "rolled_back" and "2/5 successes" in entry.reason
    # ...and why it failed, as its last failure says (QA 64c: a KeyError five times, unsaid)
    assert entry.reason.endswith("; its last failure: crash: KeyError: 'sentence' (w4)"), entry.reason


def test_a_manifest_versions_trial_names_the_version_it_is_tried_against_not_a_parent(rt: Runtime) -> None:
    """QA 64d: "against the parent's rate" of a manifest's new version, which has no parent."""
    on_trial(rt, parent_successes=9, parent_failures=1)
    trial = rt.state.promotion("slowish")
    assert trial is not None
    rt.state.promote(trial.model_copy(update={"mutation": "new manifest version"}))
    for i in range(5):
        apply_outcome(rt, outcome(attempt("slowish@1.1.0", False, f"m{i}")))
    (entry,) = rt.evolution.changelog("slowish")
    assert entry.event == "rolled_back" and entry.reason.startswith(
        "0/5 successes on trial against slowish@1.0.0's rate of 0.90 (the version it is tried against)"), entry.reason


def test_outputs_people_judge_wrong_count_as_failures_of_the_version_on_trial(rt: Runtime) -> None:
    """An output of the version on trial that a person judges wrong (`feedback add ... --call`) is a
    failure in its trial, however often it is sent, and the trial decides on it: before, the trial
    counted it as the success it ran as, and five such outputs activated the version."""
    on_trial(rt, parent_successes=9, parent_failures=1)
    given_by_a_manifest(rt, "1.1.0")  # served, so that it can be judged

    def judge(call_id: str, sentiment: Literal["positive", "negative"], quality: float = 1.0) -> JudgedTrial | None:
        """What the feedback task does with a judgement of the call's output."""
        record = record_tool_feedback(rt, "slowish", "1.1.0", None, sentiment, quality=quality,
                                      call=JudgedCall(call_id=call_id, ran=["slowish@1.1.0"], scenario="count slowly"))
        return judge_trial(rt, "slowish@1.1.0", call_id, judged_as(record))

    def served(call_id: str) -> None:
        """A call the version on trial served, its outcome and execution record stored (a judgement
        waits up to 2.5 s for the record of the call it judges)."""
        record = outcome(attempt("slowish@1.1.0", True, call_id))
        apply_outcome(rt, record)
        store_executions(rt, execution_records(record))

    for i in range(4):
        served(f"j{i}")
    wrong = judge("j0", "negative")
    assert wrong is not None and (wrong.role, wrong.status) == ("evolved", "on_trial")
    assert wrong.counts == TrialCounts(evolved_successes=3, evolved_failures=1)
    assert judge("j0", "negative") == wrong  # sent twice, counted once
    right = judge("j0", "positive")  # judged right after all
    assert right is not None and right.counts == TrialCounts(evolved_successes=4)
    judge("j0", "negative")
    # QA AB: one of quality 0 counts for nothing: the output counts as it ran
    unsure = judge("j0", "negative", quality=0.0)
    assert unsure is not None and unsure.counts == TrialCounts(evolved_successes=4)
    judge("j0", "negative")
    # A judgement that comes before its call's outcome moves nothing; the outcome counts as judged.
    early = judge("j4", "negative")
    assert early is not None and early.counts == TrialCounts(evolved_successes=3, evolved_failures=1)
    served("j4")
    promotion = rt.state.promotion("slowish")
    # 3 right of 5 against the parent's 0.9: rolled back (the five successes as they ran activated it)
    assert promotion is not None and promotion.status == "rolled_back"
    entry = rt.evolution.changelog("slowish")[-1]
    assert entry.event == "rolled_back" and "3/5 successes" in entry.reason
    # QA 65c-A: a judgement after the verdict is told the trial was decided before it
    late = judge_trial(rt, "slowish@1.1.0", "j1", "negative")
    assert late is not None and late.decided_before and late.status == "rolled_back"
    assert judge_trial(rt, "slowish@1.1.0", "j1", "negative") is None  # sent again: nothing changes
    assert judge_trial(rt, "slowish@1.1.0", "nosuchcall", "negative") is None  # a call no trial counted


def given_by_a_manifest(rt: Runtime, version: str) -> None:
    """A second manifest of `slowish` that gives it `version`, as the tools watch serves it."""
    original = rt.registry.get("slowish@1.0.0")
    assert original is not None
    rt.registry.add(original.model_copy(update={"version": version}))


def test_a_manifest_version_whose_manifest_is_gone_is_no_longer_promoted_and_the_next_one_goes_on_trial(rt: Runtime) -> None:
    """QA: a 1.2.0 on trial whose manifest was removed stayed the promotion no call could decide:
    `fittest show` marked no version served, `fittest describe` and `fittest evolve` failed with
    "slowish has no version 1.2.0", and a 1.3.0 added later never went on trial."""
    given_by_a_manifest(rt, "1.2.0")
    (trial,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    assert (trial.evolved_version, trial.status) == ("1.2.0", "on_trial")
    rt.registry.remove("slowish@1.2.0")  # its manifest left the tools directory
    assert trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"]) == []
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "rolled_back"
    assert head_version(promotion) is None  # the original is served, as selection serves it
    entry = rt.evolution.changelog("slowish")[-1]
    assert (entry.event, entry.version) == ("rolled_back", "1.2.0") and "no longer" in entry.reason
    given_by_a_manifest(rt, "1.3.0")
    (trial,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    assert (trial.evolved_version, trial.parent_version, trial.status) == ("1.3.0", "1.0.0", "on_trial")
    rt.registry.remove("slowish@1.3.0")
    activated = trial.model_copy(update={"status": "active"})  # a trial it won, then its manifest went
    assert rt.state.promote_if(activated, "1.3.0", ["on_trial"])
    trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "rolled_back" and head_version(promotion) is None


def test_rolling_back_a_version_promoted_by_hand_serves_what_it_replaced(rt: Runtime) -> None:
    """QA: with an evolved 1.1.0 served, `fittest promote slowish 1.2.0` (a manifest's version) and
    then `fittest rollback slowish` served the original 1.0.0, not the 1.1.0 served before."""
    rt.state.promote(Promotion(namespace="slowish", evolved_version="1.1.0", original_version="1.0.0",
                               parent_version="1.0.0", status="active"))
    given_by_a_manifest(rt, "1.2.0")
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.2.0")
    logged = len(rt.evolution.changelog("slowish"))
    with pytest.raises(AlreadyPromoted, match="slowish@1.2.0 is served already"):  # QA evolution L2: logged as a change
        promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.2.0")
    assert len(rt.evolution.changelog("slowish")) == logged
    assert head_version(rt.state.promotion("slowish")) == "1.2.0"
    assert "in place of slowish@1.1.0" in rt.evolution.changelog("slowish")[-1].reason
    back = rollback(rt.state, rt.evolution, "slowish")
    assert back.parent_version == "1.1.0"
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) == "1.1.0"
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.2.0")  # from the original this time
    rt.state.promote(Promotion(namespace="slowish", evolved_version="1.0.0", original_version="1.0.0"))
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.2.0")
    rollback(rt.state, rt.evolution, "slowish")
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) is None


def test_a_promote_by_hand_over_a_trial_whose_verdict_lands_meanwhile_does_not_revive_that_trial(rt: Runtime) -> None:
    """QA 59b F1: `fittest promote` read the promotion (1.1.0 on trial) and wrote its own without a
    compare, after the trial's verdict had rolled 1.1.0 back; its `resumes` was that trial, so the
    next `fittest rollback` put the loser on trial again (23 of 300 rounds of a two-process race)."""
    trial = Promotion(namespace="slowish", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0",
                      status="on_trial")
    rt.state.promote(trial)
    given_by_a_manifest(rt, "1.2.0")
    reads = []

    class VerdictAfterTheRead:
        """The store, with the trial's verdict landing right after the promote's first read."""

        def __getattr__(self, name: str) -> Any:
            return getattr(rt.state, name)

        def promotion(self, namespace: str) -> Promotion | None:
            read = rt.state.promotion(namespace)
            reads.append(read)
            if len(reads) == 1:
                assert conclude_trial(rt.state, rt.evolution, trial, "rollback", "0/5 successes on trial")
            return read

    promote_by_hand(VerdictAfterTheRead(), rt.evolution, rt.registry, "slowish", "1.2.0")
    assert len(reads) == 2 and reads[1] is not None and reads[1].status == "rolled_back"  # made again from the verdict
    rollback(rt.state, rt.evolution, "slowish")
    served = rt.state.promotion("slowish")
    assert served is not None and served.evolved_version == "1.2.0" and served.status == "rolled_back", served
    assert served_version(served, "any-call", after_evolution=False, share=1.0) is None  # the original, no trial
    assert [p.evolved_version for p in rt.state.promotion_history("slowish") if p.status == "on_trial"] == ["1.1.0"]

    class EverChanging(VerdictAfterTheRead):
        def promotion(self, namespace: str) -> Promotion | None:
            read = rt.state.promotion(namespace)  # and a trial's verdict, or a new trial, right after each read
            status = "active" if read is not None and read.status == "on_trial" else "on_trial"
            rt.state.promote(Promotion(namespace="slowish", evolved_version="1.1.0", original_version="1.0.0",
                                       parent_version="1.0.0", status=status))
            return read

    with pytest.raises(PromotionChanged, match="kept changing while slowish@1.0.0 was promoted; nothing was changed"):
        promote_by_hand(EverChanging(), rt.evolution, rt.registry, "slowish", "1.0.0")
    assert rt.state.promotion("slowish").evolved_version == "1.1.0"  # type: ignore[union-attr]


def test_rolling_back_the_original_promoted_by_hand_serves_the_version_it_replaced(rt: Runtime) -> None:
    """QA R: with an evolved 1.1.0 served, `fittest promote slowish 1.0.0` (the original) and then
    `fittest rollback slowish` said "no promoted version to roll back (the original is served)"."""
    rt.state.promote(Promotion(namespace="slowish", evolved_version="1.1.0", original_version="1.0.0",
                               parent_version="1.0.0", status="active"))
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.0.0")
    back = rollback(rt.state, rt.evolution, "slowish")
    assert (back.evolved_version, back.parent_version) == ("1.0.0", "1.1.0")
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) == "1.1.0"
    assert withdrawn_version(back) is None  # the original stays the fallback behind it
    # The evolved version's promotion is served again, so a second rollback rolls it back (QA 64c-4).
    again = rollback(rt.state, rt.evolution, "slowish")
    assert (again.evolved_version, again.status) == ("1.1.0", "rolled_back")
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) is None  # the original
    with pytest.raises(PromotionError, match="rolled back already; slowish@1.0.0 is served"):
        rollback(rt.state, rt.evolution, "slowish")
    with pytest.raises(PromotionError, match=r"^the version to serve is blank \(known: 1.0.0\)$"):  # QA AA
        promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", " ")


def slow_job(trigger: str, served: str | None = None) -> EvolutionJob:
    """A job of slowish@1.0.0 timing out on {"n": 5}: a failed call's (with the call) or a manual one."""
    failure = FailedRun(version="1.0.0", input={"n": 5}, error_class=FailureClass.timeout, error_message="no result within 0.3s")
    return EvolutionJob(namespace="slowish", parent_version="1.0.0", served_version=served, trigger=trigger,
                        pattern="timeout: no result within 0.3s", evidence=Evidence(failures=[failure]),
                        plan=slow_call(5) if trigger == "call" else None)


class SlowSandbox:
    """Passes every stage after a pause. Sandboxes fork with preexec_fn, which is unsafe in a
    threaded process such as this test; the lock, not verification, is under test here."""

    def __init__(self, pause_s: float = 1.5) -> None:
        self.pause_s = pause_s

    def static(self, manifest: Any, timeout_s: float) -> StageResult:
        time.sleep(self.pause_s)
        return StageResult(stage="static", passed=True, checked=1)

    def run(self, manifest: Any, inputs: list[dict[str, Any]], timeout_s: float) -> StageRun:
        return StageRun(results=[RunOutcome.ok({"n": 1}) for _ in inputs])


def test_a_concurrent_evolution_of_the_same_namespace_skips_or_waits(rt: Runtime) -> None:
    records: list[EvolutionRecord] = []
    evolver = Evolver(rt.settings, rt.state, rt.evolution, records.append, sandbox=SlowSandbox())
    reports: dict[str, Any] = {}
    first = threading.Thread(target=lambda: reports.setdefault("first", evolver.run(slow_job("call"))))
    first.start()
    deadline = time.monotonic() + 20  # until the first evolution holds the namespace's lock
    while time.monotonic() < deadline and rt.state.acquire_lock("evolve:slowish", "probe", 0.05):
        rt.state.release_lock("evolve:slowish", "probe")
        time.sleep(0.02)
    manual = evolver.run(slow_job("manual"))
    waiting = evolver.run(slow_job("call"))  # waits for the first, then takes what it made
    first.join(60)
    assert reports["first"].status == "evolved" and reports["first"].version == "1.1.0"
    assert manual.status == "locked" and "another evolution of slowish is running" in manual.message
    assert waiting.status == "reused" and waiting.version == "1.1.0"
    assert [r.promoted_version for r in records] == ["1.1.0"]
    events = [e.event for e in rt.evolution.changelog("slowish")]
    assert events.count("promoted") == 1 and "locked" in events
    evolved = rt.settings.data_dir / "evolved" / "slowish_v1_1_0"
    assert (evolved / "tool.yaml").is_file() and (evolved / "tool.py").is_file()
    assert yaml.safe_load((evolved / "tool.yaml").read_text())["timeout_s"] == 1.2
    assert rt.state.stats(["slowish@1.1.0"])["slowish@1.1.0"].quality == rt.state.stats(["slowish@1.0.0"])["slowish@1.0.0"].quality


def test_a_longer_timeout_from_an_evolution_survives_fast_usual_runs(rt: Runtime) -> None:
    """0.3 s -> 1.2 s for inputs that need it; eight fast calls after, the plan still gives the
    version its 1.2 s (p95 x 1.2 of 10 ms runs would be the 0.5 s floor, the evolution undone)."""
    report = evolve(rt, slow_call(6))
    assert (report.status, report.version) == ("evolved", "1.1.0")
    for key in ("slowish@1.0.0", "slowish@1.1.0"):
        for n in range(8):
            rt.state.record_run(key, 10.0, True, threshold=5, cooldown_s=60.0, attempt_id=f"{key}:{n}")
    timeouts = {c.key: c.timeout_s for c in rt.selector.plan(CallRequest(scenario="use slowish", namespace="slowish")).candidates}
    assert timeouts == {"slowish@1.1.0": 1.2, "slowish@1.0.0": 0.5}


def test_a_job_delivered_again_takes_over_the_lock_its_killed_run_held(rt: Runtime) -> None:
    """The evolver's pool process was killed mid-evolution: the broker gives the job back at once,
    while the lock and the staging of the dead run are still there."""
    evolver = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, sandbox=SlowSandbox(pause_s=2.6))
    job = slow_job("call")
    assert rt.state.acquire_lock("evolve:slowish", job.job_id, rt.settings.evolution_time_limit_s)
    (rt.settings.data_dir / "evolving" / job.job_id / "0").mkdir(parents=True)
    assert evolver.run(slow_job("manual")).status == "locked"  # another job still finds it locked
    started = time.monotonic()
    again = evolver.run(job)
    assert time.monotonic() - started < rt.settings.evolution_lock_wait_s  # not waiting behind itself
    assert (again.status, again.version) == ("evolved", "1.1.0"), again
    assert [c.outcome for c in again.candidates] == ["verified"]  # written over the dead run's staging
    assert rt.state.acquire_lock("evolve:slowish", "next", 1.0)  # and released when done


def test_quality_trigger_and_a_mutation_that_failed_before_is_not_tried_again(rt: Runtime) -> None:
    sent: list[EvolutionJob] = []
    fallback = FailureMark(attempt_id="f0", call_id="f0", tool="slowish", version="1.0.0", scenario="parse this csv",
                           error_class=FailureClass.timeout, input={"csv": "a,b"}, targeted=False)
    apply_failure(rt, fallback)  # tried as a fallback on another tool's job: not its input to fix
    for i in range(2):
        mark = FailureMark(attempt_id=f"q{i}", call_id=f"q{i}", tool="slowish", version="1.0.0", scenario="count slowly to fifty",
                           error_class=FailureClass.timeout, error_message="no result within 0.3s", input={"n": 50 + i})
        maybe_evolve_for_quality(rt, mark, apply_failure(rt, mark), sent.append)
    (job,) = sent  # the failure that took it under 0.92 (the next found it below already)
    assert job.trigger == "quality" and job.parent_version == "1.0.0" and "fell to 0.90" in job.reason
    assert [f.input for f in job.evidence.failures] == [{"n": 50}]  # remembered with its input

    records: list[EvolutionRecord] = []
    report = Evolver(rt.settings, rt.state, rt.evolution, records.append).run(job)
    assert report.status == "no_fix"  # 50 × 0.1 s does not fit even in the longer timeout
    assert [c.outcome for c in report.candidates] == ["failed"] and report.candidates[0].reason.startswith("replay:")
    apply_evolution_record(rt, records[0])

    again = build_job(rt, "manual", namespace="slowish")
    assert [(m.mutator, m.mutation) for m in again.evidence.failed_mutations] == [("timeout", "timeout_s 0.3s → 1.2s")]
    second = Evolver(rt.settings, rt.state, rt.evolution, records.append).run(again)
    assert [c.outcome for c in second.candidates] == ["skipped"]
    assert "failed before for a similar reason" in second.candidates[0].reason


def failed_call(namespace: str, value: dict[str, Any], error_class: FailureClass, message: str) -> CallPlan:
    """A call whose only attempt, the original version of `namespace`, failed on `value`."""
    request = CallRequest(scenario=f"use {namespace}", input=value, namespace=namespace)
    failed = ToolExecutionResult(attempt_id=f"a-{request.call_id}", call_id=request.call_id, tool=namespace, version="1.0.0",
                                 success=False, error_class=error_class, error_message=message)
    return CallPlan(request=request, candidates=[], attempts=[failed])


def slow_call(n: int) -> CallPlan:
    return failed_call("slowish", {"n": n}, FailureClass.timeout, "no result within 0.3s")


def evolve(rt: Runtime, plan: CallPlan, mutators: list[Mutator] | None = None) -> EvolutionReport:
    """Evolve for a failed call on the real sandbox, and remember its verdicts as the memory worker does."""
    records: list[EvolutionRecord] = []
    report = Evolver(rt.settings, rt.state, rt.evolution, records.append, mutators=mutators).run(build_job(rt, "call", plan=plan))
    apply_evolution_record(rt, records[0])
    return report


def test_a_candidate_the_full_disk_kept_from_being_written_is_tried_again_once_it_has_room(
        rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 59d M1: with FITTEST_DATA_DIR full, the one mutation that fixes a slow tool was recorded as
    failed ("static: cannot write the candidate: ... No space left on device"), and skipped as failed
    before by every later evolution, the disk long mended. The machine's failure is no mutation's."""
    import errno

    from workers import evolver

    written = evolver.write_version

    def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(evolver, "write_version", disk_full)
    first = evolve(rt, slow_call(3))
    assert [c.outcome for c in first.candidates] == ["failed"], first.candidates
    assert first.candidates[0].reason.startswith("the candidate could not be written under FITTEST_DATA_DIR: OSError: ")
    assert "0 candidate(s) failed verification, 1 not written: the candidate could not be written" in first.message, first.message
    monkeypatch.setattr(evolver, "write_version", written)  # room again
    again = evolve(rt, slow_call(3))
    assert again.status == "evolved" and [c.outcome for c in again.candidates] == ["verified"], again.candidates


LAGGING = """import os, time
def run(value):
    if os.path.exists(value["backend"]):  # its backend is slow while this file is there
        time.sleep(value["n"] / 10)
    return {"n": value["n"]}
"""


def test_a_mutation_that_failed_on_an_input_is_skipped_until_the_version_succeeds_on_that_input(rt: Runtime, tmp_path: Path) -> None:
    """QA onboarding M2: a longer timeout that failed on one input of a tool that hangs was made and
    verified again for each new failing input (4.6 s each, the failing call waiting), as the job
    carried only its call's input and the one that failed the mutation was never asked again."""
    slow = tmp_path / "backend-slow"
    slow.touch()
    write_tool(Path(rt.settings.tools_dir), "lagging", LAGGING, timeout_s=0.3)

    def lagging_call(n: int) -> CallPlan:
        return failed_call("lagging", {"n": n, "backend": str(slow)}, FailureClass.timeout, "no result within 0.3s")

    began = time.time()
    hangs = evolve(rt, lagging_call(20))  # 2 s: more than even the longer timeout
    assert [(c.mutation, c.outcome) for c in hangs.candidates] == [("timeout_s 0.3s → 1.2s", "failed")]
    assert hangs.candidates[0].reason.startswith('replay: failing input {"n": 20, ') and "still fails: timeout" in hangs.candidates[0].reason
    again = evolve(rt, lagging_call(20))
    assert [c.outcome for c in again.candidates] == ["skipped"] and "failed before for a similar reason" in again.candidates[0].reason
    other = evolve(rt, lagging_call(6))  # another input, while {"n": 20} has not succeeded since
    assert [c.outcome for c in other.candidates] == ["skipped"], other.candidates
    slow.unlink()  # the backend is fast again, and a call succeeds on the input that failed the mutation
    done = ToolExecutionResult(attempt_id="ok20", call_id="ok20", tool="lagging", version="1.0.0", success=True, result={"n": 20})
    apply_outcome(rt, OutcomeRecord(call_id="ok20", scenario="use lagging", attempts=[done], input={"n": 20, "backend": str(slow)}))
    tried = evolve(rt, lagging_call(6))
    assert tried.status == "evolved" and tried.mutation == "timeout_s 0.3s → 1.2s" and tried.version == "1.1.0", tried.candidates
    # Only the candidate installed names a version in the changelog: the others were written as
    # 1.1.0 too, which none of them became.
    # The third call's skip and no_fix repeated the second's, and are not logged again (QA recheck N5).
    lines = [(e.event, e.version, e.parent) for e in rt.evolution.changelog("lagging")]
    assert lines == [("failed", None, "1.0.0"), ("no_fix", None, "1.0.0"), ("skipped", None, "1.0.0"), ("no_fix", None, "1.0.0"),
                     ("verified", "1.1.0", "1.0.0"), ("promoted", "1.1.0", "1.0.0")], lines
    # the skip's line leaves out the similarity, which moves with each call's failure (QA evolution M1)
    assert rt.evolution.changelog("lagging")[2].reason.startswith('failed before for a similar reason: replay: failing input {"n": 20, ')
    # a verdict's line is dated when it came: after the replay's 1.2 s timeout (QA 49 recheck N6: when it began)
    assert rt.evolution.changelog("lagging")[0].time >= began + 1.2


LEDGER = """import time
def run(value):
    with open(value["path"], "a") as f:
        f.write(str(value["id"]) + "\\n")
    time.sleep(value.get("ms", 0) / 1000)
    return {"id": value["id"]}
"""


@pytest.mark.parametrize("side_effects", [False, True])
def test_a_tool_with_side_effects_is_verified_without_running_real_calls_again(rt: Runtime, tmp_path: Path,
                                                                              side_effects: bool) -> None:
    """QA Q: a tool that appends to a ledger, evolved after one slow run, wrote five earlier calls'
    events twice more (the parent reproduced them, the candidate replayed them)."""
    real, safe = tmp_path / "events.log", tmp_path / "test-events.log"
    write_tool(Path(rt.settings.tools_dir), "ledger", LEDGER, timeout_s=0.3, side_effects=side_effects,
               test_cases=[{"input": {"path": str(safe), "id": 0}, "expect": {"id": 0}}])
    for i in range(3):  # three real calls that succeeded (their events are in the real ledger already)
        done = ToolExecutionResult(attempt_id=f"l{i}", call_id=f"l{i}", tool="ledger", version="1.0.0", success=True,
                                   result={"id": i})
        apply_outcome(rt, OutcomeRecord(call_id=f"l{i}", scenario="record an event", attempts=[done],
                                        input={"path": str(real), "id": i}))
    report = evolve(rt, failed_call("ledger", {"path": str(real), "id": 9, "ms": 400}, FailureClass.timeout,
                                    "no result within 0.3s"))
    assert report.status == "evolved", report
    replayed = sorted(real.read_text().split()) if real.exists() else []
    if side_effects:
        assert replayed == []  # no real call ran again
        replay = next(r for r in report.candidates[0].stages if r.stage == "replay")
        assert replay.checked == 0 and "side_effects: true" in replay.problems[0]
        assert safe.read_text().split() == ["0"]  # its test case ran
    else:
        assert "9" in replayed and "0" in replayed  # the failing input and the earlier calls ran again


class OperatorMeanwhile:
    """The default mutators, with an operator's `fittest promote slowish 1.0.5` while they work."""

    def __init__(self, rt: Runtime, mutator: Mutator) -> None:
        self.rt, self.inner = rt, mutator
        self.name, self.handles, self.cost = mutator.name, mutator.handles, mutator.cost

    def propose(self, ctx: Any) -> Any:
        promote_by_hand(self.rt.state, self.rt.evolution, self.rt.registry, "slowish", "1.0.5")
        return self.inner.propose(ctx)


def test_an_operators_promote_during_an_evolution_is_not_overwritten_by_its_end(rt: Runtime) -> None:
    """QA P: the evolution's end put its version on trial over a version promoted by hand meanwhile."""
    given_by_a_manifest(rt, "1.0.5")
    mutators, _ = load_mutators(mutator_config(rt.settings))
    report = evolve(rt, slow_call(6), [OperatorMeanwhile(rt, m) for m in mutators])
    assert report.status == "evolved" and report.version == "1.1.0"
    assert "is a fallback" in report.message and "fittest promote slowish 1.1.0" in report.message
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and (promotion.evolved_version, promotion.status) == ("1.0.5", "active")
    assert rt.registry.get("slowish@1.1.0") is not None  # installed and registered: a fallback, and promotable


def roll_back_by_hand(rt: Runtime) -> None:
    rollback(rt.state, rt.evolution, "slowish")


def roll_back_on_trial(rt: Runtime) -> None:
    for i in range(9):
        rt.state.record_successes([("slowish@1.0.0", f"ps{i}")])
    rt.state.mark_failure("slowish@1.0.0", "pf0", Severity.high)
    for i, ok in enumerate([True, False, True, False, False]):
        apply_outcome(rt, outcome(attempt("slowish@1.1.0", ok, f"w{i}")))


@pytest.mark.parametrize("roll_back", [roll_back_by_hand, roll_back_on_trial])
def test_a_rolled_back_version_is_not_made_again_for_a_similar_failure(rt: Runtime, roll_back: Any) -> None:
    made = evolve(rt, slow_call(6))
    assert made.status == "evolved" and made.version == "1.1.0"
    roll_back(rt)
    promotion = rt.state.promotion("slowish")
    assert promotion is not None and promotion.status == "rolled_back"
    again = evolve(rt, slow_call(7))  # a rollback is no failure on an input: any similar failure counts
    assert again.status == "no_fix" and [(c.mutation, c.outcome) for c in again.candidates] == [("timeout_s 0.3s → 1.2s", "skipped")]
    assert "1.1.0 rolled back: " in again.candidates[0].reason
    assert [e.event for e in rt.evolution.changelog("slowish")].count("promoted") == 1


def test_a_rewrite_is_known_by_its_code_not_by_the_words_of_the_reply(rt: Runtime) -> None:
    replies: list[str] = []
    mutator = CodeMutator(chat=lambda messages, deadline: replies.pop(0), model="test-model")

    def rewrite(summary: str, code: str) -> EvolutionReport:
        replies.append(f"{summary}\n```python\n{code}```\n")
        return evolve(rt, failed_call("mean", {"xs": []}, FailureClass.crash, "ZeroDivisionError: division by zero"), [mutator])

    wrong = rewrite("Fixed.", STILL_BUGGY)
    assert [c.outcome for c in wrong.candidates] == ["failed"] and "ZeroDivisionError" in wrong.candidates[0].reason
    reworded = rewrite("Made the mean robust.", STILL_BUGGY)
    assert [c.outcome for c in reworded.candidates] == ["skipped"]
    right = rewrite("Fixed.", FIXED)
    assert right.status == "evolved" and right.mutation == "tool.py rewritten by test-model: Fixed.", right.candidates


def test_a_call_that_held_back_the_served_version_evolves_it_instead_of_retrying_with_it(rt: Runtime) -> None:
    """QA O: 12 prime_count calls at once; the version on trial had its breaker opened by the others,
    so a call served its parent, which timed out, and its evolution answered "reused: the call retries
    with it" — but the retry held the version back again and ran only other tools (three calls failed
    after ten attempts). The version the call held back is the one to mend."""
    made = evolve(rt, slow_call(6))  # 0.3 s -> 1.2 s, on trial
    assert (made.status, made.version) == ("evolved", "1.1.0")
    plan = slow_call(20)  # 2 s: past 1.2 s as well; the call ran the parent, 1.1.0's breaker was open
    plan.held_back.append("slowish@1.1.0")
    records: list[EvolutionRecord] = []
    report = Evolver(rt.settings, rt.state, rt.evolution, records.append).run(build_job(rt, "call", plan=plan))
    assert (report.status, report.parent, report.version) == ("evolved", "slowish@1.1.0", "1.2.0"), report
    assert report.mutation == "timeout_s 1.2s → 4.8s"
    promotion = rt.state.promotion("slowish")
    # It interrupts 1.1.0's trial, and is tried against what that trial was against (QA 65b)
    assert promotion is not None and (promotion.evolved_version, promotion.parent_version) == ("1.2.0", "1.0.0")
    assert promotion.resumes is not None and promotion.resumes.evolved_version == "1.1.0"


def test_a_fallback_failure_that_takes_a_version_under_the_threshold_starts_no_evolution(rt: Runtime) -> None:
    """QA O: word_count calls with a key it did not read fell back to inventory_api, temp_convert...,
    whose refusals took them under the threshold: each got a quality-triggered evolution, and the
    description mutator put versions of them on trial though they had failed no job of their own."""
    sent: list[EvolutionJob] = []
    for i in range(2):
        fallback = FailureMark(attempt_id=f"f{i}", call_id=f"f{i}", tool="slowish", version="1.0.0", scenario="count the words",
                               error_class=FailureClass.timeout, input={"content": "a b"}, targeted=False)
        maybe_evolve_for_quality(rt, fallback, apply_failure(rt, fallback), sent.append)
    assert rt.state.stats(["slowish@1.0.0"])["slowish@1.0.0"].quality == 0.9  # demoted all the same
    assert sent == []


def test_the_namespace_lock_is_a_lease_renewed_while_the_evolution_runs(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA O: the evolver killed with SIGKILL mid-evolution left `evolve:median` held for 960 s (the
    time limit + 120 s); every failed median call waited 60 s in the evolver's only slot and ended
    "another evolution of median is running" while none was, and a legacy_parser evolution waited
    behind one of them. Held as a short lease renewed while the evolution runs, a dead run's lock
    goes within the lease, and a live one keeps it however long it takes."""
    import workers.evolver as evolver_module

    from workers.state.redis import RedisStateStore

    monkeypatch.setattr(evolver_module, "LOCK_LEASE_S", 1.0, raising=False)  # renewed every 0.33 s
    assert isinstance(rt.state, RedisStateStore)
    redis, key = rt.state.client, rt.state._k("lock", "evolve:slowish")
    evolver = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, sandbox=SlowSandbox(pause_s=2.6))
    job = slow_job("call")
    reports: list[EvolutionReport] = []
    running = threading.Thread(target=lambda: reports.append(evolver.run(job)))
    running.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and redis.get(key) is None:
        time.sleep(0.02)
    ttls, owners = [], []
    for _ in range(10):  # 2 s: twice the lease, within the sandbox's 2.6 s static stage
        ttls.append(redis.pttl(key))
        owners.append(redis.get(key))
        time.sleep(0.2)
    running.join(60)
    assert all(0 < ttl <= 1000 for ttl in ttls), ttls
    assert {o.decode() if isinstance(o, bytes) else o for o in owners} == {job.job_id}  # renewed past the lease
    assert reports and reports[0].status == "evolved"
    assert redis.get(key) is None  # released when done


def test_a_no_fix_for_a_crash_says_no_mutator_answers_it_without_the_code_mutator(rt: Runtime) -> None:
    """QA O: legacy_parser (crashes) and report_fmt (null output) ended "no mutator could propose a
    version" with only the description mutator's note; nothing said that only the code mutator
    answers such failures, and that it is off without FITTEST_LLM_URL."""
    assert rt.settings.llm_url is None
    records: list[EvolutionRecord] = []
    plan = failed_call("mean", {"xs": []}, FailureClass.crash, "ZeroDivisionError: division by zero")
    report = Evolver(rt.settings, rt.state, rt.evolution, records.append).run(build_job(rt, "call", plan=plan))
    assert report.status == "no_fix"
    assert "crash: no mutator answers this failure class (the code mutator, which rewrites a tool, is off: FITTEST_LLM_URL is unset)" in report.notes
    assert "FITTEST_LLM_URL is unset" in (rt.evolution.changelog("mean")[-1].reason or "")


def test_a_failure_no_mutator_answers_is_told_without_an_evolution_and_logged_once_while_nothing_changes(rt: Runtime) -> None:
    """QA onboarding M2: a tool that crashes now and then, with the code mutator off, got 15
    identical no_fix changelog entries in 7 minutes, each failed call a round trip through the
    memory worker and the evolver for the same answer."""
    evolver = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None)
    unanswered = "crash: no mutator answers this failure class (the code mutator, which rewrites a tool, is off: FITTEST_LLM_URL is unset)"
    for xs in ([], [0]):
        report = evolver.without_evolution(failed_call("mean", {"xs": xs}, FailureClass.crash, "ZeroDivisionError: division by zero"))
        assert report is not None and (report.status, report.parent) == ("no_fix", "mean@1.0.0")
        assert report.message == "no mutator could propose a version of mean@1.0.0" and unanswered in report.notes
    assert [e.event for e in rt.evolution.changelog("mean")] == ["no_fix"]  # once, however many calls say it
    # the evolver's no_fix (its notes say more: what each mutator found) is logged once too
    plan = failed_call("mean", {"xs": []}, FailureClass.crash, "ZeroDivisionError: division by zero")
    assert evolver.run(build_job(rt, "call", plan=plan)).status == "no_fix"
    assert evolver.run(build_job(rt, "call", plan=plan)).status == "no_fix"
    assert [e.event for e in rt.evolution.changelog("mean")] == ["no_fix", "no_fix"]
    rt.evolution.log(ChangelogEntry(namespace="mean", event="locked", reason="something else happened"))
    assert evolver.without_evolution(plan) is not None
    assert [e.event for e in rt.evolution.changelog("mean")] == ["no_fix", "no_fix", "locked", "no_fix"]
    # a class a mutator answers, or a version that is not the one served, goes to the evolver
    assert evolver.without_evolution(slow_call(6)) is None
    fresh_child_on_trial(rt)
    assert evolver.without_evolution(plan) is None  # mean@1.1.0 is served: the evolver retries with it


def test_the_evolution_of_a_version_held_back_says_it_did_not_run_in_the_call(rt: Runtime) -> None:
    """QA evolution: a call whose tool was held back by its breaker evolved it and said only "no
    mutator could propose a version of title_case@1.0.0", as if it had failed in the call."""
    plan = failed_call("slowish", {"xs": [1]}, FailureClass.bad_input, "KeyError: 'n'")
    plan = plan.model_copy(update={"request": CallRequest(scenario="the mean of these numbers", input={"xs": [1]}),
                                   "held_back": ["mean@1.0.0"]})
    report = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None).run(build_job(rt, "call", plan=plan))
    assert report.namespace == "mean"
    assert "mean@1.0.0 did not run in this call (held back by its circuit breaker): evolved from 0 remembered failures of its own" in report.notes


def test_a_job_delivered_again_that_finds_its_fix_made_removes_its_killed_run_staging(rt: Runtime) -> None:
    """QA O: the evolver was killed mid-evolution; 16 minutes later its job came back, found the
    version another call had made meanwhile ("reused"), and left data_dir/evolving/JOB behind."""
    job = slow_job("call")
    staging = rt.settings.data_dir / "evolving" / job.job_id / "0"
    staging.mkdir(parents=True)
    (staging / "tool.yaml").write_text("name: slowish\n")
    rt.state.promote(Promotion(namespace="slowish", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0"))
    report = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, sandbox=SlowSandbox()).run(job)
    assert report.status == "reused"
    assert not (rt.settings.data_dir / "evolving" / job.job_id).exists()


def test_a_success_a_person_judged_wrong_is_no_example_for_an_evolution(rt: Runtime) -> None:
    """QA U: a word_stats call judged wrong (`feedback add ... --call`) became one of the examples
    of the version evolved next, and a replayed success whose answer a candidate must keep."""
    from workers.evolution_jobs import apply_evolution_outcomes
    from workers.feedback_store import JudgedCall, record_tool_feedback

    apply_evolution_outcomes(rt, [outcome(attempt("slowish@1.0.0", True, "right")),
                                  outcome(attempt("slowish@1.0.0", True, "wrong")).model_copy(update={"scenario": "count wrongly"})])
    assert sorted(s.call_id for s in build_job(rt, "manual", namespace="slowish").evidence.successes) == ["right", "wrong"]
    record_tool_feedback(rt, "slowish", None, None, "negative", "not what I asked",
                         call=JudgedCall(call_id="wrong", ran=["slowish@1.0.0"], scenario="count wrongly"))
    successes = build_job(rt, "manual", namespace="slowish").evidence.successes
    assert [(s.call_id, s.scenario) for s in successes] == [("right", "count slowly")]
    record_tool_feedback(rt, "slowish", None, None, "positive", "it was right after all",
                         call=JudgedCall(call_id="wrong", ran=["slowish@1.0.0"], scenario="count wrongly"))
    assert len(build_job(rt, "manual", namespace="slowish").evidence.successes) == 2  # judged right again: an example again


def test_rolling_back_a_version_promoted_by_hand_during_a_trial_puts_the_trial_back(rt: Runtime) -> None:
    """QA U: hash_text 2.0.0 (a manifest's) on trial, `fittest promote hash_text 1.0.0`, then
    `fittest rollback hash_text`: 2.0.0 then served all of 12 calls, where a trial serves a share,
    and its trial was never decided (5 successes of 5 needed), as only a promotion on trial is."""
    from workers.metrics import evolution_events
    from evolution.promotions import conclude_trial

    given_by_a_manifest(rt, "2.0.0")
    (trial,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    assert (trial.evolved_version, trial.status) == ("2.0.0", "on_trial")
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.0.0")
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) == "1.0.0"
    rolled = rollback(rt.state, rt.evolution, "slowish")
    assert rolled.evolved_version == "1.0.0" and rolled.status == "rolled_back"
    current = rt.state.promotion("slowish")
    assert current is not None and (current.evolved_version, current.status) == ("2.0.0", "on_trial")
    assert served_version(current, "any-call", after_evolution=False, share=0.0) is None  # the original serves the rest
    assert rt.evolution.changelog("slowish")[-1].reason.startswith("on trial again: slowish@1.0.0, promoted by hand")
    assert [p.evolved_version for p in evolution_events(rt.state.promotion_history("slowish"))[0]] == ["2.0.0"]  # one trial
    assert conclude_trial(rt.state, rt.evolution, current, "activate", "5/5 successes on trial")  # decided, as any trial
    decided = rt.state.promotion("slowish")
    assert decided is not None and (decided.evolved_version, decided.status) == ("2.0.0", "active")


def test_each_rollback_undoes_one_promote_and_a_promote_of_the_version_on_trial_decides_its_trial(rt: Runtime) -> None:
    """QA V: 1.1.0 on trial, `fittest promote sort_numbers 1.0.0`, `promote 1.1.0`, `rollback`
    said "1.1.0 rolled back; 1.1.0 is on trial again", and 1.1.0 went on serving a quarter of the calls."""
    given_by_a_manifest(rt, "2.0.0")
    (trial,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.0.0")
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "2.0.0")
    rolled = rollback(rt.state, rt.evolution, "slowish")
    assert rolled.evolved_version == "2.0.0" and rolled.resumes is not None
    current = rt.state.promotion("slowish")
    assert current is not None and (current.evolved_version, current.status, current.by) == ("1.0.0", "active", "operator")
    assert served_version(current, "any-call", after_evolution=False, share=1.0) == "1.0.0"  # every call, no trial share
    # QA learning F1: 2.0.0, rolled back, went on running as 1.0.0's fallback
    assert fallback_version(current) is None
    assert withdrawn_versions(rt.state.promotion_history("slowish"), current) == {"2.0.0"}
    assert [r.rolled_back for r in tool_rows(rt.registry.versions("slowish"), rt.state, 5) if r.version == "2.0.0"] == [True]
    rollback(rt.state, rt.evolution, "slowish")  # undoes the first promote: the trial it interrupted goes on
    current = rt.state.promotion("slowish")
    assert current is not None and (current.evolved_version, current.status) == ("2.0.0", "on_trial")

    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "2.0.0")  # the trial's own version: decided by hand
    rolled = rollback(rt.state, rt.evolution, "slowish")
    assert rolled.resumes is None
    current = rt.state.promotion("slowish")
    assert current is not None and (current.evolved_version, current.status) == ("2.0.0", "rolled_back")
    assert served_version(current, "any-call", after_evolution=False, share=1.0) is None  # the original, on every call


def test_a_call_that_failed_on_a_version_rolled_back_evolves_nothing_and_the_version_stays_out(rt: Runtime) -> None:
    """QA evolution H1: a call that failed on a version rolled back to the original (pinned to it,
    or running it when the operator rolled it back) evolved it, and its child went on trial against
    it: the version rolled back served 75 % of the calls again."""
    given_by_a_manifest(rt, "2.0.0")
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "2.0.0")

    def failed_on_2(pinned: str | None) -> CallPlan:
        request = CallRequest(scenario="count slowly", input={"n": 5}, namespace="slowish", version=pinned)
        attempt = ToolExecutionResult(attempt_id=f"a-{request.call_id}", call_id=request.call_id, tool="slowish",
                                      version="2.0.0", success=False, error_class=FailureClass.timeout,
                                      error_message="no result within 0.3s")
        return CallPlan(request=request, candidates=[], attempts=[attempt])

    running = build_job(rt, "call", plan=failed_on_2(None))  # its evolution prepared while 2.0.0 served
    rollback(rt.state, rt.evolution, "slowish")
    evolver = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, registry=lambda: rt.registry)
    reused = evolver.run(running)
    assert (reused.status, reused.version) == ("reused", "1.0.0"), reused
    assert reused.message == "slowish@1.0.0 serves the calls not pinned, and was not tried; the call retries with it"
    pinned = evolver.run(build_job(rt, "call", plan=failed_on_2("2.0.0")))
    assert (pinned.status, pinned.version) == ("pinned", "1.0.0"), pinned
    assert pinned.message.startswith("this call is pinned to slowish@2.0.0, and slowish@1.0.0 serves the calls not pinned")
    # QA recheck N1: the call fell back to 1.0.0, which failed too: 1.0.0 is the version to mend
    both = failed_on_2(None)
    both.attempts.append(both.attempts[0].model_copy(update={"attempt_id": "a-1.0.0", "version": "1.0.0"}))
    mended = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, mutators=[],
                     registry=lambda: rt.registry).run(build_job(rt, "call", plan=both))
    assert (mended.status, mended.parent) == ("no_fix", "slowish@1.0.0"), mended
    current = rt.state.promotion("slowish")
    assert current is not None and (current.evolved_version, current.status) == ("2.0.0", "rolled_back")  # nothing on trial
    assert withdrawn_versions(rt.state.promotion_history("slowish"), current) == {"2.0.0"}


def test_rolling_back_a_promote_of_the_original_lets_a_new_manifest_version_go_on_trial(rt: Runtime) -> None:
    """QA V: `fittest promote word_stats 1.0.0` (the original, nothing else promoted) held the
    namespace for good: a manifest's 1.1.0 never went on trial, and `fittest rollback` said there
    was no promoted version to roll back."""
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.0.0")
    given_by_a_manifest(rt, "1.1.0")
    assert trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"]) == []  # the promote decides
    rollback(rt.state, rt.evolution, "slowish")
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) is None
    (trial,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    assert (trial.evolved_version, trial.parent_version, trial.status) == ("1.1.0", "1.0.0", "on_trial")


def mean_history(rt: Runtime) -> None:
    """mean@1.0.0 served three calls and crashed on an empty list, all remembered."""
    from workers.evolution_jobs import apply_evolution_outcomes

    for i, xs in enumerate([[1, 2, 3], [2, 4], [5]]):
        done = ToolExecutionResult(attempt_id=f"m{i}", call_id=f"m{i}", tool="mean", version="1.0.0", success=True,
                                   result={"mean": sum(xs) / len(xs)})
        apply_evolution_outcomes(rt, [OutcomeRecord(call_id=f"m{i}", scenario="the mean of these numbers", attempts=[done],
                                                    input={"xs": xs})])
    apply_failure(rt, FailureMark(attempt_id="mf", call_id="mf", tool="mean", version="1.0.0", scenario="the mean of nothing",
                                  error_class=FailureClass.crash, error_message="ZeroDivisionError: division by zero",
                                  input={"xs": []}))


def fresh_child_on_trial(rt: Runtime, version: str = "1.1.0") -> None:
    """A version of mean made a moment ago (its parent's code, as a new description's), on trial:
    no call has run it yet."""
    from selection.manifest import load_manifest

    folder = rt.settings.data_dir / "evolved" / f"mean_v{version.replace('.', '_')}"
    folder.mkdir(parents=True)
    (folder / "tool.py").write_text(BUGGY)
    doc = yaml.safe_load((Path(rt.settings.tools_dir) / "mean" / "tool.yaml").read_text())
    (folder / "tool.yaml").write_text(yaml.safe_dump({**doc, "version": version, "parent_version": "1.0.0"}))
    if rt.registry.get(f"mean@{version}") is None:  # read already, when the registry first loaded
        rt.registry.add(load_manifest(folder / "tool.yaml"))
    rt.state.promote(Promotion(namespace="mean", evolved_version=version, original_version="1.0.0", parent_version="1.0.0"))


def test_evolving_a_version_with_no_history_replays_its_parents_failing_and_successful_inputs(rt: Runtime) -> None:
    """QA evolution F1: `fittest evolve` of a version made a moment before replayed nothing ("replay ✓
    checked 0"), and a rewrite that still crashed on the input that had failed went on trial."""
    mean_history(rt)
    fresh_child_on_trial(rt)
    job = build_job(rt, "manual", namespace="mean")
    assert job.parent_version == "1.1.0"
    assert [f.input for f in job.evidence.failures] == [{"xs": []}]
    assert sorted(s.input["xs"] for s in job.evidence.successes if s.input) == [[1, 2, 3], [2, 4], [5]]
    replies = [f"Fixed.\n```python\n{STILL_BUGGY}```\n"]
    mutator = CodeMutator(chat=lambda messages, deadline: replies.pop(0), model="test-model")
    report = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, mutators=[mutator]).run(job)
    assert report.status == "no_fix", report
    (candidate,) = report.candidates
    assert candidate.outcome == "failed" and 'failing input {"xs": []} still fails' in candidate.reason, candidate.reason


def test_a_crashing_tool_evolved_by_hand_is_rewritten_not_re_described(rt: Runtime) -> None:
    """QA evolution F3: `fittest evolve` (and the quality trigger) of a tool that crashes put a new
    description, the same code, on trial, and the code mutator was never asked."""
    mean_history(rt)
    mutators, _ = load_mutators(mutator_config(rt.settings))
    replies = [f"Fixed.\n```python\n{FIXED}```\n"]
    rewrite = CodeMutator(chat=lambda messages, deadline: replies.pop(0), model="test-model")
    job = build_job(rt, "manual", namespace="mean")
    report = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, mutators=[*mutators, rewrite]).run(job)
    assert (report.status, report.mutation) == ("evolved", "tool.py rewritten by test-model: Fixed."), report
    assert [c.mutator for c in report.candidates] == ["code"]
    assert "describe: a description cannot make a failing input succeed" in report.notes


def test_a_tool_that_failed_on_an_input_too_large_to_keep_is_not_re_described_by_hand(rt: Runtime) -> None:
    """QA README M2: sort_numbers timed out on a 600 KB list (its documented failure), which is
    remembered without its input, and `fittest evolve` put a new description, the same code, on
    trial for a quarter of the calls."""
    from workers.evolution_jobs import apply_evolution_outcomes

    for i, xs in enumerate([[1, 2, 3], [2, 4], [5]]):
        done = ToolExecutionResult(attempt_id=f"m{i}", call_id=f"m{i}", tool="mean", version="1.0.0", success=True,
                                   result={"mean": sum(xs) / len(xs)})
        apply_evolution_outcomes(rt, [OutcomeRecord(call_id=f"m{i}", scenario="the mean of these numbers", attempts=[done],
                                                    input={"xs": xs})])
    huge = {"xs": [0.5] * 30_000}  # beyond what a failure keeps of its input
    apply_failure(rt, FailureMark(attempt_id="mh", call_id="mh", tool="mean", version="1.0.0", scenario="the mean of many numbers",
                                  error_class=FailureClass.timeout, error_message="no result within 5s", input=huge))
    job = build_job(rt, "manual", namespace="mean")
    assert (job.evidence.failures, job.evidence.unkept_failures) == ([], 1)
    mutators, _ = load_mutators(mutator_config(rt.settings))
    report = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None, mutators=mutators).run(job)
    assert "describe" not in [c.mutator for c in report.candidates], report
    assert "describe: a description cannot make a failing input succeed" in report.notes, report.notes
    # ...and says why nothing else was tried (QA 49: only "no mutator could propose").
    assert ("1 failure of mean@1.0.0 had an input too large to keep (over 16 KB): no mutator is given it, as no replay "
            "could check a fix") in report.notes, report.notes


def test_a_rollback_serves_what_served_before_when_a_lower_manifest_version_came_meanwhile(rt: Runtime, monkeypatch) -> None:
    """QA evolution F11: 2.0.0 won its trial against 1.0.0; 0.9.0 was dropped in later, and `fittest
    rollback` said "1.0.0 is served again" while every call was served by 0.9.0, which had never run."""
    from evolution.promotions import conclude_trial

    given_by_a_manifest(rt, "2.0.0")
    (trial,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    assert conclude_trial(rt.state, rt.evolution, trial, "activate", "5/5 successes on trial")
    given_by_a_manifest(rt, "0.9.0")
    assert trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"], arrived={"slowish@0.9.0"}) == []
    back = rollback(rt.state, rt.evolution, "slowish")
    assert (back.evolved_version, back.parent_version or back.original_version) == ("2.0.0", "1.0.0")  # what the CLI prints
    plan = rt.selector.plan(CallRequest(scenario="use slowish", namespace="slowish"))
    assert plan.candidates[0].key == "slowish@1.0.0", [c.key for c in plan.candidates]
    assert build_job(rt, "manual", namespace="slowish").parent_version == "1.0.0"  # and what `fittest evolve` evolves
    from workers.cli import evolution as cli

    monkeypatch.setattr(cli, "_stores", lambda: (rt.registry, rt.state, rt.evolution))
    shown = {r.version: (r.status, r.served) for r in cli.lineage("slowish").versions}
    # and what `fittest show` calls them (QA recheck N8: 0.9.0 "original", 1.0.0 a new version that waits)
    assert shown["1.0.0"] == ("original", True) and shown["0.9.0"] == ("new manifest version", False), shown


def test_a_version_evolved_from_one_on_trial_that_rolls_back_lets_the_interrupted_trial_go_on(rt: Runtime) -> None:
    """QA evolution F4: 1.1.0 on trial was evolved into 1.2.0, which rolled back: 1.1.0 was then
    served on every call as "active", without having won its trial, without a changelog entry,
    and `fittest rollback` could not undo it."""
    from evolution.promotions import conclude_trial, promote_on_trial

    on_trial(rt, parent_successes=3, parent_failures=0)
    given_by_a_manifest(rt, "1.1.0")
    original = rt.registry.get("slowish@1.0.0")
    assert original is not None
    trial_of_1_1 = rt.state.promotion("slowish")
    child = original.model_copy(update={"version": "1.2.0", "parent_version": "1.1.0"})
    parent = original.model_copy(update={"version": "1.1.0", "parent_version": "1.0.0"})
    made = promote_on_trial(rt.state, rt.evolution, child, parent, "1.0.0", before=trial_of_1_1, reason="passed",
                            mutation="timeout_s 0.3s → 1.2s", job_id="j", trigger="manual")
    assert made is not None
    assert conclude_trial(rt.state, rt.evolution, made, "rollback", "0/5 successes on trial against the parent's rate of 1.00")
    current = rt.state.promotion("slowish")
    assert current is not None and (current.evolved_version, current.status, current.parent_version) == ("1.1.0", "on_trial", "1.0.0")
    entry = rt.evolution.changelog("slowish")[-1]
    assert (entry.event, entry.version) == ("promoted", "1.1.0") and entry.reason.startswith("on trial again: slowish@1.2.0")
    back = rollback(rt.state, rt.evolution, "slowish")  # and an operator can undo it
    assert back.evolved_version == "1.1.0"
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) is None


def test_a_version_evolved_by_hand_from_one_not_served_is_tried_against_the_one_served(rt: Runtime) -> None:
    """QA 50d: `fittest evolve NAME --version 1.0.0`, with 1.1.0 active, put the broken 1.0.0 back on
    the trial's other 75 % of the calls and 1.1.0 out of them, and a rollback then served 1.0.0."""
    from selection.models import Promotion
    from evolution.promotions import promote_on_trial

    original = rt.registry.get("slowish@1.0.0")
    assert original is not None
    active = Promotion(namespace="slowish", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0",
                       status="active")
    rt.state.promote(active)
    child = original.model_copy(update={"version": "1.2.0", "parent_version": "1.0.0"})
    made = promote_on_trial(rt.state, rt.evolution, child, original, "1.0.0", before=active, reason="by hand",
                            mutation="timeout_s 0.3s → 1.2s", job_id="j", trigger="manual")
    assert made is not None and (made.evolved_version, made.parent_version) == ("1.2.0", "1.1.0")
    served = {served_version(made, f"call-{i}", after_evolution=False, share=0.25) for i in range(40)}
    assert served == {"1.2.0", "1.1.0"}  # never the original it was evolved from
    entry = rt.evolution.changelog("slowish")[-1]
    assert entry.parent == "1.0.0" and "against slowish@1.1.0, which its namespace serves" in entry.reason
    # `fittest tools` names what it is tried against (review 51: "on trial against its parent")
    trial = [(r.on_trial, r.trial_against) for r in tool_rows([original, child], rt.state, 5) if r.version == "1.2.0"]
    assert trial == [(True, "1.1.0")]
    back = rollback(rt.state, rt.evolution, "slowish")
    assert back.evolved_version == "1.2.0"
    assert served_version(rt.state.promotion("slowish"), "any-call", after_evolution=False, share=1.0) == "1.1.0"


def test_a_tool_that_times_out_on_its_own_test_case_is_not_told_to_check_its_expect(rt: Runtime) -> None:
    """QA onboarding L2: a tool that hangs was told "fails its own test cases too (...: expected an
    output, the tool failed; timeout ...): ... check their expect in its manifest": the expect was
    right, and the tool broken. Only an output that does not match puts the expect in question."""
    manifest = Path(rt.settings.tools_dir) / "slowish" / "tool.yaml"
    doc = yaml.safe_load(manifest.read_text())
    manifest.write_text(yaml.safe_dump({**doc, "test_cases": [{"input": {"n": 50}, "expect": {"n": 50}}]}))  # right, 5 s
    report = evolve(rt, slow_call(6))
    assert [c.outcome for c in report.candidates] == ["failed"] and report.candidates[0].reason.startswith("tests:")
    (note,) = [n for n in report.notes if "its own test cases" in n]
    assert note.startswith(f"{report.parent} fails its own test cases too, giving no output (test case 1 ")
    assert "timeout" in note and "the tool itself fails on them, not their expect" in note
    assert "check their expect" not in " ".join(report.notes)


def test_a_mutation_that_failed_a_wrong_test_case_is_tried_again_once_the_test_case_is_fixed(rt: Runtime) -> None:
    """QA evolution F2: a wrong `expect` failed the longer timeout's "tests"; fixed in place (and with
    a version bump), the mutation was still skipped, "failed before for a similar reason"."""
    manifest = Path(rt.settings.tools_dir) / "slowish" / "tool.yaml"
    doc = yaml.safe_load(manifest.read_text())
    manifest.write_text(yaml.safe_dump({**doc, "test_cases": [{"input": {"n": 1}, "expect": {"n": 2}}]}))  # the author's mistake
    wrong = evolve(rt, slow_call(6))
    assert [c.outcome for c in wrong.candidates] == ["failed"] and wrong.candidates[0].reason.startswith("tests:")
    # ...and the author is told the tool fails that test case itself (nothing said so)
    assert any(n.startswith(f"{wrong.parent} fails its own test cases too (test case 1 ") and "check their expect" in n
               for n in wrong.notes), wrong.notes
    again = evolve(rt, slow_call(7))  # the same test cases: skipped, as before
    assert [c.outcome for c in again.candidates] == ["skipped"]
    manifest.write_text(yaml.safe_dump(doc))  # fixed
    fixed = evolve(rt, slow_call(4))  # 0.4 s under the 1.2 s: CI's loaded host took over 0.4 s more to run 0.8 s
    assert (fixed.status, fixed.mutation) == ("evolved", "timeout_s 0.3s → 1.2s"), fixed.candidates


def test_an_evolution_by_hand_does_not_make_again_the_version_its_namespace_serves(rt: Runtime) -> None:
    """QA 52c N5: `fittest evolve slowish --version 1.0.0`, with 1.1.0 (1.0.0's longer timeout)
    served, made 1.2.0 of the same longer timeout, and put it on trial against its twin."""
    first = evolve(rt, slow_call(4))
    assert (first.status, first.version, first.mutation) == ("evolved", "1.1.0", "timeout_s 0.3s → 1.2s")
    mark = FailureMark(attempt_id="m0", call_id="m0", tool="slowish", version="1.0.0", scenario="count slowly",
                       error_class=FailureClass.timeout, error_message="no result within 0.3s", input={"n": 4})
    apply_failure(rt, mark)
    records: list[EvolutionRecord] = []
    by_hand = Evolver(rt.settings, rt.state, rt.evolution, records.append).run(
        build_job(rt, "manual", namespace="slowish", version="1.0.0"))
    assert by_hand.status == "no_fix" and [c.outcome for c in by_hand.candidates] == ["skipped"], by_hand
    served = rt.state.promotion("slowish")
    assert served is not None and served.status == "on_trial"  # a new version shares the traffic first
    assert by_hand.candidates[0].reason == ("slowish@1.1.0, on trial in slowish, is this mutation of slowish@1.0.0 "
                                            "already"), by_hand.candidates[0]
    # ...and the headline says that, not "skipped as failed before" (QA 53a)
    assert by_hand.message.endswith("0 candidate(s) failed verification, 1 skipped: " + by_hand.candidates[0].reason), \
        by_hand.message
    served = rt.state.promotion("slowish")
    assert rt.registry.get("slowish@1.2.0") is None and served is not None and served.evolved_version == "1.1.0"
    # a rewrite whose prose repeats the served version's is no twin for that: its files may differ
    evolver = Evolver(rt.settings, rt.state, rt.evolution, records.append)
    job = build_job(rt, "manual", namespace="slowish", version="1.0.0")
    original = rt.registry.get("slowish@1.0.0")
    assert original is not None
    alike = CandidateVersion(mutator="timeout", mutation="timeout_s 0.3s → 1.2s", manifest=original, files={})
    assert evolver._served_twin(job, alike) == "slowish@1.1.0, on trial in slowish"
    rt.state.promote(served.model_copy(update={"status": "active"}))  # it proved itself
    assert evolver._served_twin(job, alike) == "slowish@1.1.0, which slowish serves"
    assert evolver._served_twin(job, alike.model_copy(update={"identity": "files 0f3a"})) is None
    # evolved from the version it serves, the same mutator makes a new version (a longer timeout still)
    from_served = Evolver(rt.settings, rt.state, rt.evolution, records.append).run(
        build_job(rt, "manual", namespace="slowish", version="1.1.0"))
    assert "skipped" not in [c.outcome for c in from_served.candidates], from_served


def test_an_evolution_of_a_tool_whose_module_does_not_parse_now_says_so(rt: Runtime) -> None:
    """QA live F10: its no_fix said "mean@1.0.0 is not registered", as if the tool had gone, while
    the workers served it as last loaded (its module saved half-edited)."""
    job = build_job(rt, "manual", namespace="mean")
    (rt.settings.tools_dir / "mean" / "tool.py").write_text("def run(value:\n")
    report = Evolver(rt.settings, rt.state, rt.evolution, lambda record: None).run(job)
    assert report.status == "no_fix" and report.message == (
        "mean@1.0.0 is not in the tools directory as the evolver reads it now (its manifest or its module refused, "
        "or gone: `fittest tools --refused`)"), report


# An upstream that refuses a request without a token, and says where it was asked and with what token.
ECHO = ('200 if self.headers.get("Authorization") else 401, '
        '{"path": self.path, "auth": self.headers.get("Authorization"), "x": body["x"]}')


def test_an_evolved_http_tool_is_verified_and_planned_with_its_manifest_as_it_now_reads(
        settings_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 55b M2 through the evolver and selection: the retry wrapper of an http tool that needs a
    bearer token passes its test case in the real sandbox (handed the token, which its files do not
    hold), and the plan the executor runs hands it the URL and token the manifest gives after an
    edit in place (before: the old URL with the revoked token)."""
    from selection.manifest import load_manifest
    from workers.runners import RunLimits, run_tool

    with upstream(ECHO) as base:
        tools = tmp_path / "tools"
        write_tool(tools, "authed", None, description="echo x through the gateway", timeout_s=10,
                   implementation={"kind": "http", "url": f"{base}/old", "headers": {"Authorization": "Bearer TOKEN-OLD"}},
                   test_cases=[{"input": {"x": 2}, "expect_keys": ["path", "auth", "x"]}])
        monkeypatch.setenv("FITTEST_TOOLS_DIR", str(tools))
        rt = Runtime(Settings())
        try:
            report = evolve(rt, failed_call("authed", {"x": 1}, FailureClass.unavailable, "HTTP 503"))
            assert (report.status, report.version) == ("evolved", "1.1.0"), report.message
            evolved_files = (rt.settings.data_dir / "evolved" / "authed_v1_1_0").rglob("*")
            assert not [p for p in evolved_files if p.is_file() and b"TOKEN-OLD" in p.read_bytes()]
            manifest_file = tools / "authed" / "tool.yaml"
            manifest_file.write_text(manifest_file.read_text().replace("/old", "/new").replace("TOKEN-OLD", "TOKEN-NEW"))
            rt.registry.replace(load_manifest(manifest_file), manifest_file)  # what the tools watch does
            plan = rt.selector.plan(CallRequest(scenario="use authed", namespace="authed", call_id="after-the-edit"))
            (evolved,) = [c for c in plan.candidates if c.key == "authed@1.1.0"]
            ran = run_tool(evolved.manifest, {"x": 3}, timeout_s=20, limits=RunLimits(), parent_http=evolved.parent_http)
            assert ran.output == {"path": "/new", "auth": "Bearer TOKEN-NEW", "x": 3}, ran.error_message
        finally:
            rt.state.clear()
            rt.close()


def test_a_trial_resumed_against_a_version_whose_promotion_by_hand_was_undone_shows_it_tried_against(rt: Runtime, monkeypatch) -> None:
    """QA 65c-B: 2.0.0 won its trial, 3.0.0 went on trial against it; `promote 1.0.0; promote 2.0.0;
    rollback; rollback` resumed that trial, 2.0.0 serving the other 75 %, and `show` called it rolled back."""
    from evolution.promotions import conclude_trial
    from workers.cli import evolution as cli

    given_by_a_manifest(rt, "2.0.0")
    (trial,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    assert conclude_trial(rt.state, rt.evolution, trial, "activate", "5/5 successes on trial")
    given_by_a_manifest(rt, "3.0.0")
    (later,) = trial_new_manifests(rt.state, rt.evolution, rt.registry, ["slowish"])
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "1.0.0")
    promote_by_hand(rt.state, rt.evolution, rt.registry, "slowish", "2.0.0")
    rollback(rt.state, rt.evolution, "slowish")
    rollback(rt.state, rt.evolution, "slowish")
    current = rt.state.promotion("slowish")
    assert current is not None and (current.evolved_version, current.status, current.parent_version) == ("3.0.0", "on_trial", "2.0.0")
    monkeypatch.setattr(cli, "_stores", lambda: (rt.registry, rt.state, rt.evolution))
    shown = {r.version: r.status for r in cli.lineage("slowish").versions}
    assert shown["2.0.0"] == "tried against" and shown["3.0.0"] == "on_trial", shown

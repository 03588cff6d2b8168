"""A candidate whose circuit breaker opened after its call was planned is passed over at its turn,
and `max_attempts` still counts the attempts that ran (the executor's side; the pipeline test is in
tests/integration/test_reliability_sandbox.py)."""

from __future__ import annotations

from selection.call_endings import effect_unknown, failed_change, input_refused_message, kept_to_the_change
from selection.manifest import ToolManifest
from selection.models import CallPlan, CallRequest, Candidate, FailureClass, ToolExecutionResult
from tests.fakes_state import InMemoryStateStore
from workers.tasks.execution import last_index, next_to_run


def plan_of(*names: str, max_attempts: int = 5) -> CallPlan:
    candidates = [Candidate(key=f"{n}@1.0.0", score=1.0, manifest=ToolManifest(
        name=n, description=n, implementation={"kind": "http", "url": "http://x"})) for n in names]
    return CallPlan(request=CallRequest(scenario="x", max_attempts=max_attempts), candidates=candidates)


def open_breaker(state: InMemoryStateStore, key: str) -> None:
    for _ in range(3):
        state.record_run(key, 1.0, False, threshold=3, cooldown_s=60)


def test_an_open_breaker_is_passed_over_and_named() -> None:
    state = InMemoryStateStore()
    plan = plan_of("a", "b", "c")
    open_breaker(state, "a@1.0.0")
    open_breaker(state, "b@1.0.0")
    assert next_to_run(plan, 0, state, 60) == 2
    assert plan.held_back == ["a@1.0.0", "b@1.0.0"]


def test_closed_and_half_open_breakers_let_the_candidate_run() -> None:
    now = [1000.0]
    state = InMemoryStateStore(clock=lambda: now[0])
    plan = plan_of("a", "b")
    open_breaker(state, "a@1.0.0")
    assert next_to_run(plan, 1, state, 60) == 1  # b's breaker never opened
    now[0] += 61  # a's cool-down is over: the call that comes to run it probes it...
    assert next_to_run(plan, 0, state, 60) == 0
    assert next_to_run(plan, 0, state, 60) == 0  # ...and takes the probe again if redelivered
    assert plan.held_back == []
    other = plan_of("a", "b")
    other.request.call_id = "another-call"
    assert next_to_run(other, 0, state, 60) == 1  # one probe at a time: the others pass it over
    assert other.held_back == ["a@1.0.0"]


def test_held_back_candidates_do_not_use_up_the_attempts() -> None:
    state = InMemoryStateStore()
    plan = plan_of("a", "b", "c", "d", max_attempts=2)
    assert last_index(plan) == 1
    open_breaker(state, "a@1.0.0")
    assert next_to_run(plan, 0, state, 60) == 1
    assert last_index(plan) == 2  # b and c may still run: two attempts


def test_the_probe_selection_placed_first_does_not_use_up_an_attempt() -> None:
    """QA X: with `max_attempts` 1, the probe of a half-open version took the call's one attempt,
    and the call failed where the next candidate would have served it."""
    plan = plan_of("a", "b", "c", max_attempts=1)
    assert last_index(plan) == 0
    plan.probe = "a@1.0.0"
    assert last_index(plan) == 1  # the probe, then one attempt
    plan.held_back.append("a@1.0.0")  # passed over (another call probes it): still one more, not two
    assert last_index(plan) == 1


def test_a_probe_taken_where_the_call_came_to_it_does_not_use_up_an_attempt_and_says_it_is_a_probe() -> None:
    """QA README M1: a half-open version that selection did not place first (a call naming its
    namespace, or one ranked after others) ran its probe as the call's one attempt, the next
    candidate never ran, and the attempt said `probe: false`."""
    from selection.models import CallResult, ToolExecutionResult

    now = [1000.0]
    state = InMemoryStateStore(clock=lambda: now[0])
    plan = plan_of("a", "b", max_attempts=1)
    open_breaker(state, "a@1.0.0")
    now[0] += 61
    assert next_to_run(plan, 0, state, 60) == 0 and plan.probed == ["a@1.0.0"]
    assert next_to_run(plan, 0, state, 60) == 0 and plan.probed == ["a@1.0.0"]  # redelivered: the same probe
    assert last_index(plan) == 1  # the probe, then one attempt: b still runs if a fails
    plan.attempts = [ToolExecutionResult(attempt_id=f"{plan.request.call_id}:0", call_id=plan.request.call_id, tool="a",
                                         version="1.0.0", success=False, error_class=FailureClass.unavailable)]
    assert [a.probe for a in CallResult.from_plan(plan, "failed").attempts] == [True]


def test_nothing_left_to_try_when_every_remaining_breaker_is_open() -> None:
    state = InMemoryStateStore()
    plan = plan_of("a", "b", max_attempts=1)
    for key in ("a@1.0.0", "b@1.0.0"):
        open_breaker(state, key)
    assert next_to_run(plan, 0, state, 60) is None
    assert plan.held_back == ["a@1.0.0", "b@1.0.0"]  # max_attempts 1: a passed over lets b through
    assert "held back by its circuit breaker (a@1.0.0, b@1.0.0)" in plan.no_candidates_message()
    assert next_to_run(plan_of("a"), 1, state, 60) is None  # past the last candidate


def test_versions_selection_held_back_use_up_no_attempt() -> None:
    plan = plan_of("a", "b", "c", max_attempts=2)
    plan.held_back = ["x@1.0.0"]  # held back when the call was planned: not a candidate
    assert last_index(plan) == 1


def test_a_scenario_calls_first_attempt_that_ran_is_the_targeted_one() -> None:
    """A failure of the tool a call was meant for feeds evolution; with the first candidate held back,
    that is the second candidate, the first that ran (it was the first candidate only, before)."""
    from selection.models import FailureClass, ScoreBreakdown, ToolExecutionResult
    from selection.call_endings import targeted

    plan = plan_of("a", "b", "c")
    for c in plan.candidates:
        c.breakdown = ScoreBreakdown(similarity=0.7)
    plan.held_back = ["a@1.0.0"]
    ran = [ToolExecutionResult(attempt_id=f"{plan.request.call_id}:{i}", call_id=plan.request.call_id, tool=n,
                               version="1.0.0", success=False, error_class=FailureClass.crash) for i, n in ((1, "b"), (2, "c"))]
    plan.attempts = ran
    assert targeted(plan, ran[0]) and not targeted(plan, ran[1])
    by_name = plan_of("a", "b")
    by_name.request.namespace = "c"
    by_name.attempts = ran
    assert targeted(by_name, ran[1]) and not targeted(by_name, ran[0])


def test_a_fallback_that_ran_first_in_place_of_a_better_match_held_back_is_not_targeted() -> None:
    """QA new user: the Fibonacci tool's breaker opened, and the sorting tool, 0.3 similar, ran
    first; its refusals of {"n": 10} demoted it and evolved it to take that input."""
    from selection.models import FailureClass, ScoreBreakdown, ToolExecutionResult
    from selection.call_endings import targeted

    def first_ran(plan: CallPlan, name: str) -> ToolExecutionResult:
        plan.attempts = [ToolExecutionResult(attempt_id=f"{plan.request.call_id}:0", call_id=plan.request.call_id, tool=name,
                                             version="1.0.0", success=False, error_class=FailureClass.bad_input)]
        return plan.attempts[0]

    def similar(plan: CallPlan, *similarities: float) -> CallPlan:
        for c, s in zip(plan.candidates, similarities):
            c.breakdown = ScoreBreakdown(similarity=s)
        return plan

    held_when_planned = similar(plan_of("sort_numbers", "word_stats"), 0.3, 0.2)
    held_when_planned.held_back, held_when_planned.held_back_match = ["fibonacci@1.0.0"], 0.8
    assert not targeted(held_when_planned, first_ran(held_when_planned, "sort_numbers"))
    held_at_its_turn = similar(plan_of("fibonacci", "sort_numbers"), 0.8, 0.3)
    held_at_its_turn.held_back = ["fibonacci@1.0.0"]
    assert not targeted(held_at_its_turn, first_ran(held_at_its_turn, "sort_numbers"))
    # A version that matches as well as the one held back is the job's tool in its place.
    twin = similar(plan_of("fibonacci", "fib_fast"), 0.8, 0.82)
    twin.held_back = ["fibonacci@1.0.0"]
    assert targeted(twin, first_ran(twin, "fib_fast"))


def test_a_first_choice_that_matches_the_job_weakly_and_never_did_it_is_not_targeted() -> None:
    """QA recheck: with no translation tool, the word counter, 0.34 similar, ran first; its refusal
    of {"sentence": ...} evolved it to take that key, and it then answered translations with word
    counts. A version that does such jobs by its record is the call's, whatever its words."""
    from selection.models import FailureClass, ScoreBreakdown, ToolExecutionResult
    from selection.call_endings import targeted

    plan = plan_of("word_stats")
    plan.attempts = [ToolExecutionResult(attempt_id=f"{plan.request.call_id}:0", call_id=plan.request.call_id,
                                         tool="word_stats", version="1.0.0", success=False, error_class=FailureClass.bad_input)]
    plan.candidates[0].breakdown = ScoreBreakdown(similarity=0.34)
    assert not targeted(plan, plan.attempts[0])
    plan.candidates[0].does_the_job = True
    assert targeted(plan, plan.attempts[0])
    plan.candidates[0].does_the_job, plan.candidates[0].breakdown.similarity = False, 0.5
    assert targeted(plan, plan.attempts[0])


def test_after_a_refusal_by_mistake_the_tools_that_do_not_do_such_jobs_are_passed_over_and_use_up_no_attempt() -> None:
    from selection.models import FailureClass, ScoreBreakdown, ToolExecutionResult

    plan = plan_of("hash_text", "lower_text", "upper_text", "sha_sum", max_attempts=2)
    for c, similarity in zip(plan.candidates, (0.7, 0.37, 0.3, 0.62)):
        c.breakdown = ScoreBreakdown(similarity=similarity)
    plan.candidates[0].does_the_job = True
    assert next_to_run(plan, 1, InMemoryStateStore(), 60) == 1  # no refusal yet: the order stands
    plan.attempts = [ToolExecutionResult(attempt_id="c:0", call_id="c", tool="hash_text", version="1.0.0", success=False,
                                         error_class=FailureClass.bad_input, callers_mistake=True, metadata={"attempt": 0})]
    assert next_to_run(plan, 1, InMemoryStateStore(), 60) == 3  # the tool that clearly does such jobs
    assert plan.passed_over == ["lower_text@1.0.0", "upper_text@1.0.0"] and last_index(plan) == 3


def test_versions_whose_code_is_gone_are_named_apart_from_those_passed_over_after_a_refused_input() -> None:
    """Review: both went to `passed_over`, so a call that met both named the missing code's versions
    as "not tried with it, having done no such job" (they may well do such jobs)."""
    from selection.models import FailureClass, ScoreBreakdown, ToolExecutionResult
    from selection.call_endings import input_refused_message

    plan = plan_of("hash_text", "lower_text", "sha_sum", "checksum", max_attempts=2)
    for c, similarity in zip(plan.candidates, (0.7, 0.37, 0.62, 0.8)):
        c.breakdown = ScoreBreakdown(similarity=similarity)
    plan.candidates[0].does_the_job = plan.candidates[3].does_the_job = True
    plan.attempts = [ToolExecutionResult(attempt_id="c:0", call_id="c", tool="hash_text", version="1.0.0", success=False,
                                         error_class=FailureClass.bad_input, callers_mistake=True, metadata={"attempt": 0})]
    assert next_to_run(plan, 1, InMemoryStateStore(), 60, cannot_run={"sha_sum@1.0.0"}) == 3
    assert plan.passed_over == ["lower_text@1.0.0"] and plan.code_missing == ["sha_sum@1.0.0"]
    assert last_index(plan) == 3  # neither uses up an attempt
    said = input_refused_message(plan)
    assert said is not None and "lower_text@1.0.0" in said and "sha_sum" not in said, said


def test_the_executor_marks_a_refusal_after_one_by_mistake_and_a_success_on_that_input(monkeypatch) -> None:
    """Review: the flags that the failure mark and the outcome read were only ever set by hand in tests."""
    from types import SimpleNamespace

    from selection.models import FailureClass, ToolExecutionResult
    from workers.runners import RunOutcome
    from workers.settings import Settings
    from workers.tasks import execution

    monkeypatch.setattr(execution, "runtime", lambda: SimpleNamespace(
        settings=Settings(), state=InMemoryStateStore(), metrics=SimpleNamespace(attempt=lambda *a, **k: None)))
    plan = plan_of("hash_text", "sha_sum", "checksum")
    plan.candidates[0].does_the_job = plan.candidates[2].does_the_job = True
    refused = RunOutcome.fail(FailureClass.bad_input, "KeyError: 'text'")
    first = execution.record_attempt(plan, 0, refused)
    assert (first.callers_mistake, first.took_a_refused_input) == (True, False)  # it does such jobs
    plan.attempts.append(first)
    again = execution.record_attempt(plan, 1, refused)
    assert again.callers_mistake  # the same input, after a refusal by mistake: set aside too
    took = execution.record_attempt(plan, 1, RunOutcome.ok({"hash": "x"}))
    assert took.took_a_refused_input  # sha_sum has done no such job: its success is set aside
    assert not execution.record_attempt(plan, 2, RunOutcome.ok({"hash": "x"})).took_a_refused_input
    plan.attempts = [ToolExecutionResult(**{**first.model_dump(), "callers_mistake": False})]
    assert not execution.record_attempt(plan, 1, refused).callers_mistake  # no refusal by mistake before it


def test_a_version_that_refuses_everything_of_late_has_its_refusal_counted_but_its_input_stays_suspect(monkeypatch) -> None:
    """QA final: when a broken tool's refusals counted again, every safeguard was lifted at once, and
    a tool 0.07 similar took its job with base64 answers and kept it once the tool was mended."""
    from types import SimpleNamespace

    from selection.models import FailureClass, ScoreBreakdown
    from selection.call_endings import input_refused_message, took_a_refused_input_note
    from workers.runners import RunOutcome
    from workers.settings import Settings
    from workers.tasks import execution

    state = InMemoryStateStore()
    monkeypatch.setattr(execution, "runtime", lambda: SimpleNamespace(
        settings=Settings(), state=state, metrics=SimpleNamespace(attempt=lambda *a, **k: None)))
    plan = plan_of("reverse_words", "base64_encode", "flaky_reverse")
    plan.candidates[0].does_the_job = plan.candidates[0].refuses_everything = True
    for c, similarity in zip(plan.candidates, (0.93, 0.07, 0.6)):
        c.breakdown = ScoreBreakdown(similarity=similarity)
    refused = RunOutcome.fail(FailureClass.bad_input, "KeyError: 'words'")
    first = execution.record_attempt(plan, 0, refused)
    assert (first.refused_its_job, first.callers_mistake) == (True, False)  # counted: it may be broken
    plan.attempts.append(first)
    assert next_to_run(plan, 1, state, 60) == 2 and plan.passed_over == ["base64_encode@1.0.0"]  # still suspect
    assert not execution.record_attempt(plan, 2, refused).callers_mistake  # nor is a later refusal set aside
    took = execution.record_attempt(plan, 2, RunOutcome.ok({"text": "b a"}))
    assert took.took_a_refused_input  # flaky_reverse has done no such job: its success is set aside
    assert took_a_refused_input_note(plan, took) == (
        "reverse_words@1.0.0, which does such jobs, refused the input (KeyError: 'words'), as it did the last 5 inputs "
        "or more: it may be broken; flaky_reverse@1.0.0, which took it, has done no such job: check its output")
    assert input_refused_message(plan) == (
        "reverse_words@1.0.0, which does such jobs, refused the input (KeyError: 'words'), as it did the last 5 inputs "
        "or more: it may be broken; not tried with it, having done no such job and matching it less than 0.5: "
        "base64_encode@1.0.0 (a call that names one tries it)")


def test_a_version_whose_tool_folder_is_gone_is_passed_over_and_the_call_says_why(tmp_path, monkeypatch) -> None:
    """QA evolution: an evolved version whose folder was removed from the data directory stayed
    served (no watch drops it), crashed on every call ("No module named ...") and was demoted
    0.94 -> 0.64. Now it is passed over like the versions of a missing tools directory."""
    from types import SimpleNamespace

    from selection.call_endings import no_candidates_result
    from workers.settings import Settings
    from workers.tasks import execution

    tools = tmp_path / "tools"
    tools.mkdir()
    rt = SimpleNamespace(settings=Settings(tools_dir=tools), registry=SimpleNamespace(source=lambda key: None))
    monkeypatch.setattr(execution, "runtime", lambda: rt)
    plan = plan_of("pad_text")
    plan.candidates[0].manifest = ToolManifest(name="pad_text", version="1.2.0", description="pad",
                                               implementation={"kind": "python", "entrypoint": "pad_text_v1_2_0:run"},
                                               tool_dir=str(tmp_path / "data" / "evolved" / "pad_text_v1_2_0"))
    assert next_to_run(plan, 0, InMemoryStateStore(), 60, execution.code_gone(plan)) is None
    assert plan.code_missing == ["pad_text@1.0.0"] and plan.passed_over == []
    said = no_candidates_result(plan, rt.registry, rt.settings.tools_dir).message
    assert said == f"not run, as their tool folder is gone: pad_text@1.0.0 ({tmp_path}/data/evolved/pad_text_v1_2_0)", said
    (tmp_path / "data" / "evolved" / "pad_text_v1_2_0").mkdir(parents=True)
    assert execution.code_gone(plan) == set()  # back: it runs


def test_a_fallbacks_crash_on_another_tools_job_demotes_nothing_but_a_crash_on_its_own_does() -> None:
    """QA evolution: an executable fallback that read a key the other tool's input lacked (a KeyError
    traceback, exit 1: a crash) was charged a high-severity crash on each of its versions tried."""
    from selection.models import FailureClass, FailureCount, FailureMark

    def mark(error_class: FailureClass, targeted: bool, does_such_jobs: bool = False) -> FailureCount:
        return FailureMark(attempt_id="c:1", call_id="c", tool="double_it", version="1.0.1", scenario="convert 20 celsius",
                           error_class=error_class, targeted=targeted, does_such_jobs=does_such_jobs).counts_as()

    assert mark(FailureClass.crash, targeted=False) is FailureCount.not_its_job
    assert mark(FailureClass.bad_input, targeted=False) is FailureCount.not_its_job
    assert mark(FailureClass.crash, targeted=True) is FailureCount.failure  # on its own job: its fault
    assert mark(FailureClass.crash, targeted=False, does_such_jobs=True) is FailureCount.failure  # a fallback doing such jobs
    assert mark(FailureClass.timeout, targeted=False) is FailureCount.failure  # slow whatever the input
    # a refusal its test cases expect (QA 65b): counted apart, and not as one more of a run of refusals
    declared = FailureMark(attempt_id="c:1", call_id="c", tool="prime_count", version="1.0.0", scenario="count primes",
                           error_class=FailureClass.bad_input, callers_mistake=True, refused_as_declared=True)
    assert declared.counts_as() is FailureCount.declared_refusal


def test_a_probe_that_outlasts_the_cool_down_stays_the_only_one_until_its_outcome_is_recorded(monkeypatch) -> None:
    """QA 59b F3: the probe's lock lasted one cool-down (60 s) where its attempt may run 120 s, so a
    hanging tool got a new probe every cool-down while the earlier ones still hung (three at once)."""
    from types import SimpleNamespace

    from workers.runners import RunOutcome
    from workers.settings import Settings
    from workers.tasks import execution

    now = [1000.0]
    state = InMemoryStateStore(clock=lambda: now[0])
    open_breaker(state, "a@1.0.0")
    now[0] += 61  # half-open
    probing = plan_of("a", "b")
    probing.candidates[0].timeout_s = 200.0
    assert next_to_run(probing, 0, state, 60, max_timeout_s=300) == 0 and probing.probed == ["a@1.0.0"]
    now[0] += 90  # a cool-down and a half into its 200 s attempt
    other = plan_of("a", "b")
    other.candidates[0].timeout_s = 200.0
    assert next_to_run(other, 0, state, 60, max_timeout_s=300) == 1 and other.held_back == ["a@1.0.0"]

    monkeypatch.setattr(execution, "runtime", lambda: SimpleNamespace(
        settings=Settings(breaker_threshold=3, breaker_cooldown_s=60), state=state,
        metrics=SimpleNamespace(attempt=lambda *a, **k: None)))
    execution.record_attempt(probing, 0, RunOutcome.fail(FailureClass.timeout, "no result within 200s"))
    assert state.stats_and_breakers(["a@1.0.0"])[1]["a@1.0.0"] == "open"
    now[0] += 61  # its next cool-down is over: the lock its outcome released holds nothing back
    later = plan_of("a", "b")
    assert next_to_run(later, 0, state, 60, max_timeout_s=300) == 0 and later.probed == ["a@1.0.0"]


def with_side_effects(plan: CallPlan, *names: str) -> CallPlan:
    for c in plan.candidates:
        if c.manifest.name in names:
            c.manifest = c.manifest.model_copy(update={"side_effects": True})
    return plan


def failed(plan: CallPlan, index: int, error: FailureClass) -> None:
    c = plan.candidates[index]
    plan.attempts.append(ToolExecutionResult(attempt_id=plan.attempt_id(index), call_id=plan.request.call_id,
                                             tool=c.manifest.name, version=c.manifest.version, success=False,
                                             error_class=error, metadata={"attempt": index}))


def test_a_tool_with_side_effects_that_timed_out_crashed_or_answered_badly_may_have_done_its_job() -> None:
    """QA 63a: a payment tool timed out after its write, and the call ran it again evolved, then fell
    back to an audit ledger: such a failure stops the call (workers/tasks/execution.py)."""
    for error in (FailureClass.timeout, FailureClass.crash, FailureClass.bad_output):
        plan = with_side_effects(plan_of("pay", "audit", "echo"), "pay", "audit")
        failed(plan, 0, error)
        assert effect_unknown(plan) is plan.attempts[0], error
    pure = plan_of("pay", "audit")  # a tool without side effects that timed out: nothing to fear
    failed(pure, 0, FailureClass.timeout)
    assert effect_unknown(pure) is None


def test_after_a_refusal_of_a_tool_with_side_effects_only_its_own_versions_are_tried() -> None:
    """QA 63h: after an SMTP outage, an email drafter (no side effects) "sent" the email, and a refund
    poster matched the job too: a refusal or an unreachable upstream did nothing, but another tool
    would make another change, and one without side effects cannot make it."""
    for error in (FailureClass.bad_input, FailureClass.unavailable):
        plan = with_side_effects(plan_of("pay", "audit", "draft", "pay"), "pay", "audit")
        plan.candidates[3] = plan.candidates[3].model_copy(update={
            "key": "pay@1.1.0", "manifest": plan.candidates[3].manifest.model_copy(update={"version": "1.1.0"})})
        failed(plan, 0, error)
        assert effect_unknown(plan) is None and failed_change(plan) is plan.attempts[0]
        assert next_to_run(plan, 1, InMemoryStateStore(), 60) == 3  # its other version, not audit nor draft
        assert kept_to_the_change(plan).startswith("; no other tool was tried after pay@1.0.0, which has side effects")
    # CI of stop 63: the tool tried first refused the input as the caller's mistake; the call's message
    # said "check the input", and not that the side effects kept the other candidates from running.
    refused = with_side_effects(plan_of("pay", "audit", "draft"), "pay", "audit")
    failed(refused, 0, FailureClass.bad_input)
    refused.attempts[0] = refused.attempts[0].model_copy(update={"callers_mistake": True})
    said = input_refused_message(refused) or ""
    assert said.startswith("pay@1.0.0, which ") and ": check the input" in said, said
    assert said.endswith(kept_to_the_change(refused)) and "no other tool was tried after pay@1.0.0" in said, said
    pure = plan_of("pay", "audit")  # without side effects: falls back as ever
    failed(pure, 0, FailureClass.bad_input)
    assert failed_change(pure) is None and next_to_run(pure, 1, InMemoryStateStore(), 60) == 1

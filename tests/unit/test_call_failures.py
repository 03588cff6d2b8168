"""Which tool a call whose candidates all failed evolves (workers/evolution_jobs.py `call_failures`)."""

from __future__ import annotations

from selection.call_endings import named_held_back, no_tool_meant_for_it
from selection.models import CallPlan, CallRequest, FailureClass, ToolExecutionResult
from tests.candidates import matching
from workers.evolution_jobs import call_failures


def attempt(tool: str, error: FailureClass, index: int = 0) -> ToolExecutionResult:
    return ToolExecutionResult(attempt_id=f"c:{index}", call_id="c", tool=tool, version="1.0.0", success=False,
                               error_class=error, error_message="no")


def test_the_tool_tried_first_is_evolved() -> None:
    plan = CallPlan(request=CallRequest(scenario="add VAT to 1200"), candidates=[],
                    attempts=[attempt("vat_price", FailureClass.crash), attempt("convert_units", FailureClass.bad_input, 1)])
    namespace, parent, failures = call_failures(plan, None)
    assert (namespace, parent, [f.error_class for f in failures]) == ("vat_price", "1.0.0", [FailureClass.crash])


def test_fallbacks_that_refused_the_input_leave_the_evolution_to_the_tool_held_back() -> None:
    """QA: with vat_price's breaker open, convert_units refused a VAT job's input and was evolved
    for it ("no mutator could propose"); the job was vat_price's, whose failures opened its breaker."""
    plan = CallPlan(request=CallRequest(scenario="add VAT to 1200"), candidates=[], held_back=["vat_price@1.0.0"],
                    attempts=[attempt("convert_units", FailureClass.bad_input)])
    assert call_failures(plan, None) == ("vat_price", None, [])  # its failures are read from memory
    # A failure of the tool's own, or a call to a namespace, keeps the rule above.
    plan.attempts.append(attempt("csv_to_json", FailureClass.crash, 1))
    assert call_failures(plan, None)[0] == "convert_units"
    named = plan.model_copy(update={"request": CallRequest(scenario="add VAT", namespace="convert_units"),
                                    "attempts": plan.attempts[:1]})
    assert call_failures(named, None)[0] == "convert_units"


def test_a_refusal_by_the_best_match_does_not_leave_the_evolution_to_a_worse_match_held_back() -> None:
    """QA 48: a hashing call whose hashing tool (0.77 similar) refused its input evolved a string
    reverser (0.41), held back by its breaker; without the reverser held back it evolved the hasher."""
    plan = CallPlan(request=CallRequest(scenario="hash this text with sha256"), held_back=["reverse_text@1.0.0"],
                    held_back_match=0.41, candidates=[matching("hash_text", 0.77), matching("reverse_text", 0.41)],
                    attempts=[attempt("hash_text", FailureClass.bad_input)])
    assert call_failures(plan, None)[0] == "hash_text"
    # held back when the call was planned (not among its candidates): its match is the plan's
    planned = plan.model_copy(update={"candidates": plan.candidates[:1]})
    assert call_failures(planned, None)[0] == "hash_text"
    assert call_failures(planned.model_copy(update={"held_back_match": 0.9}), None)[0] == "reverse_text"


def test_a_fallback_that_ran_in_place_of_a_better_match_held_back_leaves_the_evolution_to_that_one() -> None:
    """Whatever the fallbacks' failures: a tool that matched the job worse than the one held back
    was not the call's (selection/call_endings.py `targeted`; QA new user: the sorting tool was evolved
    for a Fibonacci job)."""

    plan = CallPlan(request=CallRequest(scenario="the 10th fibonacci number"), held_back=["fibonacci@1.0.0"],
                    held_back_match=0.8, candidates=[matching("sort_numbers", 0.3), matching("word_stats", 0.25)],
                    attempts=[attempt("sort_numbers", FailureClass.bad_input), attempt("word_stats", FailureClass.crash, 1)])
    assert call_failures(plan, None) == ("fibonacci", None, [])
    # One that matched as well as the one held back is the job's tool in its place: it is evolved.
    twin = plan.model_copy(update={"candidates": [matching("sort_numbers", 0.85), matching("word_stats", 0.25)]})
    assert call_failures(twin, None)[0] == "sort_numbers"


def test_a_call_whose_job_no_tool_tried_is_meant_for_evolves_nothing_and_says_why() -> None:
    """QA recheck: with no translation tool, the word counter (0.34 similar) refused the input and
    was evolved to take "sentence"; the new version won its trial and answered translations with
    word counts."""

    plan = CallPlan(request=CallRequest(scenario="translate this sentence into French"),
                    candidates=[matching("word_stats", 0.34), matching("reverse_text", 0.21)],
                    attempts=[attempt("word_stats", FailureClass.bad_input), attempt("reverse_text", FailureClass.crash, 1)])
    assert no_tool_meant_for_it(plan) == ("no tool tried matches this job clearly (the closest, word_stats@1.0.0, matches "
                                          "it 0.34) or has done it, so none was evolved for it: add a tool for it, or name "
                                          "one (`--namespace`) to have it evolved")
    # A clear match, a tool that does the job, a namespace named or a tool held back: that one evolves.
    clear = plan.model_copy(update={"candidates": [matching("word_stats", 0.6), matching("reverse_text", 0.21)]})
    assert no_tool_meant_for_it(clear) is None
    doer = plan.model_copy(update={"candidates": [plan.candidates[0].model_copy(update={"does_the_job": True}), plan.candidates[1]]})
    assert no_tool_meant_for_it(doer) is None
    assert no_tool_meant_for_it(plan.model_copy(update={"request": CallRequest(scenario="x", namespace="word_stats")})) is None
    assert no_tool_meant_for_it(plan.model_copy(update={"held_back": ["translate@1.0.0"]})) is None
    # A namespace no tool has is as if none were named (QA 49: "evolution could not be prepared: no
    # tool named 'nosuchns'"), and so is the evolution of a call whose first tool was meant for it.
    unknown = plan.model_copy(update={"request": CallRequest(scenario="x", namespace="nosuchns"), "named_unknown": True})
    assert no_tool_meant_for_it(unknown) == no_tool_meant_for_it(plan)
    assert call_failures(unknown.model_copy(update={"candidates": clear.candidates}), None)[0] == "word_stats"



def test_a_call_that_stopped_before_the_closest_candidate_names_the_closest_tried_and_that_one_not_tried() -> None:
    """QA onboarding L3: with max_attempts 1, a 0.25-similar tool ran first and refused; the message
    said "no tool tried matches this job clearly (the closest, unique_items@1.0.0, matches it 1.00)
    ... add a tool for it", of a tool that matched 1.00 and was never tried."""

    plan = CallPlan(request=CallRequest(scenario="deduplicate this list", max_attempts=1),
                    candidates=[matching("word_stats", 0.25), matching("unique_items", 1.0), matching("reverse_text", 0.21)],
                    attempts=[attempt("word_stats", FailureClass.bad_input)])
    assert no_tool_meant_for_it(plan) == (
        "no tool tried matches this job clearly (the closest, word_stats@1.0.0, matches it 0.25) or has done it, so "
        "none was evolved for it; unique_items@1.0.0, which matches it 1.00, was not tried (the call stopped at its "
        "max_attempts (1)): raise max_attempts, or name it (`--namespace unique_items`)")
    # Only closer untried candidates are named: a worse one left untried changes nothing.
    worse = plan.model_copy(update={"candidates": [matching("word_stats", 0.25), matching("reverse_text", 0.21)]})
    assert no_tool_meant_for_it(worse) == (
        "no tool tried matches this job clearly (the closest, word_stats@1.0.0, matches it 0.25) or has done it, so "
        "none was evolved for it: add a tool for it, or name one (`--namespace`) to have it evolved")
    # QA 57a M5: one whose code is not there (its folder gone) is not what more attempts would run.
    gone = plan.model_copy(update={"request": CallRequest(scenario="deduplicate this list", max_attempts=10),
                                   "code_missing": ["unique_items@1.0.0"]})
    assert no_tool_meant_for_it(gone) == (
        "no tool tried matches this job clearly (the closest, word_stats@1.0.0, matches it 0.25) or has done it, so "
        "none was evolved for it; unique_items@1.0.0, which matches it 1.00, was not run: its code is not there (the "
        "call's notes say where it was)")


def test_a_call_nothing_matches_names_a_tools_directory_that_is_not_there(tmp_path) -> None:
    """QA 57a L4: a stack started from another directory answered every call "no tool matches",
    without a word of the tools directory it could not find."""
    from selection.call_endings import no_candidates_result
    from selection.registry import ToolRegistry

    plan = CallPlan(request=CallRequest(scenario="sort these numbers ascending"), candidates=[])
    missing = tmp_path / "examples" / "tools"
    said = no_candidates_result(plan, ToolRegistry(), missing)
    assert (said.no_candidates_reason, said.message) == (
        "no_match", f"no tool matches this scenario, namespace and tags: FITTEST_TOOLS_DIR ({missing}) is not a directory, "
                    "so no tool of it is served")
    assert no_candidates_result(plan, ToolRegistry(), tmp_path).message == "no tool matches this scenario, namespace and tags"


def test_a_failed_calls_message_says_when_the_tool_it_named_was_held_back_and_not_tried() -> None:
    """QA 63a: "the one attempt failed; evolution: ... crashy@1.0.0", where crashy had not run."""
    plan = CallPlan(request=CallRequest(scenario="crash", namespace="crashy"), held_back=["crashy@1.0.0"],
                    candidates=[matching("strict_invoice", 0.3)], attempts=[attempt("strict_invoice", FailureClass.bad_input)])
    assert named_held_back(plan) == " (crashy@1.0.0, which the call names, held back by its circuit breaker, not tried)"
    assert named_held_back(plan.model_copy(update={"request": CallRequest(scenario="crash")})) == ""  # none named

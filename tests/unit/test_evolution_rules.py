"""The pure rules of evolution: versions, test-case predicates, input coercion, mutator order,
which earlier failures predict a mutation fails again, trial verdicts, serving shares and
description variants."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from evolution.descriptions import DescriptionVariant, judge, served
from evolution.models import Evidence, FailedMutation, FailedRun, PastFailure, StageResult, SuccessfulRun, input_key
from evolution.mutation import Mutator, MutatorConfig, load_mutators, order_for
from evolution.mutators.code import extract_code
from evolution.mutators.coercion import Schema, infer_rules
from evolution.served_version import (head_version, in_share, kept_served, majority_version, manifest_to_trial,
                                      meant_version, offered_side, served_before, served_version, served_versions)
from evolution.trial import TrialCounts, TrialRules, decide, parent_rate
from evolution.verification import StageRun, VerifyConfig, reproduce_successes, verified_reason, verify
from evolution.versioning import next_version, version_dir, version_stem
from selection.manifest import TestCase, ToolManifest
from selection.evidence import CandidateEvidence
from selection.models import CallRequest, FailureClass, Promotion
from selection.registry import ToolRegistry
from selection.ports import VectorHit
from selection.serving import ServedVersions
from workers.evolution_jobs import failed_mutations, pattern_text
from workers.runners import RunOutcome


def tool(**fields) -> ToolManifest:
    return ToolManifest.model_validate(
        {"name": "t", "description": "d", "implementation": {"kind": "python", "entrypoint": "m:run"}, **fields}
    )


# ------------------------------------------------------------------------------------ versions
def test_minor_bump_above_every_existing_version_of_the_major_line() -> None:
    assert next_version("1.0.0", []) == "1.1.0"
    assert next_version("1.0.0", ["1.0.0", "1.1.0"]) == "1.2.0"
    assert next_version("1.1.0", ["1.0.0", "1.1.0", "1.3.0", "2.0.0"]) == "1.4.0"
    assert next_version("2.0.0", ["1.9.0"]) == "2.1.0"


def test_version_folder_is_named_after_the_version_and_stays_inside(tmp_path: Path) -> None:
    assert version_stem("word_count", "1.1.0") == "word_count_v1_1_0"
    assert version_dir(tmp_path, "word_count", "1.1.0") == (tmp_path / "word_count_v1_1_0").resolve()
    with pytest.raises(ValueError):
        version_dir(tmp_path, "../../etc", "1.1.0")


# ------------------------------------------------------------------------------------ test cases
@pytest.mark.parametrize(
    ("case", "success", "output", "ok"),
    [
        (TestCase(input={}, expect={"a": 1}), True, {"a": 1}, True),
        (TestCase(input={}, expect={"a": 1}), True, {"a": 1.0}, True),
        (TestCase(input={}, expect={"a": 1}), True, {"a": 2}, False),
        (TestCase(input={}, expect={"a": 1}), False, None, False),
        (TestCase(input={}, expect_keys=["a", "b"]), True, {"a": 1, "b": 2, "c": 3}, True),
        (TestCase(input={}, expect_keys=["a", "b"]), True, {"a": 1}, False),
        (TestCase(input={}, expect_keys=["a"]), True, [1], False),
        (TestCase(input={}, expect_error=True), False, None, True),
        (TestCase(input={}, expect_error=True), True, {"a": 1}, False),
        (TestCase(input={}), True, "anything", True),
        # QA 65a: compared as JSON, true is not 1 nor false 0
        (TestCase(input={}, expect={"ok": 1, "z": False}), True, {"ok": True, "z": 0}, False),
        (TestCase(input={}, expect={"ok": True, "n": [1, None]}), True, {"ok": True, "n": [1.0, None]}, True),
        (TestCase(input={}, expect=["a"]), True, ["a", "b"], False),
    ],
)
def test_test_case_check(case: TestCase, success: bool, output: object, ok: bool) -> None:
    why = case.check(success, output)
    assert (why is None) == ok, why


@pytest.mark.parametrize(("failure", "ok"), [("bad_input", True), ("crash", True), ("bad_output", True),
                                             ("timeout", False), ("unavailable", False)])
def test_an_expected_error_is_one_the_tool_gives(failure: str, ok: bool) -> None:
    """QA 65a: a hanging run, and an http tool whose service was down, passed a case expecting an error."""
    why = TestCase(input={}, expect_error=True).check(False, None, failure)
    assert (why is None) == ok and (ok or why == f"expected an error of the tool's, the run failed as {failure}"), why


# ------------------------------------------------------------------------------------ coercion
CASES = [
    {"input": {"text": "a b", "digits": 2, "limit": 3}, "expect": 1},
    {"input": {"text": "c", "digits": 2, "limit": 1.5}, "expect": 1},
    {"input": {"text": "d", "digits": 0, "limit": 2}, "expect": 1},
    {"input": {"text": 5}, "expect_error": True},
]


def test_rename_type_and_default_are_inferred_from_what_the_failing_input_gets_wrong() -> None:
    schema = Schema(tool(test_cases=CASES))
    assert schema.required == {"text", "digits", "limit"}
    assert schema.kinds == {"text": "str", "digits": "int", "limit": "float"}
    failing = FailedRun(version="1.0.0", input={"Text": "x y", "limit": "4"}, error_class=FailureClass.bad_input)
    rules = infer_rules(schema, [failing])
    assert rules.renames == {"Text": "text"}
    assert rules.types == {"limit": "float"}
    assert rules.defaults == {"digits": 2}  # the most common value of the valid cases


def test_only_key_left_unknown_maps_to_only_key_missing() -> None:
    schema = Schema(tool(test_cases=[{"input": {"text": "a"}, "expect": 1}]))
    rules = infer_rules(schema, [FailedRun(version="1.0.0", input={"content": "x"}, error_class=FailureClass.bad_input)])
    assert rules.renames == {"content": "text"} and not rules.defaults


def test_text_is_never_made_up_as_a_default() -> None:
    schema = Schema(tool(test_cases=[{"input": {"text": "a long sentence that is the payload of the call"}, "expect": 1}]))
    rules = infer_rules(schema, [FailedRun(version="1.0.0", input={}, error_class=FailureClass.bad_input)])
    assert not rules


# ------------------------------------------------------------------------------------ mutators
def test_builtin_mutators_are_entry_points_and_the_code_mutator_is_off_without_a_url() -> None:
    names = {m.name for m in load_mutators(MutatorConfig())[0]}
    assert names == {"timeout", "retry", "coerce", "describe"}
    with_llm = {m.name for m in load_mutators(MutatorConfig(llm_url="http://127.0.0.1:9/v1"))[0]}
    assert with_llm == names | {"code"}


def test_mutators_are_chosen_by_failure_class_cheapest_last_for_any_class() -> None:
    mutators, _ = load_mutators(MutatorConfig(llm_url="http://127.0.0.1:9/v1"))
    evidence = Evidence(
        failures=[FailedRun(version="1.0.0", input={}, error_class=FailureClass.timeout)],
        similar_failures=[PastFailure(version="1.0.0", scenario="s", error_class=FailureClass.unavailable)],
    )
    assert [m.name for m in order_for(mutators, evidence)] == ["timeout", "retry", "describe", "code"]


# ------------------------------------------------------------------------------------ failed before
LONGER = "timeout_s 1s → 4s"
EMPTY: dict[str, list[int]] = {"values": []}
MANY = {"values": list(range(60)), "unit": "s"}


def failing_on(*inputs: dict, earlier: list[FailedMutation], succeeded_on: tuple[dict, ...] = ()) -> Evidence:
    failures = [FailedRun(version="1.0.0", input=v, error_class=FailureClass.timeout, error_message="no result within 1s") for v in inputs]
    return Evidence(failures=failures, failed_mutations=earlier,
                    successes=[SuccessfulRun.of("s", v, {"ok": True}) for v in succeeded_on])


def test_a_mutation_that_failed_on_a_failing_input_predicts_a_failure_until_the_version_succeeds_on_it() -> None:
    on_empty = FailedMutation(mutator="timeout", mutation=LONGER, identity=LONGER, failed_on=[input_key(EMPTY)], similarity=0.97)
    # QA onboarding M2: another failing input does not clear it; EMPTY is not known to succeed
    assert failing_on(MANY, earlier=[on_empty]).failed_before("timeout", LONGER, 0.85) == on_empty
    assert failing_on(MANY, earlier=[on_empty], succeeded_on=(EMPTY,)).failed_before("timeout", LONGER, 0.85) is None
    # failing again now, it predicts a failure whatever it did before
    assert failing_on(MANY, EMPTY, earlier=[on_empty], succeeded_on=(EMPTY,)).failed_before("timeout", LONGER, 0.85) == on_empty
    reordered = on_empty.model_copy(update={"failed_on": [input_key({"unit": "s", "values": list(range(60))})]})
    assert failing_on(MANY, earlier=[reordered]).failed_before("timeout", LONGER, 0.85) == reordered  # keys ignore key order


def test_a_mutation_that_failed_for_a_reason_of_its_own_predicts_any_similar_failure_of_the_same_mutation() -> None:
    own = FailedMutation(mutator="timeout", mutation=LONGER, identity=LONGER, reason="tests: test case 1 failed", similarity=0.9)
    assert failing_on(MANY, earlier=[own]).failed_before("timeout", LONGER, 0.85) == own
    assert failing_on(earlier=[own]).failed_before("timeout", LONGER, 0.85) == own
    assert failing_on(MANY, earlier=[own]).failed_before("timeout", LONGER, 0.95) is None  # not similar enough
    assert failing_on(MANY, earlier=[own]).failed_before("timeout", "timeout_s 1s → 8s", 0.85) is None
    assert failing_on(MANY, earlier=[own]).failed_before("code", LONGER, 0.85) is None


def test_the_failure_pattern_of_the_same_failures_is_the_same_in_any_order() -> None:
    """QA 55b L4: the pattern was the first failure's message; the same failures in another order
    made a pattern unlike the one a mutation failed for, and it was made again."""
    failures = [FailedRun(version="1.0.0", input={"n": i}, error_class=c, error_message=m) for i, (c, m) in enumerate([
        (FailureClass.bad_input, "KeyError: 'numbers'"), (FailureClass.timeout, "no result within 2s"),
        (FailureClass.bad_input, "TypeError: bad operand"), (FailureClass.bad_input, "KeyError: 'numbers'"),
        (FailureClass.timeout, "no result within 2s")])]
    patterns = {pattern_text(list(order), "") for order in itertools.permutations(failures)}
    assert patterns == {"bad_input: KeyError: 'numbers'"}  # the most frequent class, and its most frequent message
    tied = [failures[1], failures[2]]  # one of each class: the tie goes by the class's name
    assert pattern_text(tied, "") == pattern_text(tied[::-1], "") == "bad_input: TypeError: bad operand"


class ScriptedSandbox:
    """Passes static checks and returns the given replay results (or dies)."""

    def __init__(self, results: list[RunOutcome], died: str | None = None) -> None:
        self.results, self.died = results, died

    def static(self, manifest: ToolManifest, timeout_s: float) -> StageResult:
        return StageResult(stage="static", passed=True, checked=1)

    def run(self, manifest: ToolManifest, inputs: list[dict], timeout_s: float) -> StageRun:
        return StageRun(results=self.results, died=self.died)


def test_a_replay_names_the_failing_inputs_that_alone_failed_it() -> None:
    evidence = Evidence(
        failures=[FailedRun(version="1.0.0", input=v, error_class=FailureClass.timeout) for v in (EMPTY, MANY)],
        successes=[SuccessfulRun(scenario="s", input={"values": [1]}, shape="number")],
    )
    hangs = RunOutcome.fail(FailureClass.timeout, "no result within 4s")

    def replay(results: list[RunOutcome], died: str | None = None) -> StageResult:
        return verify(tool(), evidence, ScriptedSandbox(results, died), VerifyConfig())[-1]

    only_failing = replay([hangs, RunOutcome.ok(1.5), RunOutcome.ok(1)])
    assert not only_failing.passed and only_failing.failed_inputs == [input_key(EMPTY)]
    regressed = replay([hangs, RunOutcome.ok(1.5), RunOutcome.ok("1")])  # a successful input changed shape: its own reason
    assert not regressed.passed and regressed.failed_inputs == []
    died = replay([], died="the stage did not finish within 20s; its process group was killed")  # any failing input may have killed it
    assert not died.passed and died.failed_inputs == [input_key(EMPTY), input_key(MANY)]


def promotion(version: str, status: str, reason: str = "") -> Promotion:
    return Promotion.model_validate({"namespace": "t", "evolved_version": version, "original_version": "1.0.0",
                                     "parent_version": "1.0.0", "status": status, "reason": reason})


def test_failed_mutations_are_those_that_failed_verification_and_those_rolled_back_since() -> None:
    def hit(score: float, outcome: str, mutation: str, **payload: object) -> VectorHit:
        return VectorHit(id=mutation, score=score, payload={"outcome": outcome, "mutator": "m", "mutation": mutation, **payload})

    hits = [
        hit(0.99, "failed", LONGER, reason="replay: failing input still fails"),  # written before identities and inputs were kept
        hit(0.97, "failed", "code rewrite", identity="code:ab12", failed_on=[input_key(EMPTY)], reason="replay: x"),
        hit(0.95, "verified", "rolled back", identity="rolled back", version="1.1.0"),
        hit(0.93, "verified", "on trial", identity="on trial", version="1.3.0"),
        hit(0.91, "verified", "promoted again", identity="promoted again", version="1.2.0"),
        # QA 57d M4: a stage whose sandbox could not start tried nothing of the candidate
        hit(0.90, "failed", "never tried", identity="never tried",
            reason="static: the verification sandbox did not start: cannot start '/usr/bin/python3': Permission denied"),
    ]
    history = [promotion("1.1.0", "on_trial"), promotion("1.1.0", "rolled_back", "rolled back by hand"),
               promotion("1.2.0", "rolled_back", "1/5 successes"), promotion("1.2.0", "active"), promotion("1.3.0", "on_trial")]
    assert [(m.identity, m.failed_on, m.reason, m.similarity) for m in failed_mutations(hits, history)] == [
        (LONGER, [], "replay: failing input still fails", 0.99),
        ("code:ab12", [input_key(EMPTY)], "replay: x", 0.97),
        ("rolled back", [], "1.1.0 rolled back: rolled back by hand (`fittest promote t 1.1.0` serves it again)", 0.95),
    ]


def test_code_is_taken_from_the_fenced_block_of_a_reply() -> None:
    assert extract_code("Fixed it.\n```python\ndef run(i):\n    return 1\n```\n") == "def run(i):\n    return 1\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("I would rewrite the loop to use a dict instead.") is None
    assert extract_code("```json\n{\"a\": 1}\n```") is None


# ------------------------------------------------------------------------------------ trial
RULES = TrialRules(successes=5)


@pytest.mark.parametrize(
    ("counts", "parent", "verdict"),
    [
        (TrialCounts(evolved_successes=5), 0.5, "activate"),
        (TrialCounts(evolved_successes=4), 0.5, "continue"),
        (TrialCounts(evolved_successes=9, evolved_failures=1), 0.9, "activate"),
        (TrialCounts(evolved_successes=2, evolved_failures=3), 0.9, "rollback"),
        (TrialCounts(evolved_successes=5, evolved_failures=1), 0.9, "continue"),  # 0.83: within tolerance
        (TrialCounts(evolved_successes=17, evolved_failures=3), 0.9, "rollback"),  # 4K runs, never reached it
        (TrialCounts(), 0.9, "continue"),
    ],
)
def test_trial_verdicts(counts: TrialCounts, parent: float, verdict: str) -> None:
    assert decide(counts, parent, RULES) == verdict


def test_trial_share_is_stable_per_call_and_close_to_the_setting() -> None:
    calls = [f"call-{i}" for i in range(4000)]
    picked = [in_share(c, "ns", 0.25) for c in calls]
    assert 0.22 < sum(picked) / len(picked) < 0.28
    assert picked == [in_share(c, "ns", 0.25) for c in calls]


def test_served_version_follows_the_promotion() -> None:
    trial = Promotion(namespace="ns", evolved_version="1.2.0", original_version="1.0.0", parent_version="1.1.0")
    assert served_version(trial, "any", after_evolution=True, share=0.0) == "1.2.0"
    assert served_version(trial, "any", after_evolution=False, share=0.0) == "1.1.0"
    assert served_version(trial, "any", after_evolution=False, share=1.0) == "1.2.0"
    assert served_version(trial.model_copy(update={"status": "active"}), "any", False, 0.0) == "1.2.0"
    rolled = trial.model_copy(update={"status": "rolled_back"})
    assert served_version(rolled, "any", True, 1.0) == "1.1.0" and head_version(rolled) == "1.1.0"
    first = trial.model_copy(update={"status": "rolled_back", "parent_version": "1.0.0"})
    assert served_version(first, "any", True, 1.0) is None and head_version(first) is None
    assert served_version(None, "any", True, 1.0) is None


def test_a_trials_side_selection_does_not_offer_leaves_every_call_to_the_other_side() -> None:
    """QA onboarding H2: 1.0.0 deprecated during 1.1.0's trial was still drawn for 75 % of the calls."""
    trial = Promotion(namespace="ns", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0")
    assert offered_side(trial, "1.0.0", 0.75, "1.0.0", {"1.0.0", "1.1.0"}) == ("1.0.0", 0.75)
    assert offered_side(trial, "1.0.0", 0.75, "1.0.0", {"1.1.0"}) == ("1.1.0", 1.0)
    assert offered_side(trial, "1.1.0", 0.25, "1.0.0", {"1.0.0"}) == ("1.0.0", 1.0)
    assert offered_side(trial, "1.1.0", 0.25, "1.0.0", set()) == ("1.1.0", 0.25)  # neither offered: nothing to move
    active = trial.model_copy(update={"status": "active"})
    assert offered_side(active, "1.1.0", 1.0, "1.0.0", {"1.0.0"}) == ("1.1.0", 1.0)  # no trial: the policy's order decides
    assert offered_side(None, "1.0.0", 1.0, "1.0.0", set()) == ("1.0.0", 1.0)


def test_a_calls_served_versions_draw_each_trial_and_leave_out_what_was_rolled_back() -> None:
    """What the selector hands `served_first`, from the promotions of the call's candidates."""
    registry = ToolRegistry()
    for version, parent in (("1.0.0", None), ("1.1.0", "1.0.0"), ("1.2.0", "1.1.0")):
        registry.add(tool(version=version, parent_version=parent))
    evidence = [CandidateEvidence(manifest=m, similarity=0.8) for m in registry.versions("t")]
    trial = Promotion(namespace="t", evolved_version="1.2.0", original_version="1.0.0", parent_version="1.1.0")
    drawn = [served_versions(CallRequest(scenario="s", call_id=f"c{i}"), evidence, {"t": trial}, {"t": {"0.9.0"}},
                             registry, 0.25) for i in range(400)]
    on_trial = [d for d in drawn if d.by_namespace["t"] == "1.2.0"]
    assert 0.18 < len(on_trial) / len(drawn) < 0.32 and {d.by_namespace["t"] for d in drawn} == {"1.1.0", "1.2.0"}
    assert {d.chance["t"] for d in on_trial} == {0.25} and {d.other_side["t"] for d in on_trial} == {"1.1.0"}
    assert all(d.promoted == {"t@1.2.0"} and d.replaced == {"t@1.2.0": "1.1.0"} and d.rolled_back == {"t@0.9.0"} for d in drawn)
    retried = served_versions(CallRequest(scenario="s", call_id="c0", after_evolution=True), evidence, {"t": trial}, {}, registry, 0.25)
    assert (retried.by_namespace["t"], retried.chance["t"], retried.other_side) == ("1.2.0", 1.0, {})
    one = served_versions(CallRequest(scenario="s", version="1.0.0", namespace="t"), evidence, {"t": trial}, {}, registry, 0.25)
    assert one == ServedVersions()  # a call that asked for one version: nothing to decide
    alone = served_versions(CallRequest(scenario="s"), evidence[:1], {"t": trial}, {}, registry, 0.25)
    assert alone.by_namespace == {}  # one version of it among the candidates: no order to keep


def test_a_tool_named_without_a_version_means_the_version_serving_most_calls() -> None:
    """What `feedback add NAME` and `describe NAME` mean: during a trial on a share of half or less,
    the version it is tried against (QA: the description went to the version on trial)."""
    trial = Promotion(namespace="ns", evolved_version="1.2.0", original_version="1.0.0", parent_version="1.1.0")
    assert majority_version(trial, 0.25) == "1.1.0"
    assert majority_version(trial.model_copy(update={"parent_version": "1.0.0"}), 0.25) is None  # the original
    assert majority_version(trial, 0.75) == "1.2.0"
    assert majority_version(trial.model_copy(update={"status": "active"}), 0.25) == "1.2.0"
    assert majority_version(None, 0.25) is None


def test_a_tool_named_without_a_version_after_a_rollback_means_the_original_served_not_one_added_since() -> None:
    """QA F11, for `feedback add NAME` and `describe NAME`: 0.9.0 added beside 1.0.0 after a
    promotion is the registry's original, but never served; the rollback serves 1.0.0."""
    registry = ToolRegistry()
    for version, parent in (("1.0.0", None), ("2.0.0", "1.0.0"), ("0.9.0", None)):
        registry.add(tool(version=version, parent_version=parent))
    rolled = Promotion(namespace="t", evolved_version="2.0.0", original_version="1.0.0", parent_version="1.0.0",
                       status="rolled_back")
    assert registry.original("t").version == "0.9.0"  # type: ignore[union-attr]
    assert meant_version(rolled, registry, "t", 0.25) == "1.0.0"
    assert meant_version(rolled.model_copy(update={"status": "active"}), registry, "t", 0.25) == "2.0.0"
    gone = rolled.model_copy(update={"status": "active", "evolved_version": "3.0.0"})  # its manifest removed
    assert meant_version(gone, registry, "t", 0.25) == "1.0.0"
    assert meant_version(None, registry, "t", 0.25) == "0.9.0"  # never promoted: the original
    assert meant_version(None, registry, "other", 0.25) is None


# ------------------------------------------------------------------------------------ variants
def variant(id: str, status: str, trials: int = 0, successes: int = 0, environment: str = "any", at: float = 0.0) -> DescriptionVariant:
    return DescriptionVariant(id=id, text=f"text {id}", status=status, trials=trials, successes=successes,
                              environment=environment, created_at=at)


def test_the_newest_version_a_manifest_gives_goes_on_trial_once() -> None:
    v1, v2, evolved = tool(version="1.0.0"), tool(version="2.0.0"), tool(version="1.1.0", parent_version="1.0.0")

    def promoted(version: str, status: str = "active") -> Promotion:
        return Promotion(namespace="t", evolved_version=version, original_version="1.0.0", status=status)

    assert manifest_to_trial([v1], None, []) is None  # the original alone: nothing to try
    assert manifest_to_trial([v1, evolved], promoted("1.1.0"), []) is None  # evolution's versions have their own trials
    assert manifest_to_trial([v1, evolved, v2], None, []) == v2
    assert manifest_to_trial([v1, evolved, v2], promoted("1.1.0"), [promoted("1.1.0", "on_trial")]) == v2
    assert manifest_to_trial([v1, v2], promoted("1.1.0", "on_trial"), []) is None  # that trial is decided first
    for status in ("on_trial", "active", "rolled_back"):  # it competes once
        assert manifest_to_trial([v1, v2], promoted("2.0.0", status), []) is None
    assert manifest_to_trial([v1, v2], promoted("1.0.0"), [promoted("2.0.0", "rolled_back")]) is None
    by_hand = promoted("1.0.0").model_copy(update={"by": "operator"})
    assert manifest_to_trial([v1, v2], by_hand, [by_hand]) is None  # an operator's choice stands
    assert manifest_to_trial([v1, v2], by_hand.model_copy(update={"status": "rolled_back"}), []) == v2


def test_an_older_version_that_arrives_leaves_the_newest_served() -> None:
    old, v1, v2, evolved = (tool(version="0.5.0"), tool(version="1.0.0"), tool(version="2.0.0"),
                            tool(version="1.0.1", parent_version="1.0.0"))
    assert kept_served([old, v1], None, {"t@0.5.0"}) == v1  # QA M: 0.5.0 came beside the 1.0.0 served
    assert kept_served([old, v1, evolved], None, {"t@0.5.0"}) == v1
    assert kept_served([old, v1], None, ()) is None  # at the start: not known which came later
    assert kept_served([v1, v2], None, {"t@2.0.0"}) is None  # a newer one goes on trial (manifest_to_trial)
    assert kept_served([old, v1, v2], None, {"t@0.5.0", "t@2.0.0"}) is None
    assert kept_served([v1, evolved], None, {"t@1.0.1"}) is None  # an evolved version has its own trial
    active = Promotion(namespace="t", evolved_version="1.0.1", original_version="1.0.0", status="active")
    assert kept_served([old, v1, evolved], active, {"t@0.5.0"}) is None  # a promotion decides what is served


def test_a_new_version_goes_on_trial_against_what_served_before_the_versions_that_arrived() -> None:
    old, v1, v2, evolved = (tool(version="0.5.0"), tool(version="1.0.0"), tool(version="2.0.0"),
                            tool(version="1.0.1", parent_version="1.0.0"))
    # QA N: 0.5.0 and 2.0.0 came in one look beside the 1.0.0 served; 2.0.0's trial was against 0.5.0
    assert served_before([old, v1, v2], None, {"t@0.5.0", "t@2.0.0"}) == "1.0.0"
    assert served_before([v1, v2], None, {"t@2.0.0"}) == "1.0.0"
    assert served_before([old, v1, v2], None, ()) == "0.5.0"  # at the start: the original
    assert served_before([old, v1, evolved, v2], None, {"t@0.5.0", "t@2.0.0"}) == "1.0.0"
    active = Promotion(namespace="t", evolved_version="1.0.1", original_version="1.0.0", status="active")
    assert served_before([v1, evolved, v2], active, {"t@2.0.0"}) == "1.0.1"  # a promotion decides
    back = active.model_copy(update={"status": "rolled_back"})
    assert served_before([old, v1, evolved, v2], back, {"t@0.5.0", "t@2.0.0"}) == "0.5.0"  # as before: the original


def test_best_active_variant_is_served_and_a_testing_one_with_the_ab_probability() -> None:
    variants = [variant("0", "active", 10, 5), variant("1", "active", 10, 8, at=1), variant("2", "testing", at=2)]
    assert served(variants, "c", "t@1", None, 0.0) == "1"
    share = [served(variants, f"c{i}", "t@1", None, 0.3) for i in range(2000)]
    assert 0.25 < share.count("2") / len(share) < 0.35 and set(share) == {"1", "2"}
    assert served([], "c", "t@1", None, 0.3) == "0"  # the manifest's description


def test_a_variant_for_another_environment_is_not_served() -> None:
    variants = [variant("0", "active", 10, 5), variant("1", "active", 10, 9, environment="staging", at=1)]
    assert served(variants, "c", "t@1", "production", 0.0) == "0"
    assert served(variants, "c", "t@1", "staging", 0.0) == "1"


def test_a_better_testing_variant_is_promoted_and_a_worse_one_retired() -> None:
    variants = [variant("0", "active", 20, 10), variant("1", "testing", 10, 9), variant("2", "testing", 10, 2),
                variant("3", "testing", 3, 3)]
    assert judge(variants, min_trials=10) == {"1": "active", "2": "deprecated"}


def test_a_testing_variant_that_only_ties_the_incumbent_is_retired() -> None:
    """QA evolution F8: both described calls that all succeeded, the variant on more of them (4/4
    against 1/1, 10/10 against 2/2): the smoothed rate promoted the variant, a second "active"."""
    assert judge([variant("0", "active", 1, 1), variant("1", "testing", 4, 4, at=1)], min_trials=4) == {"1": "deprecated"}
    assert judge([variant("0", "active", 2, 2), variant("1", "testing", 10, 10, at=1)], min_trials=4) == {"1": "deprecated"}
    assert judge([variant("0", "active", 4, 3), variant("1", "testing", 4, 4, at=1)], min_trials=4) == {"1": "active"}
    assert judge([variant("0", "active"), variant("1", "testing", 4, 3, at=1)], min_trials=4) == {"1": "active"}  # 0.75 > 0.5


def test_a_testing_variant_is_judged_against_the_incumbent_of_its_own_environment() -> None:
    variants = [variant("0", "active", 20, 10), variant("1", "active", 20, 19, environment="staging", at=1),
                variant("2", "testing", 10, 7, environment="production", at=2)]
    # 0.70 beats production's incumbent (the general description, 0.50), not staging's (0.95).
    assert judge(variants, min_trials=10) == {"2": "active"}


def test_a_stage_whose_sandbox_could_not_start_says_so_apart_from_a_candidates_failure() -> None:
    """QA 57d M4: "the stage's subprocess failed: unavailable: cannot start ..." was kept as the
    candidate's failure, and the mutation skipped once the tool user could run Python."""
    from workers.runners import RunOutcome
    from workers.sandbox import SANDBOX_NOT_STARTED, SubprocessSandbox

    said = SubprocessSandbox._died(RunOutcome.fail(FailureClass.unavailable, "cannot start 'python': Permission denied"), 20)
    assert said == f"{SANDBOX_NOT_STARTED}: cannot start 'python': Permission denied"
    crashed = SubprocessSandbox._died(RunOutcome.fail(FailureClass.crash, "exit status 1"), 20)
    assert SANDBOX_NOT_STARTED not in crashed  # a candidate that took its sandbox down is its own failure


# QA 58b: behaviours a single mutation changed while every unit test passed
@pytest.mark.parametrize(
    ("successes", "failures", "parent", "verdict"),
    [
        (4, 1, 0.5, "continue"),    # T5: K runs are not K successes
        (3, 2, 0.75, "rollback"),   # T2: 0.60 is more than 0.1 under 0.75
        (2, 3, 0.5, "continue"),    # T6: 0.40 is not *more* than 0.1 under 0.5
        (14, 2, 0.9, "continue"),   # T3: 16 runs at 0.875 < 0.9 is no rollback before 4K = 20
        (16, 4, 0.9, "rollback"),   # ...and is at 4K runs
    ],
)
def test_trial_verdicts_at_their_boundaries(successes: int, failures: int, parent: float, verdict: str) -> None:
    assert decide(TrialCounts(evolved_successes=successes, evolved_failures=failures), parent, RULES) == verdict


def test_the_parents_rate_in_the_trial_counts_from_min_parent_runs() -> None:
    """Mutant T4 (`>= min_parent_runs` -> `>`) survived."""
    rules = TrialRules(successes=5, min_parent_runs=3)
    assert parent_rate(TrialCounts(parent_successes=3), 0, 10, rules) == 1.0  # 3 runs in the trial: its rate
    assert parent_rate(TrialCounts(parent_successes=2), 0, 10, rules) == 0.0  # 2: its history's


class RecordingSandbox:
    """Passes static checks; returns the given results and records each run's inputs."""

    def __init__(self, results: list[RunOutcome]) -> None:
        self.results = results
        self.runs: list[list[dict]] = []

    def static(self, manifest: ToolManifest, timeout_s: float) -> StageResult:
        return StageResult(stage="static", passed=True, checked=1)

    def run(self, manifest: ToolManifest, inputs: list[dict], timeout_s: float) -> StageRun:
        self.runs.append(inputs)
        return StageRun(results=self.results)


A, B = {"values": [3, 1]}, {"values": [2]}


REFUSED = RunOutcome.fail(FailureClass.bad_input, "KeyError: 'numbers'")


def test_a_tool_with_side_effects_is_not_replayed() -> None:
    """Mutant V6 (`if manifest.side_effects:` -> `if False:`) survived. README: replay is not for a
    tool whose manifest says side_effects: true (QA Q: a ledger got real calls' events twice more)."""
    sandbox = RecordingSandbox([RunOutcome.ok(1), RunOutcome.ok(1)])
    evidence = Evidence(failures=[FailedRun(version="1.0.0", input=A, error_class=FailureClass.timeout)],
                        successes=[SuccessfulRun(scenario="s", input=B, shape="number")])
    stages = verify(tool(side_effects=True), evidence, sandbox, VerifyConfig())
    assert sandbox.runs == [] and stages[-1].stage == "replay" and stages[-1].checked == 0 and stages[-1].passed


def test_an_input_refused_as_bad_before_still_refused_fails_the_replay() -> None:
    """Mutant V4 (the `not in refused_before` condition dropped) survived. README: a failing input
    must now succeed, or, *if it failed for another reason*, may be refused as bad input."""
    evidence = Evidence(failures=[FailedRun(version="1.0.0", input=A, error_class=FailureClass.bad_input)],
                        successes=[SuccessfulRun(scenario="s", input=B, shape="number")])
    replay = verify(tool(), evidence, RecordingSandbox([REFUSED, RunOutcome.ok(1)]), VerifyConfig())[-1]
    assert not replay.passed and "still fails" in replay.problems[0]


def test_a_timeout_now_refused_as_bad_input_passes_only_while_the_candidate_serves_other_inputs() -> None:
    """Mutants V11 (`worked = worked or any(...)` -> `worked = worked`) and V12 (`if worked and ...`
    dropped) survived. README: ... may be refused as bad input by a candidate that serves others."""
    timed_out = FailedRun(version="1.0.0", input=A, error_class=FailureClass.timeout)
    serves = Evidence(failures=[timed_out], successes=[SuccessfulRun(scenario="s", input=B, shape="number")])
    replay = verify(tool(), serves, RecordingSandbox([REFUSED, RunOutcome.ok(1)]), VerifyConfig())[-1]
    assert replay.passed and "no longer fails as it did" in replay.problems[0]
    alone = Evidence(failures=[timed_out])  # it serves nothing: the refusal is no fix
    replay = verify(tool(), alone, RecordingSandbox([REFUSED]), VerifyConfig())[-1]
    assert not replay.passed and "still fails" in replay.problems[0]


def test_a_success_the_parent_answers_otherwise_when_run_again_is_not_reproducible() -> None:
    """Mutant V10 (`r.success and r.output == s.output` -> `r.success`) survived: a tool whose answers
    vary (a quote, a clock) would hold every candidate to one old answer."""
    kept = SuccessfulRun.of("s", B, {"rate": 1.1})
    evidence = Evidence(successes=[kept])
    same = reproduce_successes(tool(), evidence, RecordingSandbox([RunOutcome.ok({"rate": 1.1})]), VerifyConfig())
    other = reproduce_successes(tool(), evidence, RecordingSandbox([RunOutcome.ok({"rate": 1.2})]), VerifyConfig())
    assert same.successes[0].reproducible and not other.successes[0].reproducible


def test_a_stage_timeout_is_each_runs_timeout_and_a_half_after_start_up_capped() -> None:
    """Mutants V1 (PER_RUN_SLACK 1.5 -> 1.0) and V2 (`min(cap, ...)` -> `max`) survived. README:
    FITTEST_VERIFY_STAGE_TIMEOUT_S is the hard timeout of each stage that runs the candidate."""
    from evolution.verification import stage_timeout

    assert stage_timeout(tool(timeout_s=2.0), 4, 120.0) == pytest.approx(10.0 + 4 * 2.0 * 1.5)
    assert stage_timeout(tool(timeout_s=60.0), 5, 120.0) == 120.0


def test_the_replay_runs_each_failing_input_once_and_n_successes() -> None:
    """Mutants V3 (replay_successes + 1) and V8 (no de-duplication) survived. README:
    FITTEST_VERIFY_REPLAY_SUCCESSES recent successful inputs of the parent are replayed (N)."""
    sandbox = RecordingSandbox([RunOutcome.ok(1)] * 4)
    evidence = Evidence(failures=[FailedRun(version="1.0.0", input=A, error_class=FailureClass.timeout)] * 2,
                        successes=[SuccessfulRun(scenario="s", input={"values": [i]}, shape="number") for i in range(5)])
    verify(tool(), evidence, sandbox, VerifyConfig(replay_successes=3))
    assert sandbox.runs == [[A, {"values": [0]}, {"values": [1]}, {"values": [2]}]]


def test_the_cascade_stops_at_failed_test_cases() -> None:
    """Mutant V9 (`if not tests.passed:` -> `if False:`) survived: nothing is replayed for a candidate
    that fails its own test cases."""
    sandbox = RecordingSandbox([RunOutcome.ok(2)])
    evidence = Evidence(failures=[FailedRun(version="1.0.0", input=A, error_class=FailureClass.timeout)])
    stages = verify(tool(test_cases=[{"input": B, "expect": 1}]), evidence, sandbox, VerifyConfig())
    assert [s.stage for s in stages] == ["static", "tests"] and not stages[-1].passed
    assert sandbox.runs == [[B]]


class Fake:
    def __init__(self, name: str, handles: set[FailureClass], cost: int) -> None:
        self.name, self.handles, self.cost = name, frozenset(handles), cost

    def propose(self, ctx: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


def test_mutators_for_the_most_frequent_class_come_first_cheaper_first_and_current_failures_count_double() -> None:
    """Mutants M2 (cost order reversed), M4 (`min(rank...)` -> `max`) and M5 (current failures count 1,
    not 2) survived."""
    t, u = FailureClass.timeout, FailureClass.unavailable
    mutators: list[Mutator] = [Fake("dear_timeout", {t}, 5), Fake("cheap_timeout", {t}, 1), Fake("both", {t, u}, 3), Fake("retry", {u}, 1)]
    # one current timeout (counts 2) against one similar past unavailable (counts 1): timeout first
    evidence = Evidence(failures=[FailedRun(version="1.0.0", input={}, error_class=t)],
                        similar_failures=[PastFailure(version="1.0.0", scenario="s", error_class=u)])
    assert [m.name for m in order_for(mutators, evidence)] == ["cheap_timeout", "both", "dear_timeout", "retry"]
    # one current timeout against two past unavailable: 2 against 2, and the current failure's class
    # (counted first) goes first; against three, unavailable goes first
    past = [PastFailure(version="1.0.0", scenario="s", error_class=u)]
    assert [m.name for m in order_for(mutators, evidence.model_copy(update={"similar_failures": past * 2}))][0] == "cheap_timeout"
    assert [m.name for m in order_for(mutators, evidence.model_copy(update={"similar_failures": past * 3}))][0] == "retry"


def test_a_plugin_switched_off_is_no_load_error() -> None:
    """Mutant M6 (`if mutator is None: continue` dropped) survived: the code mutator without a URL
    was reported as a plugin that 'did not return a mutator'."""
    from evolution.mutation import MutatorConfig, load_mutators

    assert load_mutators(MutatorConfig())[1] == []


def test_a_verified_candidates_changelog_reason_says_what_each_stage_checked() -> None:
    """QA 63a: "passed static, tests and replay" of a tool with side effects and no test cases: nothing
    had run but its import."""
    nothing = [StageResult(stage="static", passed=True, checked=1),
               StageResult(stage="tests", passed=True, problems=["the tool has no test cases"]),
               StageResult(stage="replay", passed=True, problems=["not replayed: the tool has side effects"])]
    assert verified_reason(nothing) == ("passed static; tests: the tool has no test cases; "
                                        "replay: not replayed: the tool has side effects")
    checked = [StageResult(stage="static", passed=True, checked=1), StageResult(stage="tests", passed=True, checked=1),
               StageResult(stage="replay", passed=True, checked=3)]
    assert verified_reason(checked) == "passed static; tests (1 test case); replay (3 inputs)"


def test_a_version_declares_the_inputs_its_test_cases_expect_an_error_on() -> None:
    """QA 65b: its refusals of such an input are the tool doing its job (workers/tasks/execution.py)."""
    from selection.manifest import ToolManifest

    manifest = ToolManifest(name="prime_count", version="1.0.0", description="Counts primes.",
                            implementation={"kind": "http", "url": "http://127.0.0.1:9/run"},
                            test_cases=[{"input": {"n": 100}, "expect": {"primes": 25}}, {"input": {"n": -5}, "expect_error": True}])
    assert manifest.declares_refused({"n": -5}) and manifest.declares_refused({"n": -5.0})
    assert not manifest.declares_refused({"n": 100}) and not manifest.declares_refused({"n": -6})
    assert not manifest.declares_refused({"n": -5, "extra": 1})

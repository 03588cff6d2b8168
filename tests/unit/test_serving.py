"""What promotions and newcomers' trials decide about a ranking (selection/serving.py), and what a
call's attempts say once run (selection/call_endings.py), without any service."""

from __future__ import annotations

import math
from typing import Any

import pytest

from selection.evidence import CandidateEvidence
from selection.feedback import JudgedOutput
from selection.models import Candidate, CallPlan, CallRequest, FailureClass, OutcomeRecord, ScoreBreakdown, ToolExecutionResult
from selection.call_endings import (
    input_refused_message,
    refused_by_a_doer,
    refused_for_its_namespace,
    refused_input,
    served_by_whom_note,
    serves_unconfirmed,
    took_a_refused_input_note,
)
from selection.job_record import does_such_jobs, does_the_job, proven, refuses_everything
from selection.serving import (
    best_match_again,
    best_matches,
    ServedVersions,
    breaker_probe,
    evolved_first,
    explored_first,
    newcomer_to_try,
    passed_over,
    probed_first,
    second_opinion,
    served_first,
    tried_first,
)
from tests.candidates import candidate, matching


def keys(ranked: list[Candidate]) -> list[str]:
    return [c.key for c in ranked]


RANKED = [candidate("a", "1.1.0"), candidate("b"), candidate("a", "1.0.0"), candidate("c")]


@pytest.mark.parametrize(("call", "served", "order"), [
    pytest.param(CallRequest(scenario="x"), ServedVersions(), keys(RANKED), id="nothing promoted leaves the policy's order"),
    pytest.param(CallRequest(scenario="x"), ServedVersions(by_namespace={"a": "1.0.0"}),
                 ["a@1.0.0", "b@1.0.0", "a@1.1.0", "c@1.0.0"],
                 id="a namespace serves its version first in the place the policy gave the namespace"),
    pytest.param(CallRequest(scenario="x"), ServedVersions(by_namespace={"a": "1.0.0"}, rolled_back={"a@1.1.0"}),
                 ["b@1.0.0", "a@1.0.0", "c@1.0.0"], id="a rolled back version is not tried"),
    pytest.param(CallRequest(scenario="x", namespace="c"), ServedVersions(by_namespace={"a": "1.1.0", "c": "1.0.0"}),
                 ["c@1.0.0", "a@1.1.0", "b@1.0.0", "a@1.0.0"], id="a namespace call starts with what its namespace serves"),
    pytest.param(CallRequest(scenario="x", namespace="c"), ServedVersions(by_namespace={"c": "0.9.0"}),
                 ["c@1.0.0", "a@1.1.0", "b@1.0.0", "a@1.0.0"],
                 id="a namespace call whose served version is not offered starts with the namespace's other version"),
    pytest.param(CallRequest(scenario="x", namespace="a"), ServedVersions(by_namespace={"a": "1.0.0"}),
                 ["a@1.0.0", "a@1.1.0", "b@1.0.0", "c@1.0.0"],
                 id="a namespace call tries its namespace's other versions before other tools"),
])
def test_served_first(call: CallRequest, served: ServedVersions, order: list[str]) -> None:
    assert keys(served_first(call, RANKED, served)) == order


def test_a_version_a_trials_share_drew_logs_that_share_in_its_probability() -> None:
    """QA V: with 1.1.0 on a 25 % trial, both it and the version it is tried against logged
    probability 1.0 as the first candidate, where each went first on its share of the calls."""
    def ranked() -> list[Candidate]:
        placed = [candidate("a", "1.0.0"), candidate("b"), candidate("a", "1.1.0")]
        for c, p in zip(placed, (0.8, 0.15, 0.05)):
            c.probability = p
            c.breakdown = ScoreBreakdown(rationale="ranked")
        return placed

    on_trial = served_first(CallRequest(scenario="x"), ranked(), ServedVersions(by_namespace={"a": "1.1.0"}, chance={"a": 0.25}))
    # The share decides the first place of `a` only; its other version's place follows (QA recheck N4).
    assert [(c.key, c.probability) for c in on_trial] == [("a@1.1.0", 0.2), ("b@1.0.0", 0.15), ("a@1.0.0", 0.05)]
    assert on_trial[0].breakdown is not None and "served first on 25% of the calls, by a trial's share" in on_trial[0].breakdown.rationale
    rest = served_first(CallRequest(scenario="x"), ranked(), ServedVersions(by_namespace={"a": "1.0.0"}, chance={"a": 0.75}))
    assert [(c.key, c.probability) for c in rest] == [("a@1.0.0", 0.6), ("b@1.0.0", 0.15), ("a@1.1.0", 0.05)]
    active = served_first(CallRequest(scenario="x"), ranked(), ServedVersions(by_namespace={"a": "1.1.0"}))
    assert [(c.key, c.probability) for c in active] == [("a@1.1.0", 0.8), ("b@1.0.0", 0.15), ("a@1.0.0", 0.05)]
    # A call to the namespace starts with the version drawn, whatever place the policy gave it.
    called = served_first(CallRequest(scenario="x", namespace="a"), ranked(), ServedVersions(by_namespace={"a": "1.1.0"}, chance={"a": 0.25}))
    assert (called[0].key, called[0].probability) == ("a@1.1.0", 0.25)
    # A place is its tool's: the chance the policy gave any version of `a` there, when it says so (QA ops L2).
    tool_chances = ranked()
    for c, p in zip(tool_chances, (0.97, 0.15, 0.05)):
        c.namespace_probability = p
    active = served_first(CallRequest(scenario="x"), tool_chances, ServedVersions(by_namespace={"a": "1.1.0"}))
    assert [(c.key, c.probability) for c in active] == [("a@1.1.0", 0.97), ("b@1.0.0", 0.15), ("a@1.0.0", 0.05)]


def test_a_trials_two_sides_fall_back_to_each_other_before_any_other_tool() -> None:
    """QA 64d: a version on trial that failed fell back to a weak match of another tool, placed
    between the namespace's two places, before the version it is tried against."""
    ranked = [candidate("caps"), candidate("shout", "1.0.0"), candidate("words"), candidate("shout", "1.1.0")]
    on_trial = ServedVersions(by_namespace={"shout": "1.1.0"}, chance={"shout": 0.25}, other_side={"shout": "1.0.0"})
    assert keys(served_first(CallRequest(scenario="x"), ranked, on_trial)) == ["caps@1.0.0", "shout@1.1.0", "shout@1.0.0", "words@1.0.0"]
    rest = ServedVersions(by_namespace={"shout": "1.0.0"}, chance={"shout": 0.75}, other_side={"shout": "1.1.0"})
    assert keys(served_first(CallRequest(scenario="x"), ranked, rest)) == ["caps@1.0.0", "shout@1.0.0", "shout@1.1.0", "words@1.0.0"]
    # Without a trial the namespace keeps the places the policy gave it.
    active = ServedVersions(by_namespace={"shout": "1.1.0"})
    assert keys(served_first(CallRequest(scenario="x"), ranked, active)) == ["caps@1.0.0", "shout@1.1.0", "words@1.0.0", "shout@1.0.0"]


def test_a_call_retried_after_its_evolution_tries_the_promoted_version_first() -> None:
    served = ServedVersions(promoted={"c@1.0.0"})
    assert keys(evolved_first(CallRequest(scenario="x", after_evolution=True), RANKED, served))[0] == "c@1.0.0"
    assert keys(evolved_first(CallRequest(scenario="x"), RANKED, served)) == keys(RANKED)


# ------------------------------------------------------------------ a tool new to the running system
def evidence(name: str, similarity: float, runs: int = 0) -> CandidateEvidence:
    return CandidateEvidence(manifest=candidate(name).manifest, similarity=similarity, successes=runs)


def test_a_newcomer_that_matches_the_job_about_as_well_as_the_best_is_tried() -> None:
    found = [evidence("universal_convert", 0.62, runs=300), evidence("toml2json", 0.58), evidence("slugify", 0.30)]
    call = CallRequest(scenario="convert this toml to json")
    tried = newcomer_to_try(call, found, {"toml2json"}, runs=5)
    assert tried is not None and tried.key == "toml2json@1.0.0"
    # Not one that matches far worse than the best, nor one that has run its trial's runs already,
    # nor a tool of the first catalog.
    assert newcomer_to_try(call, found, {"slugify"}, runs=5) is None
    assert newcomer_to_try(call, [found[0], evidence("toml2json", 0.58, runs=5)], {"toml2json"}, runs=5) is None
    assert newcomer_to_try(call, found, set(), runs=5) is None
    # QA K: nor one a vague job matches about as badly as the best (its trial was used up on jobs it
    # could not do), nor one within the margin only because the job's own tool is held back.
    vague = [evidence("universal_convert", 0.33, runs=300), evidence("ini2json", 0.34)]
    assert newcomer_to_try(CallRequest(scenario="process this file"), vague, {"ini2json"}, runs=5) is None
    held = [evidence("universal_convert", 0.62, runs=300), evidence("json2yaml", 0.67)]
    assert newcomer_to_try(call, held, {"json2yaml"}, runs=5) is not None
    assert newcomer_to_try(call, held, {"json2yaml"}, runs=5, best_match=0.9) is None
    # QA 56a L2: nor one whose outputs on such jobs people judge wrong, before its runs are used up.
    wrong = JudgedOutput(0.95, 10.0, True)
    shouting = [found[0], evidence("toml2json", 0.58).model_copy(update={"judged_outputs": [wrong, wrong]})]
    assert newcomer_to_try(call, shouting, {"toml2json"}, runs=5) is None
    assert newcomer_to_try(call, [found[0], shouting[1].model_copy(update={"judged_outputs": [wrong]})], {"toml2json"},
                           runs=5) is not None  # one judgement may be a slip


def test_of_a_newcomer_with_several_versions_the_served_one_is_tried_until_the_tool_has_run_its_runs() -> None:
    def version(v: str, runs: int) -> CandidateEvidence:
        return CandidateEvidence(manifest=candidate("wc2", v).manifest, similarity=0.7, successes=runs)

    call = CallRequest(scenario="how many words are in this text")
    served = ServedVersions(by_namespace={"wc2": "1.0.0"})
    tried = newcomer_to_try(call, [version("0.5.0", 0), version("1.0.0", 2)], {"wc2"}, runs=5, served=served)
    assert tried is not None and tried.key == "wc2@1.0.0"
    # QA N: once the served 1.0.0 had run its runs, the fallback 0.5.0, with none, was tried first
    assert newcomer_to_try(call, [version("0.5.0", 0), version("1.0.0", 5)], {"wc2"}, runs=5, served=served) is None
    assert newcomer_to_try(call, [version("0.5.0", 3), version("1.0.0", 2)], {"wc2"}, runs=5, served=served) is None


def test_a_call_that_names_what_it_wants_gets_no_newcomer() -> None:
    found = [evidence("universal_convert", 0.62, runs=300), evidence("toml2json", 0.61)]
    for call in (CallRequest(scenario="x", namespace="universal_convert"),
                 CallRequest(scenario="x", namespace="universal_convert", version="1.0.0"),
                 CallRequest(scenario="x", after_evolution=True)):
        assert newcomer_to_try(call, found, {"toml2json"}, runs=5) is None


def test_a_newcomer_tried_first_says_so_with_the_share_as_its_probability() -> None:
    ranked = [candidate("a"), candidate("b"), candidate("c")]
    for c in ranked:
        c.breakdown = ScoreBreakdown(rationale="policy")
    out = tried_first(ranked, "c@1.0.0", 0.25)
    assert keys(out) == ["c@1.0.0", "a@1.0.0", "b@1.0.0"]
    assert out[0].probability == 0.25 and "new to the system" in out[0].breakdown.rationale
    assert keys(tried_first(out, "c@1.0.0", 0.25)) == keys(out)  # first already: unchanged
    assert keys(tried_first(out, "zzz@1.0.0", 0.25)) == keys(out)  # not ranked: unchanged


def test_the_logged_probability_of_the_first_place_counts_the_newcomers_share() -> None:
    # QA K: with a newcomer eligible on 25% of the calls, the incumbent placed first on the other
    # 75% logged probability 1.0.
    ranked = [candidate("a"), candidate("c")]
    ranked[0].probability = 0.8
    assert passed_over(ranked, "c@1.0.0", 0.25)[0].probability == 0.6
    mine = [candidate("c"), candidate("a")]
    mine[0].probability = 0.8  # the policy placed the newcomer first itself: it goes first on 0.25 + 0.75 * 0.8
    assert passed_over(mine, "c@1.0.0", 0.25)[0].probability == 0.85
    drawn = [candidate("c"), candidate("a")]
    drawn[0].probability = 0.8
    assert tried_first(drawn, "c@1.0.0", 0.25)[0].probability == 0.85
    assert passed_over([], "c@1.0.0", 0.25) == []


def test_a_half_open_version_that_did_the_job_before_is_offered_its_probe_first() -> None:
    """QA W: a tool fixed after its breaker opened had fallen behind the one that took over, and no
    call tried it again (first on 0 of 90 calls): its half-open breaker's probe never ran."""
    def found(name: str, similarity: float, successes: list[float], version: str = "1.0.0") -> CandidateEvidence:
        return CandidateEvidence(manifest=candidate(name, version).manifest, similarity=similarity,
                                 success_similarities=successes)

    call = CallRequest(scenario="how many yen for 200 dollars")
    ranked = [found("money_convert", 0.6, [0.99, 0.97]), found("currency_rates", 0.7, [0.99]),
              found("stock_quotes", 0.5, [])]
    half_open = {"currency_rates@1.0.0", "stock_quotes@1.0.0"}
    assert breaker_probe(call, ranked, half_open, ServedVersions()) == "currency_rates@1.0.0"
    # Not one whose successes were other jobs, nor one that is closed, nor one its namespace does
    # not serve first, nor one rolled back.
    assert breaker_probe(call, [found("currency_rates", 0.7, [0.6])], half_open, ServedVersions()) is None
    assert breaker_probe(call, ranked, {"money_convert@2.0.0"}, ServedVersions()) is None
    assert breaker_probe(call, ranked, half_open, ServedVersions(by_namespace={"currency_rates": "2.0.0"})) is None
    assert breaker_probe(call, ranked, half_open, ServedVersions(rolled_back={"currency_rates@1.0.0"})) is None
    # Nor on a call that names what it wants.
    for named in (CallRequest(scenario="x", namespace="money_convert"),
                  CallRequest(scenario="x", namespace="currency_rates", version="1.0.0"),
                  CallRequest(scenario="x", after_evolution=True)):
        assert breaker_probe(named, ranked, half_open, ServedVersions()) is None


def test_the_probe_goes_first_with_probability_one_and_says_why() -> None:
    ranked = [candidate("a"), candidate("b"), candidate("c")]
    for c in ranked:
        c.breakdown = ScoreBreakdown(rationale="policy")
        c.probability = 0.3
    out = probed_first(ranked, "b@1.0.0")
    assert keys(out) == ["b@1.0.0", "a@1.0.0", "c@1.0.0"]
    assert out[0].probability == 1.0 and "circuit breaker's probe" in out[0].breakdown.rationale
    assert out[0].breakdown.extra["breaker_probe"] == 1.0
    assert keys(probed_first(out, "zzz@1.0.0")) == keys(out)  # not ranked: unchanged


def judged(name: str, wrong: list[float], right: list[float] | None = None, *, right_last: bool = False,
           successes: list[float] | None = None, failures: list[float] | None = None,
           similarity: float = 0.5) -> CandidateEvidence:
    """A candidate with outputs judged wrong and right (by their scenarios' similarities), the right
    ones judged after the wrong ones when `right_last`, its successes and failures nearby, and its
    description's match."""
    outputs = [JudgedOutput(s, 10.0 + i, True) for i, s in enumerate(wrong)]
    outputs += [JudgedOutput(s, (100.0 if right_last else 0.0) + i, False) for i, s in enumerate(right or [])]
    return CandidateEvidence(manifest=candidate(name).manifest, judged_outputs=outputs, similarity=similarity,
                             namespace_success_similarities=successes or [], success_similarities=successes or [],
                             failure_similarities=failures or [])


def test_a_tool_people_judged_wrong_on_such_jobs_gets_a_second_opinion_tried_in_its_place() -> None:
    """QA W: 31 outputs of a tool judged wrong, and it stayed first: it ran without an error, so no
    call fell back to the other tool that does the job."""
    call = CallRequest(scenario="how many yen for 200 dollars")
    ranked = [candidate("currency_rates"), candidate("money_convert"), candidate("fx")]
    found = [judged("currency_rates", [1.0, 0.95]), judged("money_convert", []), judged("fx", [])]
    assert second_opinion(call, ranked, found) == "money_convert@1.0.0"
    # One judgement may be a slip; as many judged right, or judgements of other jobs, are no verdict.
    for first in (judged("currency_rates", [1.0]), judged("currency_rates", [1.0, 0.95], [0.9, 0.99]),
                  judged("currency_rates", [0.7, 0.6, 0.75])):
        assert second_opinion(call, ranked, [first, *found[1:]]) is None
    # Nor is it one a person judged right after the wrong ones (fixed, say), nor, once it has been
    # judged right many times since, one judged wrong again once (QA Z: the wrong judgements from
    # before the fix brought the second opinions back).
    assert second_opinion(call, ranked, [judged("currency_rates", [1.0, 0.95, 0.9], [0.99], right_last=True),
                                         *found[1:]]) is None
    fixed = judged("currency_rates", [1.0] * 9, [1.0] * 5, right_last=True)
    fixed.judged_outputs.append(JudgedOutput(1.0, 1_000.0, True))  # one more wrong, the latest
    assert second_opinion(call, ranked, [fixed, *found[1:]]) is None
    fixed.judged_outputs.append(JudgedOutput(1.0, 1_001.0, True))  # ...and the three latest of five wrong
    fixed.judged_outputs.append(JudgedOutput(1.0, 1_002.0, True))
    assert second_opinion(call, ranked, [fixed, *found[1:]]) == "money_convert@1.0.0"
    # A tool that did such jobs goes before a better-placed one that did not (QA X: a currency tool
    # placed second was asked to convert temperatures); one people judged wrong too, one that
    # failed such jobs, and one whose breaker is half-open are passed over.
    assert second_opinion(call, ranked, [found[0], found[1], judged("fx", [], successes=[0.9])]) == "fx@1.0.0"
    assert second_opinion(call, ranked, [found[0], judged("money_convert", [0.9, 0.9]), found[2]]) == "fx@1.0.0"
    assert second_opinion(call, ranked, [found[0], judged("money_convert", [], failures=[0.95]), found[2]]) == "fx@1.0.0"
    assert second_opinion(call, ranked, found, half_open={"money_convert@1.0.0"}) == "fx@1.0.0"
    assert second_opinion(call, ranked, [found[0], judged("money_convert", [], failures=[0.95]),
                                         judged("fx", [], failures=[1.0])]) is None
    # With nobody else having done such jobs, the one whose words match the job best (QA Y: the
    # policy placed a currency tool, 0.38 similar, before a thermometer tool 0.41 similar).
    assert second_opinion(call, ranked, [found[0], judged("money_convert", [], similarity=0.38),
                                         judged("fx", [], similarity=0.41)]) == "fx@1.0.0"
    # ...if its words are about the job at all (QA 55a: a word counter, 0.17 for a hashing job, ran
    # without an error on every input, and its "successes" made it the job's first choice).
    assert second_opinion(call, ranked, [found[0], judged("money_convert", [], similarity=0.17),
                                         judged("fx", [], similarity=0.12)]) is None
    assert second_opinion(call, ranked, [found[0], judged("money_convert", [], similarity=0.17),
                                         judged("fx", [], similarity=0.12, successes=[0.9])]) == "fx@1.0.0"
    # One that failed such jobs but did them too, and was judged right the last time, may be asked
    # again (QA Y: a tool fixed and judged right again never was).
    fixed = judged("money_convert", [1.0, 1.0, 1.0], [1.0], right_last=True, successes=[1.0], failures=[1.0, 1.0, 1.0])
    assert second_opinion(call, ranked, [found[0], fixed, judged("fx", [], failures=[1.0])]) == "money_convert@1.0.0"
    # A namespace's version that is not the one it serves (placed after it) is not asked in its place
    # (QA ops: sort_numbers' fallback version, tied with the served one).
    fallback = CandidateEvidence(manifest=candidate("fx", "0.9.0").manifest, similarity=0.45)
    assert second_opinion(call, [*ranked, candidate("fx", "0.9.0")],
                          [found[0], judged("money_convert", [], similarity=0.38), judged("fx", [], similarity=0.41),
                           fallback]) == "fx@1.0.0"
    # A call that names a tool gets none.
    assert second_opinion(CallRequest(scenario="x", namespace="currency_rates"), ranked, found) is None


def placed_by_the_policy(*names: str) -> list[Candidate]:
    """Candidates as the policy placed them: each with probability 0.9 and its rationale."""
    placed = [candidate(name) for name in names]
    for c in placed:
        c.probability, c.breakdown = 0.9, ScoreBreakdown(rationale="policy")
    return placed


def test_the_second_opinion_goes_first_on_its_share_of_the_calls_and_is_logged_so() -> None:
    def ranked() -> list[Candidate]:
        return placed_by_the_policy("currency_rates", "money_convert")

    call = CallRequest(scenario="how many yen for 200 dollars")
    found = [judged("currency_rates", [1.0, 1.0]), judged("money_convert", [])]
    tried = explored_first(call, ranked(), found, 0.25, lambda salt: True, newcomer=None, passed=None, probe=None)
    assert keys(tried) == ["money_convert@1.0.0", "currency_rates@1.0.0"] and tried[0].probability == 0.25
    assert "judged wrong" in tried[0].breakdown.rationale and tried[0].breakdown.extra["second_opinion"] == 1.0
    kept = explored_first(call, ranked(), found, 0.25, lambda salt: False, newcomer=None, passed=None, probe=None)
    assert keys(kept) == ["currency_rates@1.0.0", "money_convert@1.0.0"] and kept[0].probability == 0.675
    # A half-open breaker's probe, and a newcomer drawn, go first before any second opinion.
    probed = explored_first(call, ranked(), found, 0.25, lambda salt: True, newcomer=None, passed=None,
                            probe="currency_rates@1.0.0")
    assert keys(probed)[0] == "currency_rates@1.0.0" and probed[0].probability == 1.0
    # A second opinion whose version a trial serves first on 25% of the calls goes first on 25% of
    # those (QA 56a M1: each side of the trial was logged 0.25, where they went first 6% and 19%).
    for chance in (0.25, 0.75):
        on_trial = ranked()
        on_trial[1].breakdown = ScoreBreakdown(rationale="policy", extra={"trial_share": chance})
        tried = explored_first(call, on_trial, found, 0.25, lambda salt: True, newcomer=None, passed=None, probe=None)
        assert keys(tried)[0] == "money_convert@1.0.0" and tried[0].probability == 0.25 * chance



def test_once_people_judged_its_latest_outputs_here_all_wrong_the_second_opinion_goes_first_on_every_call() -> None:
    """QA 63b: ten outputs in a row judged wrong, and the version still went first on three calls in
    four. Five of five latest is a verdict; four of five, or a right one among them, stays a share."""
    call = CallRequest(scenario="how many yen for 200 dollars")
    for wrong, right, every in (([1.0] * 5, [], True), ([1.0] * 10, [], True), ([1.0] * 4, [], False),
                                ([1.0] * 4, [1.0], False)):
        found = [judged("currency_rates", wrong, right), judged("money_convert", [])]  # a right one before the wrong
        placed = explored_first(call, placed_by_the_policy("currency_rates", "money_convert"), found, 0.25,
                                lambda salt: False, newcomer=None, passed=None, probe=None)
        assert keys(placed)[0] == ("money_convert@1.0.0" if every else "currency_rates@1.0.0"), (wrong, right)
        assert placed[0].probability == (1.0 if every else 0.675)
        assert ("judged wrong" in placed[0].breakdown.rationale) is every


def fell_over(name: str, similarity: float, outages: list[float], failures: list[float] | None = None,
              doing: list[float] | None = None) -> CandidateEvidence:
    """A candidate whose failures nearby are `failures` (default: the outages alone)."""
    return CandidateEvidence(manifest=candidate(name).manifest, similarity=similarity, outage_similarities=outages,
                             failure_similarities=outages if failures is None else failures, doing_similarities=doing or [])


def again(*args: Any, **kwargs: Any) -> tuple[str, bool] | None:
    """`best_match_again`'s choice: the version, and whether it goes first on every call."""
    chosen = best_match_again(*args, **kwargs)
    return None if chosen is None else (chosen.key, chosen.does_the_job)


def test_the_clear_best_match_is_tried_first_again_after_an_outage_handed_its_job_to_another_tool() -> None:
    """QA integration H1: one HTTP 500 of reverse_text (1.00 similar) and every later "reverse this
    string" call went to a word counter (0.25 similar) that "succeeded", reported as success."""
    call = CallRequest(scenario="reverse this string")
    ranked = [candidate("count_words"), candidate("reverse_text"), candidate("dedupe")]
    taker = CandidateEvidence(manifest=candidate("count_words").manifest, similarity=0.25, success_similarities=[1.0])
    found = [taker, fell_over("reverse_text", 1.0, [1.0]), fell_over("dedupe", 0.3, [])]
    best = best_matches(found)
    assert best == {"reverse_text@1.0.0"}
    assert again(call, ranked, found, best) == ("reverse_text@1.0.0", False)
    # Once its confirmed successes there make it one that does the job, on every call.
    done = fell_over("reverse_text", 1.0, [1.0], doing=[1.0, 1.0, 0.95])
    assert again(call, ranked, [taker, done, found[2]], best) == ("reverse_text@1.0.0", True)
    # Not when a failure nearby says it does the job wrong, nor after OUTAGES_RETRIED outages, nor
    # when it is half-open (its probe is the breaker's), nor for a call that names a tool.
    assert again(call, ranked, [taker, fell_over("reverse_text", 1.0, [1.0], [1.0, 0.9]), found[2]], best) is None
    assert again(call, ranked, [taker, fell_over("reverse_text", 1.0, [1.0, 0.99, 0.98]), found[2]], best) is None
    # QA recheck H-A: once it does the job, outages among its successes do not end it, nor does one
    # wrong answer; failures as many as its successes there do.
    doing = [1.0] * 13
    assert again(call, ranked, [taker, fell_over("reverse_text", 1.0, [1.0, 0.99, 0.98], doing=doing), found[2]],
                            best) == ("reverse_text@1.0.0", True)
    assert again(call, ranked, [taker, fell_over("reverse_text", 1.0, [1.0], [1.0, 0.9], doing=doing), found[2]],
                            best) == ("reverse_text@1.0.0", True)
    assert again(call, ranked, [taker, fell_over("reverse_text", 1.0, [1.0] * 3, [1.0] * 13, doing=doing),
                                           found[2]], best) is None
    assert again(call, ranked, found, best, half_open={"reverse_text@1.0.0"}) is None
    assert again(CallRequest(scenario="reverse this string", namespace="count_words"), ranked, found, best) is None
    # Nor when it has no failure here at all (the policy's order stands: the selection bench, whose
    # failures are wrong answers, never meets this rule), nor when the first one is a clear best match itself.
    assert again(call, ranked, [taker, fell_over("reverse_text", 1.0, []), found[2]], best) is None
    clear = CandidateEvidence(manifest=candidate("count_words").manifest, similarity=0.95)
    assert again(call, ranked, [clear, *found[1:]], best_matches([clear, *found[1:]])) is None
    # QA ops H1: a first candidate whose successes are confirmed (0.63 like a cube job, where the
    # best match is 1.00) still gives the job back: its confirmation never undid the rule.
    doer = CandidateEvidence(manifest=candidate("count_words").manifest, similarity=0.63, doing_similarities=[1.0] * 11)
    assert again(call, ranked, [doer, *found[1:]], best) == ("reverse_text@1.0.0", False)


def test_a_clear_best_match_that_does_the_job_goes_first_in_place_of_a_weak_match_without_an_outage() -> None:
    """QA recheck N11: two new character counters, 0.71 like the job, did it 4 times on their
    newcomer's share; a text reverser 0.37 like it kept 75 % of the calls by its 9 unconfirmed
    successes, answering with a reversed string."""
    call = CallRequest(scenario="count characters of this text")
    ranked = [candidate("reverse_text"), candidate("lang_real"), candidate("lang_typo")]
    weak = CandidateEvidence(manifest=candidate("reverse_text").manifest, similarity=0.37, success_similarities=[1.0] * 9)
    real = CandidateEvidence(manifest=candidate("lang_real").manifest, similarity=0.71, doing_similarities=[1.0] * 4)
    typo = CandidateEvidence(manifest=candidate("lang_typo").manifest, similarity=0.71)
    best = best_matches([weak, real, typo])
    chosen = best_match_again(call, ranked, [weak, real, typo], best)
    assert chosen is not None and (chosen.key, chosen.does_the_job, chosen.after_outage) == ("lang_real@1.0.0", True, False)
    # Not before it does the job, nor when its failures there are as many, nor in place of a first
    # candidate with a confirmed success of its own there (the policy's order stands between two that do it).
    assert again(call, ranked, [weak, real.model_copy(update={"doing_similarities": [1.0] * 2}), typo], best) is None
    assert again(call, ranked, [weak, real.model_copy(update={"failure_similarities": [1.0] * 4}), typo], best) is None
    doer = weak.model_copy(update={"doing_similarities": [0.9]})
    assert again(call, ranked, [doer, real, typo], best) is None
    # ...counted over its tool's versions: a new version of it on trial has none of its own (review).
    trial = [candidate("reverse_text", "1.1.0"), candidate("lang_real"), candidate("lang_typo"), candidate("reverse_text")]
    new = CandidateEvidence(manifest=candidate("reverse_text", "1.1.0").manifest, similarity=0.37)
    assert again(call, trial, [new, real, typo, doer], best_matches([new, real, typo, doer])) is None
    tried = explored_first(call, ranked, [weak, real, typo], 0.25, lambda salt: False, newcomer=None, passed=None,
                           probe=None, best=best)
    assert keys(tried)[0] == "lang_real@1.0.0" and tried[0].probability == 1.0
    assert "which does it here, in place of a tool with no confirmed success on it" in tried[0].breakdown.rationale


def test_the_best_match_again_counts_its_namespace_and_is_served_by_a_version_nobody_judges_wrong() -> None:
    """QA ops H1: a negation tool timed out once at onboarding; its evolved version went on trial
    beside it, the two split the successes that would have made it one that does the job, and a
    squaring tool kept the job; a judgement of the evolved version's output then ended the rule."""
    call = CallRequest(scenario="negate 12")
    ranked = [candidate("square_num"), candidate("negate_num", "1.1.0"), candidate("negate_num")]
    taker = CandidateEvidence(manifest=candidate("square_num").manifest, similarity=0.42, success_similarities=[1.0] * 3)
    evolved = CandidateEvidence(manifest=candidate("negate_num", "1.1.0").manifest, similarity=1.0, doing_similarities=[1.0, 1.0])
    parent = fell_over("negate_num", 1.0, [1.0], doing=[1.0])
    found = [taker, evolved, parent]
    best = best_matches(found)
    assert best == {"negate_num@1.1.0", "negate_num@1.0.0"}
    # Three confirmed successes of the namespace, against one timeout: first on every call, by the version placed first.
    assert again(call, ranked, found, best) == ("negate_num@1.1.0", True)
    # Before them, on a share of the calls.
    assert again(call, ranked, [taker, evolved.model_copy(update={"doing_similarities": []}), parent], best) == (
        "negate_num@1.1.0", False)
    # A version people judge wrong here is passed for the namespace's next one; the judgements count as failures.
    wrong = [JudgedOutput(similarity=1.0, wrong=True, timestamp=t) for t in (1.0, 2.0)]
    judged = evolved.model_copy(update={"judged_outputs": wrong, "failure_similarities": [1.0, 1.0],
                                        "doing_similarities": [1.0] * 3})
    assert again(call, ranked, [taker, judged, parent.model_copy(update={"doing_similarities": [1.0] * 2})],
                            best) == ("negate_num@1.0.0", True)
    # ...and when failures there are as many as the successes, neither goes first.
    assert again(call, ranked, [taker, judged, parent.model_copy(update={"doing_similarities": []})], best) is None


def test_the_clear_best_match_judged_wrong_once_goes_first_again_in_place_of_a_weak_match_with_no_record() -> None:
    """QA 64c: one output of a word counter (1.00 like the job, 1 success) judged wrong put a word
    reverser 0.40 like it first on 17 of the next 22 calls, each answered with reversed words as a
    success. One judgement lowers the tool; it does not hand its job to tools that do other jobs."""
    call = CallRequest(scenario="how many words are in this paragraph")
    ranked = placed_by_the_policy("word_reverse", "word_stats")
    taker = CandidateEvidence(manifest=candidate("word_reverse").manifest, similarity=0.40, success_similarities=[0.95])
    once = [JudgedOutput(similarity=1.0, wrong=True, timestamp=1.0)]
    counter = CandidateEvidence(manifest=candidate("word_stats").manifest, similarity=1.0, judged_outputs=once,
                                failure_similarities=[1.0])
    best = best_matches([taker, counter])
    chosen = best_match_again(call, ranked, [taker, counter], best)
    assert chosen is not None and (chosen.key, chosen.every_call, chosen.judged) == ("word_stats@1.0.0", True, True)
    tried = explored_first(call, ranked, [taker, counter], 0.25, lambda salt: False, newcomer=None, passed=None,
                           probe=None, best=best)
    assert keys(tried)[0] == "word_stats@1.0.0" and tried[0].probability == 1.0
    assert "one of whose outputs here a person judged wrong" in tried[0].breakdown.rationale
    # A newcomer still, it goes first on its share, and on the other calls by this rule: logged over
    # both (QA 64d: logged, and told, 0.25 where 6 of 6 calls tried it first).
    new = explored_first(call, placed_by_the_policy("word_reverse", "word_stats"), [taker, counter], 0.25,
                         lambda salt: True, newcomer="word_stats@1.0.0", passed=None, probe=None, best=best)
    assert keys(new)[0] == "word_stats@1.0.0" and new[0].probability == 1.0, new[0]
    alone = explored_first(call, placed_by_the_policy("word_reverse", "word_stats"), [taker, counter.model_copy(
        update={"judged_outputs": [], "failure_similarities": []})], 0.25, lambda salt: True, newcomer="word_stats@1.0.0",
        passed=None, probe=None, best=best)
    assert keys(alone)[0] == "word_stats@1.0.0" and alone[0].probability == 0.25, alone[0]
    # Judged wrong twice, people have spoken: the second opinions decide, not this rule; nor when it
    # failed here otherwise too (a wrong answer the policy saw), nor in place of a tool that did the job.
    twice = [*once, JudgedOutput(similarity=1.0, wrong=True, timestamp=2.0)]
    assert again(call, ranked, [taker, counter.model_copy(update={"judged_outputs": twice, "failure_similarities": [1.0, 1.0]})],
                 best) is None
    assert again(call, ranked, [taker, counter.model_copy(update={"failure_similarities": [1.0, 0.97]})], best) is None
    assert again(call, ranked, [taker.model_copy(update={"doing_similarities": [0.95]}), counter], best) is None


def test_the_best_match_again_goes_first_on_its_share_then_on_every_call_and_is_logged_so() -> None:
    def ranked() -> list[Candidate]:
        return placed_by_the_policy("count_words", "reverse_text")

    call = CallRequest(scenario="reverse this string")
    taker = CandidateEvidence(manifest=candidate("count_words").manifest, similarity=0.25, success_similarities=[1.0])
    found = [taker, fell_over("reverse_text", 1.0, [1.0])]
    best = {"reverse_text@1.0.0"}
    tried = explored_first(call, ranked(), found, 0.25, lambda salt: True, newcomer=None, passed=None, probe=None, best=best)
    assert keys(tried) == ["reverse_text@1.0.0", "count_words@1.0.0"] and tried[0].probability == 0.25
    assert "clear best match" in tried[0].breakdown.rationale and tried[0].breakdown.extra["best_match_again"] == 1.0
    kept = explored_first(call, ranked(), found, 0.25, lambda salt: False, newcomer=None, passed=None, probe=None, best=best)
    assert keys(kept) == ["count_words@1.0.0", "reverse_text@1.0.0"] and kept[0].probability == 0.675
    assert "first on the other 75% of such calls: the rest try reverse_text@1.0.0 first" in kept[0].breakdown.rationale
    found[1] = fell_over("reverse_text", 1.0, [1.0], doing=[1.0, 1.0, 1.0])
    always = explored_first(call, ranked(), found, 0.25, lambda salt: False, newcomer=None, passed=None, probe=None, best=best)
    assert keys(always)[0] == "reverse_text@1.0.0" and always[0].probability == 1.0


def evolved(name: str, version: str, parent: str) -> Candidate:
    c = candidate(name, version)
    return c.model_copy(update={"manifest": c.manifest.model_copy(update={"parent_version": parent})})


def test_an_evolved_version_is_not_charged_its_parents_failures_and_goes_first_on_the_calls_it_serves() -> None:
    """QA 50: reverse_text timed out 4 times and a word counter (0.12 similar) took "reverse this
    string"; its evolved 1.1.0 did the job 4 times out of 4 on its trial's share, then was never
    tried again: the parent's 4 timeouts matched its 4 successes, and the trial, one success short
    of its 5, never ended."""
    call = CallRequest(scenario="reverse this string")
    new = evolved("reverse_text", "1.1.0", "1.0.0")
    taker = CandidateEvidence(manifest=candidate("word_stats").manifest, similarity=0.12, success_similarities=[1.0] * 9)
    parent = fell_over("reverse_text", 1.0, [1.0] * 4)
    fixed = CandidateEvidence(manifest=new.manifest, similarity=1.0, doing_similarities=[1.0] * 4)
    best = best_matches([taker, parent, fixed])
    # The call whose trial's draw serves 1.1.0: its namespace is placed with 1.1.0 first.
    served = [candidate("word_stats"), new, candidate("reverse_text")]
    assert again(call, served, [taker, fixed, parent], best) == ("reverse_text@1.1.0", True)
    # Before any success of its own too, on every call it serves (its trial's share limits them).
    fresh = fixed.model_copy(update={"doing_similarities": []})
    chosen = best_match_again(call, served, [taker, fresh, parent], best)
    assert chosen is not None and (chosen.key, chosen.evolved) == ("reverse_text@1.1.0", True)
    # The calls that serve the parent count its timeouts, as before: past OUTAGES_RETRIED, the policy's order.
    parents = [candidate("word_stats"), candidate("reverse_text"), new]
    assert again(call, parents, [taker, parent, fixed], best) is None
    # A failure of its own here ends the exemption, and its parent's failures of a kind that does not
    # say it was down (a wrong answer) keep it out where the first candidate does the job by its record.
    failed = fixed.model_copy(update={"failure_similarities": [1.0] * 4})
    assert again(call, served, [taker, failed, parent], best) is None
    wrong = CandidateEvidence(manifest=parent.manifest, similarity=1.0, failure_similarities=[1.0] * 4)
    doer = taker.model_copy(update={"doing_similarities": [1.0] * 3})
    assert again(call, served, [doer, fresh, wrong], best) is None
    assert again(call, served, [taker, fresh, wrong], best) == ("reverse_text@1.1.0", False)

    # QA 50c: a fixed version given as a manifest's new version (no parent) is what its promotion put
    # in place of the served one.
    given = CandidateEvidence(manifest=candidate("reverse_text", "1.1.0").manifest, similarity=1.0)
    plain = [candidate("word_stats"), candidate("reverse_text", "1.1.0"), candidate("reverse_text")]
    assert again(call, plain, [taker, given, parent], best) is None
    chosen = best_match_again(call, plain, [taker, given, parent], best, replaced={"reverse_text@1.1.0": "1.0.0"})
    assert chosen is not None and (chosen.key, chosen.evolved) == ("reverse_text@1.1.0", True)
    # Not on the calls whose draw serves the parent, though people judge the parent wrong here (its
    # trial's share holds).
    wrong_parent = parent.model_copy(update={"judged_outputs": [JudgedOutput(similarity=1.0, wrong=True, timestamp=t)
                                                                for t in (1.0, 2.0)]})
    assert again(call, parents, [taker, wrong_parent, fresh], best) is None

    # Tried first on every call it serves, logged with its trial's share.
    ranked = placed_by_the_policy("word_stats", "reverse_text", "reverse_text")
    ranked[1] = evolved("reverse_text", "1.1.0", "1.0.0").model_copy(update={
        "probability": 0.9, "breakdown": ScoreBreakdown(rationale="policy", extra={"trial_share": 0.25})})
    tried = explored_first(call, ranked, [taker, fresh, parent], 0.25, lambda salt: False, newcomer=None, passed=None,
                           probe=None, best=best)
    assert keys(tried)[0] == "reverse_text@1.1.0" and tried[0].probability == 0.25
    assert "in a version evolved from one that failed here" in tried[0].breakdown.rationale


def test_the_first_places_logged_on_each_side_of_a_trials_draw_add_up_to_one() -> None:
    """QA 50d F3: with reverse_text's 1.1.0 on trial, the calls its draw served tried 1.1.0 first on
    every one (an evolved version), those that served 1.0.0 tried it first again after its timeout
    on the share, and the word counter passed over logged 0.75 where it went first on 0.5625 of the
    calls: the first places logged added up to 1.19."""
    call = CallRequest(scenario="reverse this string")
    taker = CandidateEvidence(manifest=candidate("word_stats").manifest, similarity=0.12, success_similarities=[1.0] * 9)
    parent = fell_over("reverse_text", 1.0, [1.0])
    fresh = CandidateEvidence(manifest=evolved("reverse_text", "1.1.0", "1.0.0").manifest, similarity=1.0)
    found, best = [taker, parent, fresh], best_matches([taker, parent, fresh])

    def side(version: str, chance: float, other: str, drawn: bool) -> list[Candidate]:
        versions = {"1.0.0": candidate("reverse_text"), "1.1.0": evolved("reverse_text", "1.1.0", "1.0.0")}
        ranked = [candidate("word_stats"), versions[version], versions[other]]
        ranked[0].probability, ranked[0].breakdown = 1.0, ScoreBreakdown(rationale="policy")
        ranked[1].probability, ranked[1].breakdown = chance, ScoreBreakdown(rationale="policy", extra={"trial_share": chance})
        served = ServedVersions(by_namespace={"reverse_text": version}, chance={"reverse_text": chance},
                                other_side={"reverse_text": other})
        return explored_first(call, ranked, found, 0.25, lambda salt: drawn, newcomer=None, passed=None, probe=None,
                              best=best, served=served)

    new_side = side("1.1.0", 0.25, "1.0.0", drawn=False)
    passed, tried = side("1.0.0", 0.75, "1.1.0", drawn=False), side("1.0.0", 0.75, "1.1.0", drawn=True)
    assert [keys(r)[0] for r in (new_side, passed, tried)] == ["reverse_text@1.1.0", "word_stats@1.0.0", "reverse_text@1.0.0"]
    # 1.1.0 on its 25 %; 1.0.0 on the share of the other 75 %; the word counter on the rest of them.
    assert (new_side[0].probability, tried[0].probability, passed[0].probability) == (0.25, 0.1875, 0.5625)
    assert "first on 56% of such calls: the rest try reverse_text@1.0.0 first" in passed[0].breakdown.rationale
    # Where the draw serving 1.1.0 tries it first on the share alone (a timeout of its own), the
    # calls that serve 1.0.0 log the share's rest, as before.
    failed = fresh.model_copy(update={"failure_similarities": [1.0], "outage_similarities": [1.0]})
    ranked = [candidate("word_stats"), candidate("reverse_text"), evolved("reverse_text", "1.1.0", "1.0.0")]
    ranked[0].probability = 1.0
    alone = explored_first(call, ranked, [taker, parent, failed], 0.25, lambda salt: False, newcomer=None, passed=None,
                           probe=None, best=best, served=ServedVersions(by_namespace={"reverse_text": "1.0.0"},
                                                                        chance={"reverse_text": 0.75},
                                                                        other_side={"reverse_text": "1.1.0"}))
    assert keys(alone)[0] == "word_stats@1.0.0" and alone[0].probability == 0.75


def first_places_over_every_draw(call: CallRequest, found: list[CandidateEvidence],
                                 trials: dict[str, tuple[Candidate, Candidate]]) -> tuple[dict[str, float], dict[str, set[float]]]:
    """Every side of every trial (its new version on 25 %) and the share's draw (25 %): the share of
    calls each first place gets, and the probabilities logged for it."""
    from collections import defaultdict
    from itertools import product

    best = best_matches(found)
    truth: dict[str, float] = defaultdict(float)
    logged: dict[str, set[float]] = defaultdict(set)
    for sides in product(*([(True, 0.25), (False, 0.75)] for _ in trials)):
        for drawn, drawn_weight in ((True, 0.25), (False, 0.75)):
            ranked, served = [candidate("word_stats")], ServedVersions()
            ranked[0].probability, ranked[0].breakdown = 1.0, ScoreBreakdown(rationale="policy")
            for (name, (new, old)), (on_new, chance) in zip(trials.items(), sides):
                first, other = (new, old) if on_new else (old, new)
                placed = [first.model_copy(deep=True), other.model_copy(deep=True)]
                placed[0].probability, placed[0].breakdown = chance, ScoreBreakdown(rationale="policy",
                                                                                   extra={"trial_share": chance})
                ranked += placed
                served.by_namespace[name], served.chance[name] = first.manifest.version, chance
                served.other_side[name] = other.manifest.version
            def draw(salt: str, d: bool = drawn) -> bool:
                return d

            out = explored_first(call, ranked, found, 0.25, draw, newcomer=None, passed=None, probe=None, best=best,
                                 served=served)
            truth[out[0].key] += drawn_weight * math.prod(w for _, w in sides)
            logged[out[0].key].add(out[0].probability)
    return dict(truth), dict(logged)


def test_each_first_place_logs_the_share_of_calls_it_gets_over_the_draws_of_several_trials() -> None:
    """Review 51: the logged first places were right for one trial whose parent's side tried it again;
    not where only the other side's draw tries another tool first, nor with two trials at once."""
    call = CallRequest(scenario="reverse this string")
    taker = CandidateEvidence(manifest=candidate("word_stats").manifest, similarity=0.12, success_similarities=[1.0] * 9)
    fresh = CandidateEvidence(manifest=evolved("reverse_text", "1.1.0", "1.0.0").manifest, similarity=1.0)
    past_retries = fell_over("reverse_text", 1.0, [1.0] * 3)  # its side: no best match again
    reverse = {"reverse_text": (evolved("reverse_text", "1.1.0", "1.0.0"), candidate("reverse_text"))}
    truth, logged = first_places_over_every_draw(call, [taker, past_retries, fresh], reverse)
    assert truth == {"reverse_text@1.1.0": 0.25, "word_stats@1.0.0": 0.75}
    assert logged == {key: {share} for key, share in truth.items()}
    # ...and a second trial, of another clear match (its parent fell over once: tried again on the share)
    flip_fresh = CandidateEvidence(manifest=evolved("flip_text", "1.1.0", "1.0.0").manifest, similarity=0.95)
    flip_parent = CandidateEvidence(manifest=candidate("flip_text").manifest, similarity=0.95,
                                    outage_similarities=[1.0], failure_similarities=[1.0])
    both = {**reverse, "flip_text": (evolved("flip_text", "1.1.0", "1.0.0"), candidate("flip_text"))}
    truth, logged = first_places_over_every_draw(call, [taker, past_retries, fresh, flip_parent, flip_fresh], both)
    assert truth == {"reverse_text@1.1.0": 0.25, "flip_text@1.1.0": 0.1875, "flip_text@1.0.0": 0.140625,
                     "word_stats@1.0.0": 0.421875}
    assert logged == {key: {share} for key, share in truth.items()}


def test_a_call_naming_a_namespace_does_not_hand_an_input_its_versions_refused_to_the_other_tools() -> None:
    """QA AD: `run_tool("fast_sort", {"numbers": "x"})` went on to four other tools, three of them
    text tools, each demoted for a job it was never meant for."""
    def after(request: CallRequest, *tried: tuple[str, str, FailureClass | None]) -> str | None:
        plan = CallPlan(request=request, candidates=[candidate("fast_sort", "1.1.0"), candidate("fast_sort"),
                                                     candidate("sort_numbers"), candidate("word_stats")])
        plan.attempts = [ToolExecutionResult(attempt_id=f"c:{i}", call_id="c", tool=name, version=version,
                                             success=error is None, error_class=error, metadata={"attempt": i})
                         for i, (name, version, error) in enumerate(tried)]
        return refused_for_its_namespace(plan)

    named = CallRequest(scenario="call fast_sort", namespace="fast_sort")
    refused = FailureClass.bad_input
    assert after(named, ("fast_sort", "1.1.0", refused)) is None  # its other version is tried
    assert after(named, ("fast_sort", "1.1.0", refused), ("fast_sort", "1.0.0", refused)) == (
        "fast_sort@1.0.0 refused the input (bad_input): the tools outside fast_sort were not tried with it")
    # Any other failure of its own is the namespace's: its fallbacks are what they are for.
    assert after(named, ("fast_sort", "1.1.0", refused), ("fast_sort", "1.0.0", FailureClass.timeout)) is None
    # A call by scenario alone names no namespace: a refusal there says the tool is not for the job.
    assert after(CallRequest(scenario="sort"), ("fast_sort", "1.1.0", refused), ("fast_sort", "1.0.0", refused)) is None


def test_a_namespace_refusal_names_the_version_that_does_such_jobs_not_the_one_that_refused_after_it() -> None:
    """Review: a version that never did the job, refusing the input after one that does, was said to do such jobs."""
    plan = CallPlan(request=CallRequest(scenario="parse this csv", namespace="csv_parse"),
                    candidates=[candidate("csv_parse"), candidate("csv_parse", "1.1.0"), candidate("other")])
    plan.candidates[0].does_the_job = True
    plan.attempts = [ToolExecutionResult(attempt_id=f"c:{i}", call_id="c", tool="csv_parse", version=version, success=False,
                                         error_class=FailureClass.bad_input, callers_mistake=True, metadata={"attempt": i})
                     for i, version in enumerate(("1.0.0", "1.1.0"))]
    assert refused_for_its_namespace(plan) == (
        "csv_parse@1.1.0 refused the input (bad_input): the tools outside csv_parse were not tried with it; "
        "csv_parse@1.0.0 does such jobs (3 or more like this one succeeded): check the input")
    # One that has done none, but matches such jobs best, takes its refusal for the caller's mistake too,
    # and is said to match them best (QA recheck F5); unlike a doer's, the call still evolves it.
    assert refused_by_a_doer(plan)
    plan.candidates[0].does_the_job, plan.candidates[0].matches_best = False, True
    plan.candidates[0].breakdown.similarity = 0.75
    refusal = plan.candidates[0].refused_its_job(FailureClass.bad_input), plan.candidates[0].callers_mistake(FailureClass.bad_input)
    assert refusal == (True, True) and not refused_by_a_doer(plan)
    assert str(refused_for_its_namespace(plan)).endswith("csv_parse@1.0.0 matches such jobs best (0.75): check the input")
    plan.attempts = plan.attempts[:1]
    assert input_refused_message(plan) == ("csv_parse@1.0.0, which matches such jobs best (0.75), refused the input (bad_input): "
                                           "check the input")


def test_a_refusal_by_a_version_that_does_the_job_after_one_on_trial_evolves_nothing() -> None:
    """QA 51c: 1.2.0 on trial (one success) refused a caller's wrong key, then 1.0.0, which had done
    the job 46 times, refused the same input: the call evolved 1.2.0 into 1.3.0."""
    plan = CallPlan(request=CallRequest(scenario="make this text upper case", namespace="upper"),
                    candidates=[candidate("upper", "1.2.0"), candidate("upper")])
    plan.candidates[0].matches_best, plan.candidates[1].does_the_job = True, True
    plan.attempts = [ToolExecutionResult(attempt_id=f"c:{i}", call_id="c", tool="upper", version=version, success=False,
                                         error_class=FailureClass.bad_input, callers_mistake=True, metadata={"attempt": i})
                     for i, version in enumerate(("1.2.0", "1.0.0"))]
    assert refused_by_a_doer(plan)
    assert not refused_by_a_doer(plan.model_copy(update={"attempts": plan.attempts[:1]}))  # the one on trial alone


def test_a_version_of_the_tool_a_call_names_is_proven_by_its_successes_anywhere() -> None:
    """QA 51c: a `call_tool` without a scenario is ranked by the tool's description, which none of
    its 46 successes matched as the same job: a caller's typo evolved it."""

    worked = CandidateEvidence(manifest=candidate("upper").manifest, similarity=0.6, successes=46,
                               doing_similarities=[0.7] * 46)
    assert not does_the_job(worked) and proven(worked, "upper")
    assert not proven(worked, "other") and not proven(worked, None)
    assert not proven(worked.model_copy(update={"successes": 2}), "upper")
    # QA 51d: so is the job's clear best match, whose successes were all calls by name, to a call by scenario
    assert proven(worked, None, best={worked.key})
    assert not proven(worked.model_copy(update={"successes": 2}), None, best={worked.key})
    # Its refusal evolves nothing, and says why it counts; another tool's success on the input
    # still counts (review 51: it was set aside as taking a refused input).
    plan = CallPlan(request=CallRequest(scenario="upper case this", namespace="upper"), candidates=[candidate("upper")])
    plan.candidates[0].matches_best, plan.candidates[0].proven = True, True
    plan.attempts = [ToolExecutionResult(attempt_id="c:0", call_id="c", tool="upper", version="1.0.0", success=False,
                                         error_class=FailureClass.bad_input, callers_mistake=True, metadata={"attempt": 0})]
    assert refused_by_a_doer(plan) and not plan.candidates[0].does_the_job
    assert input_refused_message(plan) == ("upper@1.0.0, which has succeeded 3 times or more, and the call names it, "
                                           "refused the input (bad_input): check the input")


def test_a_version_does_a_job_after_three_successes_at_it_and_only_its_refusal_then_is_the_callers_mistake() -> None:
    def doer(*similarities: float) -> bool:
        return does_the_job(CandidateEvidence(manifest=candidate("hash_text").manifest, success_similarities=list(similarities),
                                              doing_similarities=list(similarities)))

    assert not doer(0.95, 0.9)  # two may be a fallback's luck
    assert doer(0.95, 0.9, 0.85)
    assert not doer(0.95, 0.9, 0.7, 0.6)  # other jobs are not this one
    # Successes where it matched weakly, with no record (`serves_unconfirmed`), rank it but say
    # nothing of whether it does the job (QA evolution: a word counter, 0.43 similar, answered
    # vowel-count calls with word counts, and after three such successes "did the job").
    assert not does_the_job(CandidateEvidence(manifest=candidate("word_stats").manifest, success_similarities=[0.95, 0.9, 0.85]))
    broken = CandidateEvidence(manifest=candidate("hash_text").manifest, success_similarities=[0.95] * 10,
                               doing_similarities=[0.95] * 10, refused_in_a_row=5)
    assert does_the_job(broken) and refuses_everything(broken)  # five refusals since its last success
    assert not refuses_everything(broken.model_copy(update={"refused_in_a_row": 4}))
    does = candidate("hash_text").model_copy(update={"does_the_job": True})
    assert does.callers_mistake(FailureClass.bad_input)
    assert not does.callers_mistake(FailureClass.crash)  # a crash is the tool's, whatever it did before
    assert not candidate("hash_text").callers_mistake(FailureClass.bad_input)
    # ...so its refusals count again (they may be its own), and the input still goes only to tools doing such jobs.
    refusing = does.model_copy(update={"refuses_everything": True})
    assert refusing.refused_its_job(FailureClass.bad_input) and not refusing.callers_mistake(FailureClass.bad_input)


def test_after_a_refusal_by_mistake_only_the_tools_that_do_such_jobs_are_tried_and_the_call_says_check_the_input() -> None:
    """QA ops: after hash_text refused an input as the caller's mistake, a lowercasing tool returned
    a "sha256 checksum", and 11 tools refused such inputs in turn, each one demoted."""
    def attempt(tool: str, ok: bool, mistake: bool = False) -> ToolExecutionResult:
        return ToolExecutionResult(attempt_id=f"c:{tool}", call_id="c", tool=tool, version="1.0.0", success=ok,
                                   error_class=None if ok else FailureClass.bad_input, callers_mistake=mistake,
                                   error_message=None if ok else "KeyError: 'text'")

    assert does_such_jobs(matching("sha_sum", 0.62))  # matches the job clearly by its description
    assert does_such_jobs(matching("hasher", 0.31, does=True))  # did such jobs, whatever its words
    assert not does_such_jobs(matching("lower_text", 0.37))
    assert does_such_jobs(matching("lower_text", 0.0), namespace="lower_text")  # a version of the tool asked for
    # A version whose sibling did the job, as ranking counts it (review 52b: ranking did, execution did not)
    assert does_such_jobs(matching("hasher", 0.31).model_copy(update={"namespace_did_the_job": True}))
    plan = CallPlan(request=CallRequest(scenario="sha256 of this text"), candidates=[matching("hash_text", 0.7, does=True)],
                    attempts=[attempt("hash_text", False, mistake=True)], passed_over=["lower_text@1.0.0"])
    assert refused_input(plan) is plan.attempts[0]
    assert input_refused_message(plan) == ("hash_text@1.0.0, which does such jobs, refused the input (KeyError: 'text'): check "
                                           "the input; not tried with it, having done no such job and matching it less than "
                                           "0.5: lower_text@1.0.0 (a call that names one tries it)")
    tried = plan.model_copy(update={"attempts": [*plan.attempts, attempt("sha_sum", False, mistake=True)]})
    assert "; the other tools tried with it refused it too (sha_sum@1.0.0);" in (input_refused_message(tried) or "")
    assert input_refused_message(plan.model_copy(update={"attempts": [attempt("hash_text", False)]})) is None
    # Only the refusals are set aside: a tool that does such jobs and took the input counts its success.
    taken = OutcomeRecord(call_id="c", scenario="parse this csv", attempts=[attempt("csv_strict", False, mistake=True),
                                                                             attempt("csv_lenient", True)])
    assert taken.set_aside() == {"c:csv_strict"}
    # ...and that of one that has done no such job is set aside, with a note for the caller (QA recheck).
    lucky = attempt("lower_text", True).model_copy(update={"took_a_refused_input": True})
    assert taken.model_copy(update={"attempts": [taken.attempts[0], lucky]}).set_aside() == {"c:csv_strict", "c:lower_text"}
    assert took_a_refused_input_note(plan, lucky) == (
        "hash_text@1.0.0, which does such jobs, refused the input (KeyError: 'text'); lower_text@1.0.0, which took it, "
        "has done no such job: check its output, and the input")
    assert took_a_refused_input_note(plan, attempt("lower_text", True)) is None


def test_a_tool_that_matches_the_job_weakly_and_never_did_it_or_another_than_the_one_named_is_noted_when_it_serves() -> None:
    """QA new user: the string reverser crashed, and a vowel counter, 0.22 similar, "served" the
    reversal without a word; its success made it the job's first choice from then on. QA recheck:
    the note came once, as a fallback, and not when it was the first choice; and a call that named
    the reverser said nothing of another tool serving it."""
    def ran(tool: str, ok: bool) -> ToolExecutionResult:
        return ToolExecutionResult(attempt_id=f"c:{tool}", call_id="c", tool=tool, version="1.0.0", success=ok,
                                   error_class=None if ok else FailureClass.crash)

    def note(plan: CallPlan, served: Candidate) -> str | None:
        """As the executor does on a success: flag it, then say what the caller should know."""
        result = plan.attempts[-1]
        result.unconfirmed = serves_unconfirmed(plan, served, result)
        return served_by_whom_note(plan, served, result)

    def call(*attempts: ToolExecutionResult, namespace: str | None = None) -> CallPlan:
        return CallPlan(request=CallRequest(scenario="reverse this string", namespace=namespace, call_id="c"),
                        candidates=[reverser, counter], attempts=list(attempts))

    reverser, counter = matching("reverse_text", 0.8), matching("vowel_count", 0.22)
    fell_back = call(ran("reverse_text", False), ran("vowel_count", True))
    assert note(fell_back, counter) == (
        "vowel_count@1.0.0 served this call as a fallback, with no record of doing such jobs, matching it 0.22: check its "
        "output (`fittest feedback add vowel_count positive|negative --call c` says whether it does)")
    assert fell_back.attempts[-1].unconfirmed  # and its execution record says so
    assert "served this call as the first choice, with no record of doing such jobs, matching it 0.22" in (
        note(call(ran("vowel_count", True)), counter) or "")
    # Nothing to say of one that does such jobs, or matches them clearly: its success is confirmed.
    for served in (matching("vowel_count", 0.22, does=True), matching("reverse_words", 0.55)):
        plan = call(ran("reverse_text", False), ran(served.manifest.name, True))
        assert note(plan, served) is None and not plan.attempts[-1].unconfirmed
    # A call that named a tool: said when another served it, not when it did.
    assert note(call(ran("reverse_text", False), ran("vowel_count", True), namespace="reverse_text"), counter) == (
        "the call named reverse_text, which failed; vowel_count@1.0.0, another tool, served it, matching it 0.22: check "
        "its output (`fittest feedback add vowel_count positive|negative --call c` says whether it does)")
    # ...and when it was passed over as the call ran, held back by its breaker (QA 49: no note at all).
    passed = call(ran("vowel_count", True), namespace="reverse_text")
    passed.held_back.append("reverse_text@1.0.0")
    assert note(passed, counter) == ("the call named reverse_text, held back by its circuit breaker (reverse_text@1.0.0); "
                                     "vowel_count@1.0.0, another tool, served it, matching it 0.22: check its output "
                                     "(`fittest feedback add vowel_count positive|negative --call c` says whether it does)")
    passed.notes.append("reverse_text@1.0.0 held back by its circuit breaker: the call was ranked by its scenario alone")
    assert note(passed, counter) == (  # held back as the call was planned, which the plan's note said (QA 49 recheck 2)
        "vowel_count@1.0.0, another tool, served it, matching it 0.22: check its output "
        "(`fittest feedback add vowel_count positive|negative --call c` says whether it does)")
    # ...and when its tool folder was gone (QA 51c: upper-cased text for a character count, with no note).
    gone = call(ran("vowel_count", True), namespace="reverse_text")
    gone.code_missing.append("reverse_text@1.0.0")
    assert note(gone, counter) == ("the call named reverse_text, whose tool folder is gone; vowel_count@1.0.0, another "
                                   "tool, served it, matching it 0.22: check its output (`fittest feedback add "
                                   "vowel_count positive|negative --call c` says whether it does)")
    typo = call(ran("reverse_text", False), ran("vowel_count", True), namespace="reverse_txt")
    assert note(typo, counter) is None  # no such tool ran: its own note says so
    assert note(call(ran("reverse_text", False), ran("vowel_count", True), namespace="vowel_count"), counter) is None


def test_the_clear_best_match_of_a_job_is_told_before_it_has_done_any() -> None:
    """QA recheck F5: hash_text (0.75, no record yet) refusing a hashing input without its
    `algorithm` counted against it, and word_stats (0.23), which took the input, had the job from
    then on. Its refusal is the input's fault as one by a version that does the job would be;
    versions that match less, or unclearly, are not told so."""
    evidence_ = [evidence("hash_text", 0.75), evidence("sha_tool", 0.68), evidence("word_stats", 0.23)]
    assert best_matches(evidence_) == {"hash_text@1.0.0", "sha_tool@1.0.0"}
    assert best_matches(evidence_, held_back_match=0.9) == set()  # the job's best match is held back
    assert best_matches([evidence("word_stats", 0.45)]) == set()  # best, but no clear match


# QA 58b: behaviours a single mutation changed while every unit test passed
def test_a_second_opinion_with_no_such_jobs_done_needs_a_match_of_0_3() -> None:
    """Mutant SV2 (SECOND_OPINION_MATCH 0.3 -> 0.2) survived: the test tries 0.17 and 0.38 only."""
    def cand(name: str, similarity: float, wrong: int = 0) -> CandidateEvidence:
        return evidence(name, similarity).model_copy(
            update={"judged_outputs": [JudgedOutput(1.0, 10.0 + i, True) for i in range(wrong)]})

    found = [cand("first", 0.6, wrong=2), cand("other", 0.25)]
    ranked = [Candidate(key=e.key, manifest=e.manifest, score=1.0) for e in found]
    call = CallRequest(scenario="s")
    assert second_opinion(call, ranked, found) is None
    found[1] = cand("other", 0.3)
    assert second_opinion(call, ranked, found) == "other@1.0.0"

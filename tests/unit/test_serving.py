"""What promotions and newcomers' trials decide about a ranking (selection/serving.py), without any service."""

from __future__ import annotations

from selection.evidence import CandidateEvidence
from selection.manifest import ToolManifest
from selection.models import Candidate, CallRequest, ScoreBreakdown
from selection.serving import ServedVersions, evolved_first, newcomer_to_try, passed_over, served_first, tried_first


def candidate(name: str, version: str = "1.0.0") -> Candidate:
    manifest = ToolManifest.model_validate({"name": name, "version": version, "description": "d",
                                            "implementation": {"kind": "python", "entrypoint": "m:run"}})
    return Candidate(key=manifest.key, manifest=manifest, score=1.0)


def keys(ranked: list[Candidate]) -> list[str]:
    return [c.key for c in ranked]


RANKED = [candidate("a", "1.1.0"), candidate("b"), candidate("a", "1.0.0"), candidate("c")]


def test_nothing_promoted_leaves_the_policys_order() -> None:
    assert keys(served_first(CallRequest(scenario="x"), RANKED, ServedVersions())) == keys(RANKED)


def test_a_namespace_serves_its_version_first_in_the_place_the_policy_gave_the_namespace() -> None:
    served = ServedVersions(by_namespace={"a": "1.0.0"})
    assert keys(served_first(CallRequest(scenario="x"), RANKED, served)) == ["a@1.0.0", "b@1.0.0", "a@1.1.0", "c@1.0.0"]


def test_a_rolled_back_version_is_not_tried() -> None:
    served = ServedVersions(by_namespace={"a": "1.0.0"}, rolled_back={"a@1.1.0"})
    assert keys(served_first(CallRequest(scenario="x"), RANKED, served)) == ["b@1.0.0", "a@1.0.0", "c@1.0.0"]


def test_a_namespace_call_starts_with_what_its_namespace_serves() -> None:
    served = ServedVersions(by_namespace={"a": "1.1.0", "c": "1.0.0"})
    assert keys(served_first(CallRequest(scenario="x", namespace="c"), RANKED, served))[0] == "c@1.0.0"


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
    assert [(c.key, c.probability) for c in on_trial] == [("a@1.1.0", 0.2), ("b@1.0.0", 0.15), ("a@1.0.0", 0.0125)]
    assert on_trial[0].breakdown is not None and "served first on 25% of the calls, by a trial's share" in on_trial[0].breakdown.rationale
    rest = served_first(CallRequest(scenario="x"), ranked(), ServedVersions(by_namespace={"a": "1.0.0"}, chance={"a": 0.75}))
    assert [(c.key, c.probability) for c in rest] == [("a@1.0.0", 0.6), ("b@1.0.0", 0.15), ("a@1.1.0", 0.0375)]
    active = served_first(CallRequest(scenario="x"), ranked(), ServedVersions(by_namespace={"a": "1.1.0"}))
    assert [(c.key, c.probability) for c in active] == [("a@1.1.0", 0.8), ("b@1.0.0", 0.15), ("a@1.0.0", 0.05)]
    # A call to the namespace starts with the version drawn, whatever place the policy gave it.
    called = served_first(CallRequest(scenario="x", namespace="a"), ranked(), ServedVersions(by_namespace={"a": "1.1.0"}, chance={"a": 0.25}))
    assert (called[0].key, called[0].probability) == ("a@1.1.0", 0.25)


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

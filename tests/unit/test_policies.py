"""The policies on plain evidence: what `learned` learns from outcomes, how it explores, what it logs;
and that `seed` applies the design's formulas."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from selection.evidence import CandidateEvidence
from selection.manifest import ToolManifest
from selection.policies import get_policy, policy_names
from selection.policies.seed import SeedPolicy


def ev(name: str, similarity: float, version: str = "1.0.0", **fields) -> CandidateEvidence:
    manifest = ToolManifest(name=name, version=version, description=name,
                            implementation={"kind": "http", "url": "http://x"})
    return CandidateEvidence(manifest=manifest, similarity=similarity, **fields)


def rank(evidence: list[CandidateEvidence], policy: str = "learned", seed: int = 0) -> list[str]:
    return [c.key for c in get_policy(policy).rank(evidence, random.Random(seed))]


def test_default_is_registered_beside_seed() -> None:
    from workers.settings import Settings

    assert {"learned", "seed"} <= set(policy_names())
    assert Settings().policy == "learned"


def test_a_bad_parameter_of_the_learned_policy_is_named_with_its_value() -> None:
    from selection.policies.learned import LearnedPolicy

    with pytest.raises(ValueError, match=r"^temperature must be >= 0, got -0.1; lexical_weight must be >= 0, got nan$"):
        LearnedPolicy(temperature=-0.1, lexical_weight=float("nan"))
    with pytest.raises(ValueError, match=r"^bandwidth must be > 0, got 0$"):
        LearnedPolicy(bandwidth=0)


def test_without_outcomes_the_description_decides() -> None:
    assert rank([ev("a", 0.3), ev("b", 0.6)]) == ["b@1.0.0", "a@1.0.0"]


def test_successes_nearby_are_evidence_for_a_tool() -> None:
    # b's description matches better, but a succeeded on a near-identical scenario.
    order = rank([ev("a", 0.3, namespace_success_similarities=[0.95]), ev("b", 0.6)])
    assert order[0] == "a@1.0.0"
    # A far-away success is weak evidence: the description still decides.
    assert rank([ev("a", 0.3, namespace_success_similarities=[0.4]), ev("b", 0.6)])[0] == "b@1.0.0"


def test_failures_nearby_are_evidence_against_it() -> None:
    assert rank([ev("a", 0.5, failure_similarities=[0.9, 0.85]), ev("b", 0.45)])[0] == "b@1.0.0"
    # ...and outweigh its earlier successes when they are as close and more numerous.
    assert rank([ev("a", 0.5, namespace_success_similarities=[0.9], failure_similarities=[0.9, 0.9, 0.9]),
                 ev("b", 0.45, namespace_success_similarities=[0.9])])[0] == "b@1.0.0"


def test_of_two_tools_that_both_do_a_job_the_one_that_fails_less_goes_first_however_much_more_the_other_served() -> None:
    """QA 60b F2: an incumbent failing 15 % kept a newcomer that never failed as its fallback for
    good, on the strength of serving most of the job (its successes nearby); the newcomer's
    successes came only where the incumbent failed. Saturated, what many successes say is "does the
    job", and the rates decide between tools that do it."""
    from selection.policies.learned import LearnedPolicy

    incumbent = ev("fmt_x", 0.6, namespace_success_similarities=[0.95] * 27, failure_similarities=[0.95] * 10)
    newcomer = ev("fmt_y", 0.6, namespace_success_similarities=[0.95] * 12)
    assert rank([incumbent, newcomer]) == ["fmt_y@1.0.0", "fmt_x@1.0.0"]
    unsaturated = LearnedPolicy(saturation=1e9)  # as it ranked before
    assert [c.key for c in unsaturated.rank([incumbent, newcomer], random.Random(0))] == ["fmt_x@1.0.0", "fmt_y@1.0.0"]
    # One that never did the job is no match for one that did, even one that fails now and then.
    assert rank([incumbent, ev("fmt_z", 0.65)])[0] == "fmt_x@1.0.0"
    with pytest.raises(ValueError, match=r"^saturation must be > 0, got 0$"):
        LearnedPolicy(saturation=0)


def test_an_evolved_version_inherits_successes_not_failures() -> None:
    """Where the parent failed, the new version is the one tried first."""
    parent = ev("lookup", 0.6, "1.0.0", namespace_success_similarities=[0.8], failure_similarities=[0.92, 0.9])
    child = ev("lookup", 0.6, "1.1.0", namespace_success_similarities=[0.8])
    other = ev("other", 0.5)
    assert rank([parent, child, other]) == ["lookup@1.1.0", "lookup@1.0.0", "other@1.0.0"]


def test_near_ties_are_explored_and_every_choice_has_its_probability() -> None:
    policy = get_policy("learned")
    near = [ev("a", 0.600), ev("b", 0.601)]
    firsts: Counter[str] = Counter()
    for seed in range(400):
        ranked = policy.rank(near, random.Random(seed))
        firsts[ranked[0].key] += 1
        assert 0.0 < ranked[0].probability < 1.0
        assert ranked[1].probability == 1.0  # the last one left is placed for sure
    assert firsts["a@1.0.0"] > 40 and firsts["b@1.0.0"] > firsts["a@1.0.0"]
    # A clearly better candidate is chosen every time, with probability ~1.
    clear = policy.rank([ev("a", 0.3), ev("b", 0.7)], random.Random(1))
    assert clear[0].key == "b@1.0.0" and clear[0].probability > 0.999


def test_each_place_also_logs_the_probability_that_a_version_of_its_tool_took_it() -> None:
    """QA ops L2: a promotion serves its version wherever the policy placed its tool, and that
    version, first on every call, logged 0.22: the draw between it and its sibling."""
    near = [ev("a", 0.600, "1.0.0"), ev("a", 0.601, "1.1.0"), ev("b", 0.2)]
    for seed in range(20):
        ranked = get_policy("learned").rank(near, random.Random(seed))
        first = ranked[0]
        assert first.manifest.name == "a" and first.probability < 0.9 and first.namespace_probability is not None
        assert first.namespace_probability > 0.999  # the two versions of `a` shared the place's chance
        assert ranked[-1].namespace_probability == ranked[-1].probability == 1.0


def test_breakdown_says_why() -> None:
    c = get_policy("learned").rank([ev("a", 0.5, namespace_success_similarities=[0.9], failure_similarities=[0.8])],
                                   random.Random(0))[0]
    b = c.breakdown
    assert b.extra["successes_nearby"] > 0 and b.extra["failures_nearby"] > 0
    assert "successes of a" in b.rationale and "SPARC" in b.rationale


def test_the_tool_classifier_decides_what_the_neighbours_leave_open() -> None:
    # Equally matched and equally served nearby: the classifier's choice goes first, and says so.
    evidence = [ev("a", 0.5, namespace_success_similarities=[0.9], classifier_score=2.0),
                ev("b", 0.5, namespace_success_similarities=[0.9], classifier_score=6.0)]
    first = get_policy("learned").rank(evidence, random.Random(0))[0]
    assert first.key == "b@1.0.0"
    assert first.breakdown.extra["classifier_p"] > 0.9 and "classifier p 0.98" in first.breakdown.rationale
    # One the classifier all but rules out is counted at its floor, and says so (QA 48: the p values summed to 1.29).
    doubted = get_policy("learned").rank(evidence + [ev("c", 0.5, classifier_score=-8.0)], random.Random(0))
    (c,) = [r for r in doubted if r.key == "c@1.0.0"]
    assert "classifier p at most 0.05 (its floor)" in c.breakdown.rationale, c.breakdown.rationale
    # Without a fitted classifier there is no such term.
    plain = get_policy("learned").rank([ev("a", 0.5)], random.Random(0))[0]
    assert "classifier_p" not in plain.breakdown.extra and "classifier" not in plain.breakdown.rationale


def test_the_classifiers_doubt_is_bounded() -> None:
    """Successes on near-identical scenarios outweigh any doubt of the classifier (p ~ e^-20 counts
    as e^-3), though not a weak description match it prefers."""
    evidence = [ev("a", 0.5, namespace_success_similarities=[0.97, 0.96], classifier_score=0.0),
                ev("b", 0.5, classifier_score=20.0)]
    assert rank(evidence)[0] == "a@1.0.0"
    assert rank([ev("a", 0.5, classifier_score=0.0), ev("b", 0.45, classifier_score=20.0)])[0] == "b@1.0.0"


def test_a_word_match_tips_a_close_description_match_and_no_more() -> None:
    """The scenario's words matching a look-alike's texts count as a little more similarity: enough
    to put it ahead of a description 0.02 closer, not ahead of one 0.2 closer, and only in `learned`."""
    assert rank([ev("a", 0.50, lexical=1.0), ev("b", 0.52)]) == ["a@1.0.0", "b@1.0.0"]
    assert rank([ev("a", 0.50, lexical=1.0), ev("b", 0.70)])[0] == "b@1.0.0"
    assert rank([ev("a", 0.50, lexical=1.0), ev("b", 0.52)], policy="seed")[0] == "b@1.0.0"
    (first, _) = get_policy("learned").rank([ev("a", 0.50, lexical=1.0), ev("b", 0.52)], random.Random(0))
    assert first.breakdown.extra["lexical"] == 1.0 and "word match 1.00" in first.breakdown.rationale


def test_seed_formulas() -> None:
    policy = get_policy("seed")
    assert isinstance(policy, SeedPolicy)  # score() is the seed policy's own, not the Policy protocol's
    plain = policy.score(ev("a", 0.5))[0]
    assert plain == pytest.approx(0.8 * 0.5)
    assert policy.score(ev("a", 0.5, quality=0.5, failure_similarities=[0.8, 0.9, 0.6]))[0] == pytest.approx(
        0.8 * 0.5 * 0.5 * 0.7**2)
    assert policy.score(ev("a", 0.5, feedback_points=50.0))[0] == pytest.approx(plain * 1.5)
    assert policy.score(ev("a", 0.5, feedback_points=-50.0))[0] == pytest.approx(plain * 0.5)
    assert policy.score(ev("a", 0.5, sparc=1.0))[0] == pytest.approx(plain * 1.5)
    assert policy.score(ev("a", 0.5, source="original"))[0] == pytest.approx(0.9)


def test_the_seed_policy_counts_failures_as_similar_as_the_setting_says() -> None:
    """QA 58c: FITTEST_FAILURE_SIMILARITY=0.3 demoted nothing under the seed policy, which kept its own 0.7."""
    failed_nearby = ev("a", 0.5, failure_similarities=[0.5])
    default, lower = get_policy("seed"), get_policy("seed", failure_similarity=0.3)
    assert isinstance(default, SeedPolicy) and isinstance(lower, SeedPolicy)
    assert default.score(failed_nearby)[1].similar_failures == 0  # the default, 0.7
    score, breakdown = lower.score(failed_nearby)
    assert breakdown.similar_failures == 1 and score == pytest.approx(0.8 * 0.5 * 0.7)


def test_learned_a_version_failing_at_one_job_keeps_its_standing_for_the_jobs_it_serves() -> None:
    """QA: a formatter with 10 successes (python) and 9 failures (rust) reached quality 0.00, and for
    a javascript job with no history nearby ranked below a sorting tool 0.12 similar. Its successes
    anywhere give back part of what its failures took; where it fails, its failures nearby decide."""
    formatter = ev("code_formatter", 0.69, quality=0.0, successes=10, failures=9)
    sorter = ev("sort_numbers", 0.12)
    assert rank([sorter, formatter]) == ["code_formatter@1.0.0", "sort_numbers@1.0.0"]
    assert rank([sorter, ev("code_formatter", 0.69, quality=0.0, failures=9)]) == ["sort_numbers@1.0.0", "code_formatter@1.0.0"]
    # Where it failed (a rust job), the other formatter, which served such jobs, goes first.
    failing_nearby = ev("code_formatter", 0.69, quality=0.0, successes=10, failures=9, failure_similarities=[0.95, 0.93])
    other = ev("code_formatter_b", 0.66, namespace_success_similarities=[0.9])
    assert rank([failing_nearby, other, sorter]) == ["code_formatter_b@1.0.0", "code_formatter@1.0.0", "sort_numbers@1.0.0"]


@pytest.mark.parametrize("policy", ["learned", "seed"])
def test_the_keys_placed_last_come_after_the_others_each_group_in_the_policys_order(policy: str) -> None:
    evidence = [ev("a", 0.9, namespace_success_similarities=[0.95, 0.95]), ev("b", 0.5), ev("c", 0.4), ev("d", 0.8)]
    ranked = get_policy(policy).rank(evidence, random.Random(0), last={"a@1.0.0", "d@1.0.0"})
    assert [c.key for c in ranked] == ["b@1.0.0", "c@1.0.0", "a@1.0.0", "d@1.0.0"]
    assert all(0 < c.probability <= 1 for c in ranked)
    kept = get_policy(policy).rank(evidence, random.Random(0), limit=2, last={"a@1.0.0"})
    assert [c.key for c in kept] == ["d@1.0.0", "b@1.0.0"]


# QA 58b: behaviours a single mutation changed while every unit test passed
def learned_score(e: CandidateEvidence) -> float:
    (c,) = get_policy("learned").rank([e], random.Random(0))
    return c.score


def test_learned_feedback_points_scale_the_score_by_at_most_half_and_in_their_direction() -> None:
    """Mutant L3 (learned.py `1 + feedback/100` -> `1 - feedback/100`) survived: no unit test gives
    the default policy any feedback. README: feedback scales a ranking score by ±50 % at most."""
    plain = learned_score(ev("a", 0.5))
    assert learned_score(ev("a", 0.5, feedback_points=50.0)) == pytest.approx(plain * 1.5, rel=1e-4)
    assert learned_score(ev("a", 0.5, feedback_points=-50.0)) == pytest.approx(plain * 0.5, rel=1e-4)
    # and it tips a close ranking: judged wrong, the closer description goes second
    assert [c.key for c in get_policy("learned").rank(
        [ev("a", 0.50, feedback_points=-50.0), ev("b", 0.49)], random.Random(0))][0] == "b@1.0.0"


def test_learned_sparc_scales_the_score_from_half_to_one_and_a_half() -> None:
    """Mutant L4 (learned.py `0.5 + sparc` -> `1.5 - sparc`) survived."""
    plain = learned_score(ev("a", 0.5))  # sparc 0.5: neutral
    assert learned_score(ev("a", 0.5, sparc=1.0)) == pytest.approx(plain * 1.5, rel=1e-4)
    assert learned_score(ev("a", 0.5, sparc=0.0)) == pytest.approx(plain * 0.5, rel=1e-4)
    assert [c.key for c in get_policy("learned").rank(
        [ev("a", 0.50, sparc=0.1), ev("b", 0.49, sparc=0.9)], random.Random(0))][0] == "b@1.0.0"


def test_a_failure_exactly_at_the_failure_similarity_does_not_demote() -> None:
    """Mutant E2 (evidence.py `s > threshold` -> `>=`) survived. The seed design: x0.7 per failure
    whose scenario is *more than* 0.7 similar (README: FITTEST_FAILURE_SIMILARITY)."""
    policy = SeedPolicy()
    assert policy.score(ev("a", 0.5, failure_similarities=[0.7]))[1].similar_failures == 0
    assert policy.score(ev("a", 0.5, failure_similarities=[0.7001]))[1].similar_failures == 1


def test_a_candidate_a_few_percent_behind_keeps_a_small_chance_of_going_first() -> None:
    """Mutant L7 (CUTOFF 30 -> 1) survived: exploration of near ties (learned.py docstring: candidates
    within a few percent are tried in either order) was cut to candidates within 2 %."""
    first = get_policy("learned").rank([ev("a", 0.60), ev("b", 0.59)], random.Random(0))[0]
    assert first.key == "a@1.0.0" and 0.95 < first.probability < 0.999


def test_a_2_percent_better_candidate_is_about_e_times_as_likely_to_go_first() -> None:
    """Mutant L14 (TEMPERATURE 0.02 -> 0.2) survived: the near-tie test passes at any temperature.
    learned.py: a 2% better candidate is ~2.7x as likely to go first."""
    import math

    first = get_policy("learned").rank([ev("a", 0.5), ev("b", 0.5, feedback_points=2.0)], random.Random(0))[0]
    p_b = first.probability if first.key == "b@1.0.0" else 1 - first.probability  # b's chance of the first place
    odds = math.exp(math.log(1.02) / 0.02)  # ~2.7
    assert p_b == pytest.approx(odds / (1 + odds), abs=0.01)


def test_the_classifiers_doubt_costs_at_most_e_to_the_minus_0_9() -> None:
    """Mutant L15 (CLASSIFIER_WEIGHT 0.3 -> 0.6) survived. learned.py: its doubt costs at most e^(-3c) (0.41)."""
    import math

    def score_of_a(**fields: Any) -> float:
        ranked = get_policy("learned").rank([ev("a", 0.5, **fields), ev("b", 0.5, classifier_score=20.0 if fields else None)],
                                            random.Random(0))
        return next(c.score for c in ranked if c.key == "a@1.0.0")

    assert score_of_a(classifier_score=0.0) / score_of_a() == pytest.approx(math.exp(-0.9), rel=1e-3)


def test_the_served_version_and_a_promoted_one_have_base_1() -> None:
    """Mutant E5 (promoted/version base 1.0 -> 0.95) survived: the seed test checks `original` only."""
    policy = SeedPolicy()
    assert policy.score(ev("a", 0.5, source="promoted"))[0] == pytest.approx(1.0)
    assert policy.score(ev("a", 0.5, source="version"))[0] == pytest.approx(1.0)

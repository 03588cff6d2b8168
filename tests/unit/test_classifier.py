"""The tool classifier on plain vectors: where it starts, what a refit teaches it, how it travels
through a text store, and the errors that name bad input."""

from __future__ import annotations

import numpy as np
import pytest

from selection.classifier import ToolClassifier


def unit(*values: float) -> list[float]:
    v = np.array(values, dtype=float)
    return (v / np.linalg.norm(v)).tolist()


# Two tools whose descriptions point along the first two axes; the jobs tool b really serves lie
# along the third axis, a little closer to a's description than to b's.
DESCRIPTIONS = {"a": unit(1, 0, 0, 0), "b": unit(0, 1, 0, 0)}


def jobs_of_b(n: int, seed: int = 0) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [unit(*(np.array([0.35, 0.25, 1.0, 0.0]) + rng.normal(0, 0.1, 4))) for _ in range(n)]


def best(scores: dict[str, float]) -> str:
    return max(scores, key=scores.__getitem__)


def test_untrained_it_scores_the_description_match() -> None:
    clf = ToolClassifier.from_descriptions(DESCRIPTIONS, bandwidth=0.1)
    scores = clf.predict_one(unit(0.9, 0.1, 0, 0))
    assert best(scores) == "a"
    assert scores["a"] == pytest.approx(10 * float(np.dot(unit(0.9, 0.1, 0, 0), DESCRIPTIONS["a"])), rel=1e-5)


def test_a_refit_learns_which_tool_served_a_region() -> None:
    clf = ToolClassifier.from_descriptions(DESCRIPTIONS)
    new_job = jobs_of_b(1, seed=99)[0]
    assert best(clf.predict_one(new_job)) == "a"  # by the descriptions alone
    examples = jobs_of_b(20) + [DESCRIPTIONS["a"]] * 5
    fitted = clf.learn_many(examples, ["b"] * 20 + ["a"] * 5)
    scores = fitted.predict_one(new_job)
    assert best(scores) == "b"
    assert best(fitted.predict_one(unit(1, 0, 0, 0))) == "a"  # a keeps its own jobs
    assert fitted.examples == 25 and fitted.revision and fitted.revision != clf.revision


def test_more_passes_teach_more() -> None:
    clf = ToolClassifier.from_descriptions(DESCRIPTIONS)
    job = jobs_of_b(1, seed=7)[0]
    examples, names = jobs_of_b(20) + [DESCRIPTIONS["a"]] * 5, ["b"] * 20 + ["a"] * 5

    def margin(c: ToolClassifier) -> float:
        s = c.predict_one(job)
        return s["b"] - s["a"]

    once = clf.learn_many(examples, names, epochs=5)
    more = clf.learn_many(examples, names, epochs=30)
    assert margin(clf) < margin(once) < margin(more)
    assert margin(more.learn_many(examples, names, epochs=30)) > margin(more)  # a refit goes on from its columns


def test_a_namespace_it_never_saw_is_scored_by_its_description() -> None:
    clf = ToolClassifier.from_descriptions(DESCRIPTIONS, bandwidth=0.1)
    scores = clf.predict_one(unit(1, 1, 0, 0))
    assert "c" not in scores
    assert clf.score(scores, "c", 0.42) == pytest.approx(4.2)
    assert clf.score(scores, "a", 0.0) == scores["a"]
    grown = clf.with_names({**DESCRIPTIONS, "c": unit(0, 0, 0, 1)})
    assert grown.names == ["a", "b", "c"]
    assert grown.predict_one(unit(0, 0, 0, 1))["c"] == pytest.approx(10.0, rel=1e-5)
    assert clf.with_names(DESCRIPTIONS) is clf


def test_past_max_names_only_the_namespaces_with_most_successes_are_fitted() -> None:
    clf = ToolClassifier.from_descriptions({**DESCRIPTIONS, "c": unit(0, 0, 0, 1)})
    examples = jobs_of_b(20) + [DESCRIPTIONS["a"]] * 5 + [unit(0, 0, 0, 1)] * 2
    names = ["b"] * 20 + ["a"] * 5 + ["c"] * 2
    capped = clf.learn_many(examples, names, max_names=2)
    # c, with the fewest successes, keeps its column; a and b are fitted and b learned its region
    assert np.array_equal(capped.weights[:, 2], clf.weights[:, 2]) and capped.bias[2] == clf.bias[2]
    assert not np.array_equal(capped.weights[:, :2], clf.weights[:, :2])
    assert best(capped.predict_one(jobs_of_b(1, seed=99)[0])) == "b"
    assert capped.examples == 27  # the successes it was given
    # at or under the cap every namespace is fitted, exactly as without one
    uncapped, at_cap = clf.learn_many(examples, names), clf.learn_many(examples, names, max_names=3)
    assert np.array_equal(uncapped.weights, at_cap.weights) and np.array_equal(uncapped.bias, at_cap.bias)
    assert not np.array_equal(uncapped.weights[:, 2], clf.weights[:, 2])


def test_a_plan_gets_the_scores_of_its_candidates_only() -> None:
    fitted = ToolClassifier.from_descriptions(DESCRIPTIONS).learn_many(jobs_of_b(10), ["b"] * 10)
    job = jobs_of_b(1, seed=5)[0]
    every = fitted.predict_one(job)
    some = fitted.predict_one(job, ["b", "unknown"])
    assert list(some) == ["b"]  # a namespace it has no column for is left to `score`
    assert some["b"] == pytest.approx(every["b"], rel=1e-6)
    assert fitted.predict_one(job, []) == {}


def test_it_travels_as_text() -> None:
    fitted = ToolClassifier.from_descriptions(DESCRIPTIONS).learn_many(jobs_of_b(10), ["b"] * 10)
    text = fitted.to_text()
    assert isinstance(text, str)
    back = ToolClassifier.from_text(text)
    job = jobs_of_b(1, seed=3)[0]
    assert back.predict_one(job) == pytest.approx(fitted.predict_one(job))
    assert (back.revision, back.examples, back.scale, back.names) == (fitted.revision, 10, fitted.scale, ["a", "b"])
    assert ToolClassifier.from_text(text.encode()).revision == fitted.revision


def test_bad_input_is_named() -> None:
    clf = ToolClassifier.from_descriptions(DESCRIPTIONS)
    with pytest.raises(ValueError, match="4 dimensions"):
        clf.predict_one([1.0, 0.0])
    with pytest.raises(ValueError, match=r"namespaces without a column: \['zz'\]"):
        clf.learn_many(jobs_of_b(2), ["b", "zz"])
    with pytest.raises(ValueError, match="max_names must be >= 1"):
        clf.learn_many(jobs_of_b(2), ["b", "b"], max_names=0)
    with pytest.raises(ValueError, match="expected 3 vectors of 4 dimensions"):
        clf.learn_many(jobs_of_b(2), ["b", "b", "b"])
    with pytest.raises(ValueError, match="not a stored tool classifier"):
        ToolClassifier.from_text("not base64 at all!")
    with pytest.raises(ValueError, match="at least one namespace"):
        ToolClassifier.from_descriptions({})
    with pytest.raises(ValueError, match="finite"):
        ToolClassifier(["a"], np.array([[float("nan")]]), np.zeros(1))

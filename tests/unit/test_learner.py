"""The weight learner: weights follow the component that predicts success; too few records change
nothing; the beat entry that runs it exists."""

from __future__ import annotations

import random

import pytest

from selection.learner import FLOOR_WEIGHT, MIN_RECORDS, ExecutionRecord, WeightLearner, retrain
from selection.ports import SelectionWeights
from selection.sparc import COMPONENTS


def records(n: int, predictive: str, seed: int = 0) -> list[ExecutionRecord]:
    """Outcomes driven by one component (plus 10% noise); the others are random."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        components = {c: rng.random() for c in COMPONENTS}
        success = components[predictive] > 0.5
        if rng.random() < 0.1:
            success = not success
        out.append(ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="t", version="1.0.0", scenario="s",
                                   components=components, success=success))
    return out


def test_weights_move_towards_the_predictive_component() -> None:
    current = SelectionWeights()
    for predictive in ("phase", "history"):
        new, evidence = retrain(records(200, predictive), current)
        assert new is not None
        assert new.weights[predictive] > current.weights[predictive]
        assert max(new.weights, key=new.weights.__getitem__) == predictive
        assert abs(sum(new.weights.values()) - 1.0) < 1e-3
        assert evidence.records == 200 and evidence.correlations[predictive] > 0.5


def test_the_same_records_again_make_no_new_weights_version() -> None:
    """QA saw weights v8 and v9 learned from the same 38 records, equal: a beat that finds no new
    record changes nothing, and `fittest weights` shows one version for it."""
    window = records(38, "phase")
    new, _ = retrain(window, SelectionWeights())
    assert new is not None
    again, evidence = retrain(window, new)
    assert again is None and evidence.unchanged == "the recent records give the weights in use"


def test_records_set_aside_as_a_callers_mistake_teach_the_weights_nothing() -> None:
    """QA ops: the weights read the refusals of callers' bad inputs (failures whatever the
    components said) where `recommend` left them out."""
    window = records(200, "phase")
    mistakes = [r.model_copy(update={"attempt_id": f"m{i}", "success": False, "forgiven": True,
                                     "components": {**r.components, "phase": 1.0}}) for i, r in enumerate(window[:150])]
    alone, _ = retrain(window, SelectionWeights())
    mixed, evidence = retrain(window + mistakes, SelectionWeights())
    assert alone is not None and mixed is not None and mixed.weights == alone.weights
    assert (evidence.records, evidence.set_aside) == (200, 150)


def test_fewer_than_min_records_leave_the_weights_unchanged() -> None:
    current = SelectionWeights(weights={"phase": 0.5, "language": 0.5, "complexity": 0, "task_type": 0, "history": 0})
    new, evidence = retrain(records(MIN_RECORDS - 1, "phase"), current)
    assert new is None
    assert "fewer than" in str(evidence.unchanged)
    assert WeightLearner(current.weights).weights() == {"phase": 0.5, "language": 0.5, "complexity": 0.0,
                                                        "task_type": 0.0, "history": 0.0}


def test_no_positive_correlation_leaves_the_weights_unchanged() -> None:
    flat = [r.model_copy(update={"components": {c: 0.5 for c in COMPONENTS}}) for r in records(50, "phase")]
    new, evidence = retrain(flat, SelectionWeights())
    assert new is None and "no component" in str(evidence.unchanged)


def test_a_correlation_within_the_noise_of_few_records_changes_no_weight() -> None:
    """QA U: 34 records moved every weight to complexity, for a correlation of +0.04; 34 records
    show twice that by chance alone."""
    def window(complexity_tracks: float) -> list[ExecutionRecord]:
        out = []
        for i in range(34):
            success = i % 2 == 0
            components = ({c: 0.4 + 0.2 * (i // 2 % 2) for c in COMPONENTS}  # varying, and telling nothing
                          | {"complexity": (i * 5 % 34) / 34 + (complexity_tracks if success else 0.0)})
            out.append(ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="t", version="1.0.0", scenario="s",
                                       components=components, success=success))
        return out

    weak = window(0.06)
    learner = WeightLearner()
    for r in weak:
        learner.learn_one(r.components, r.success)
    assert 0 < learner.correlations()["complexity"] < 0.1 < learner.noise()
    new, evidence = retrain(weak, SelectionWeights())
    assert new is None and evidence.unchanged == "no component correlates positively with success beyond the noise of 34 records (0.34)"
    against, evidence = retrain(window(-0.6), SelectionWeights())  # complexity tells failures apart
    assert against is None and str(evidence.unchanged).endswith(
        "; complexity correlates with failure beyond it: check the SPARC metadata of the tools that fail")
    strong, _ = retrain(window(0.6), SelectionWeights())  # complexity now tells the outcomes apart
    assert strong is not None and strong.weights["complexity"] == 1 - 4 * FLOOR_WEIGHT  # the others tell nothing


def test_history_that_predicts_failure_is_not_blamed_on_the_tools_metadata() -> None:
    """QA learning F3: "history correlates with failure: check the SPARC metadata" sent operators
    to manifests, where history is a version's own success near the scenario."""
    out = []
    for i in range(40):
        success = i % 2 == 0  # versions with successes nearby (history 0.9) now fail; newcomers (0.5) succeed
        components = {c: 0.5 for c in COMPONENTS} | {"history": 0.5 if success else 0.9, "language": 0.2 if success else 0.8}
        out.append(ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="t", version="1.0.0", scenario="s",
                                   components=components, success=success))
    new, evidence = retrain(out, SelectionWeights())
    assert new is None and str(evidence.unchanged).endswith(
        "; language correlates with failure beyond it: check the SPARC metadata of the tools that fail"
        "; history correlates with failure beyond it: versions that did such jobs fail them now (`fittest recommend` lists them)")


def test_learn_one_predict_one() -> None:
    learner = WeightLearner()
    for r in records(300, "language"):
        learner.learn_one(r.components, r.success)
    likely = learner.predict_one({"language": 0.9, "phase": 0.5, "complexity": 0.5, "task_type": 0.5, "history": 0.5})
    unlikely = learner.predict_one({"language": 0.1, "phase": 0.5, "complexity": 0.5, "task_type": 0.5, "history": 0.5})
    assert likely > unlikely


def test_a_misspelled_component_is_refused_by_name_not_learned_as_neutral() -> None:
    learner = WeightLearner()
    with pytest.raises(ValueError, match="unknown SPARC component\\(s\\) 'langauge' \\(known: phase, language"):
        learner.learn_one({"langauge": 0.9}, True)
    assert learner.n == 0
    with pytest.raises(ValueError, match="'langauge'"):
        learner.predict_one({"langauge": 0.9})


def test_a_component_the_window_tells_nothing_of_keeps_a_small_weight_and_the_telling_ones_share_the_rest() -> None:
    """QA 60b F3: no call stated a context, so phase, language, complexity and task type were 0.5 in
    every record; each was weighted 0, history 1, and a tool's declared complexity range stopped
    keeping it from jobs outside it. Review 60f: one call stating a complexity took it to 0 again.
    A component the window tells nothing of, for or against success, keeps FLOOR_WEIGHT; one that
    goes with failure beyond the noise, 0."""
    rng = random.Random(4)
    window = []
    for i in range(200):
        history, language, phase = rng.random(), rng.random(), rng.random()
        success = history > 0.5
        window.append(ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="t", version="1.0.0", scenario="s",
                                      components={"phase": phase if success else phase / 2,  # lower on failures
                                                  "complexity": 1.0 if i == 7 else 0.5,  # one call stated one
                                                  "task_type": 0.5, "language": language, "history": history},
                                      success=success))
    new, evidence = retrain(window, SelectionWeights())
    assert new is not None and evidence.correlations["task_type"] == 0.0 and evidence.noise is not None
    assert evidence.noise < evidence.correlations["phase"] < evidence.correlations["history"]  # both tell success
    assert {c: new.weights[c] for c in ("complexity", "task_type", "language")} == dict.fromkeys(
        ("complexity", "task_type", "language"), FLOOR_WEIGHT)
    assert new.weights["phase"] + new.weights["history"] == pytest.approx(1 - 3 * FLOOR_WEIGHT)
    learner = WeightLearner()
    for r in window:
        learner.learn_one(r.components, r.success)
    assert learner.untold() == {"complexity", "task_type", "language"}
    against = [r.model_copy(update={"components": {**r.components, "language": 0.0 if r.success else 1.0}}) for r in window]
    weights, _ = retrain(against, SelectionWeights())
    assert weights is not None and weights.weights["language"] == 0.0  # it goes with failure: no weight


def test_a_component_that_is_not_a_finite_number_is_refused_not_learned() -> None:
    """QA 60b F4: one history of inf among 40 records where history predicts success made its
    correlation NaN, and the weights went to phase for a chance correlation."""
    from pydantic import ValidationError

    learner = WeightLearner()
    with pytest.raises(ValueError, match="'history' not a finite number: inf"):
        learner.learn_one({"phase": 0.5, "history": float("inf")}, True)
    assert learner.n == 0
    with pytest.raises(ValueError, match="'phase' not a finite number: nan"):
        learner.predict_one({"phase": float("nan")})
    with pytest.raises(ValidationError, match="components.history"):  # a stored one is skipped as unreadable
        ExecutionRecord.model_validate_json('{"attempt_id": "a:0", "call_id": "a", "tool": "t", "version": "1.0.0", '
                                            '"scenario": "s", "success": true, "components": {"history": Infinity}}')


def test_beat_schedule_runs_retrain_weights_on_the_learning_queue() -> None:
    from workers.app import make_app
    from workers.settings import Settings

    app = make_app(Settings(retrain_interval_s=123.0))
    def queue(entry: dict) -> str:
        """The queue the beat's message for `entry` goes to, as celery routes it."""
        return app.amqp.router.route(entry.get("options", {}), entry["task"])["queue"].name

    entry = app.conf.beat_schedule["retrain-weights"]
    assert (entry["task"], entry["schedule"], queue(entry)) == ("fittest.retrain_weights", 123.0, "learning")
    assert app.conf.task_routes["fittest.learn"]["queue"] == "learning"
    pruning = app.conf.beat_schedule["prune-history"]  # the vector store's retention, on the same beat
    assert (pruning["task"], pruning["schedule"], queue(pruning)) == ("fittest.prune_history", 123.0, "learning")


def test_evidence_stored_by_an_earlier_release_still_reads() -> None:
    """Weights and their evidence outlive a release in Redis: the dict an earlier retrain stored is
    read by the evidence model (a key it no longer has is left out, none it lacks is required)."""
    stored = {"version": 4, "weights": {"history": 1.0}, "evidence": {
        "records": 40, "success_rate": 0.5, "correlations": {"history": 0.6}, "min_records": 10,
        "classifier": {"successes": 12, "namespaces": 5, "newest": 7.0, "revision": "abc",
                       "seen": {"successes": 12, "newest": 7.0, "namespaces": "f00", "max_namespaces": 1000}},
        "retired_key": True}}
    weights = SelectionWeights.model_validate(stored)
    assert weights.evidence.records == 40 and weights.evidence.noise is None and weights.evidence.set_aside == 0
    assert weights.evidence.classifier is not None and weights.evidence.classifier.seen is not None
    assert weights.evidence.classifier.seen.successes == 12


# QA 58b: behaviours a single mutation changed while every unit test passed
def predictive(n: int) -> list[ExecutionRecord]:
    """Records whose phase component tells success from failure perfectly (correlation 1)."""
    return [ExecutionRecord(attempt_id=f"a{i}", call_id=f"c{i}", tool="t", version="1.0.0", scenario="s",
                            components={c: 0.4 + 0.2 * (i // 2 % 2) for c in COMPONENTS} | {"phase": 1.0 if i % 2 else 0.0},
                            success=bool(i % 2)) for i in range(n)]


def test_ten_records_may_move_the_weights_and_nine_may_not() -> None:
    """Mutants N1 (MIN_RECORDS 10 -> 5) and N2 (`n < MIN_RECORDS` -> `<=`) survived: the existing test
    reads MIN_RECORDS from the module and tries MIN_RECORDS - 1 only. README/DESIGN: fewer than 10
    records leave the weights unchanged."""
    assert MIN_RECORDS == 10
    nine, evidence = retrain(predictive(9), SelectionWeights())
    assert nine is None and evidence.unchanged == "9 records, fewer than 10"
    ten, _ = retrain(predictive(10), SelectionWeights())
    assert ten is not None and ten.weights["phase"] == 1 - 4 * FLOOR_WEIGHT

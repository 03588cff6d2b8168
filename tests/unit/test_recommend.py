"""`fittest recommend`'s advice (selection/recommend.py)."""

from __future__ import annotations

from selection.learner import JUDGED_WRONG, ExecutionRecord
from selection.manifest import SparcMetadata
from selection.recommend import recommendation_report, recommendations


def record(i: int, success: bool, error: str | None, scenario: str) -> ExecutionRecord:
    return ExecutionRecord(attempt_id=f"c{i}:1", call_id=f"c{i}", tool="convert_units", version="1.0.0",
                           scenario=scenario, success=success, error_class=error)


def test_a_version_that_mostly_refused_its_input_is_not_told_to_evolve_or_retire() -> None:
    """QA I: convert_units did all 10 of its own jobs and refused the input of 16 VAT and CSV jobs it
    was tried on as a fallback; the advice was "fails in general (mostly bad_input): evolve it or retire it"."""
    records = [record(i, True, None, "how many miles is 10 kilometres") for i in range(10)]
    records += [record(10 + i, False, "bad_input", "add 20 percent VAT to a net price") for i in range(16)]
    (found,) = recommendations(records)
    assert found.context == "any" and found.error_classes == {"bad_input": 16}
    assert "refused its input" in found.advice and "evolve it or retire it" not in found.advice


def test_a_version_that_mostly_crashes_is_still_told_to_evolve_or_retire() -> None:
    records = [record(i, True, None, "add VAT") for i in range(3)]
    records += [record(3 + i, False, "crash" if i % 3 else "bad_input", "add VAT") for i in range(6)]
    (found,) = recommendations(records)
    assert found.advice.startswith("fails in general (mostly crash): evolve it or retire it")


def test_a_version_whose_outputs_are_mostly_judged_wrong_is_not_told_it_fails_in_general() -> None:
    """QA 56a M2: title_case, right on its own job, judged wrong on a job the team wanted in capitals,
    was told "fails in general (mostly judged_wrong): evolve it or retire it"."""
    records = [record(i, True, None, "capitalize every word of this title") for i in range(11)]
    records += [record(11 + i, False, JUDGED_WRONG, "capitalize this text") for i in range(16)]
    (found,) = recommendations(records, max_rate=0.8)
    assert found.advice.startswith("people judge its outputs wrong (mostly judged_wrong): on jobs another tool should do")
    assert found.failed_scenarios == ["capitalize this text"]


def test_the_report_counts_the_outputs_people_judged_wrong_only_when_their_judgements_were_applied() -> None:
    records = [record(i, True, None, "convert 3 miles") for i in range(2)]
    records += [record(2 + i, False, JUDGED_WRONG, "convert 3 miles") for i in range(5)]
    applied = recommendation_report(records, min_runs=5, max_rate=0.5, judgements_applied=True)
    assert (applied.records, applied.judged_wrong) == (7, 5)
    assert applied.recommendations[0].error_classes == {JUDGED_WRONG: 5}
    assert recommendation_report(records[:2], min_runs=5, max_rate=0.5, judgements_applied=False).judged_wrong is None


def in_context(i: int, success: bool, task_type: str, testing: str = "none") -> ExecutionRecord:
    return ExecutionRecord(attempt_id=f"c{i}:1", call_id=f"c{i}", tool="lint", version="1.0.0", scenario=f"job {task_type}",
                           success=success, error_class=None if success else "crash",
                           features={"task_type": task_type, "testing": testing})


def test_the_advice_to_narrow_a_version_says_which_field_of_its_manifest_and_not_when_it_leaves_the_context_out() -> None:
    """QA AC: "narrow its SPARC metadata (phases, languages, task types)" was the advice for a
    version whose manifest had no SPARC metadata, and for one whose task types left the context out
    already (the SPARC score ranked it lower there: narrowing changes nothing)."""
    records = [in_context(i, True, "analysis") for i in range(6)] + [in_context(6 + i, False, "bug_fix") for i in range(6)]

    def advice(sparc: SparcMetadata | None) -> str:
        (found,) = recommendations(records, sparc={"lint@1.0.0": sparc})
        assert found.context == "task_type=bug_fix" and found.elsewhere_rate == 1.0
        return found.advice

    assert "take bug_fix out of its SPARC task_types (analysis, bug_fix)" in advice(
        SparcMetadata(task_types=["analysis", "bug_fix"]))
    # QA AF: taking out the only one would leave none, which scores neutral everywhere
    assert "list in its SPARC task_types where it succeeds, not only bug_fix" in advice(SparcMetadata(task_types=["bug_fix"]))
    assert "give it SPARC task_types that leave bug_fix out (it lists none" in advice(None)
    assert "give it SPARC task_types that leave bug_fix out" in advice(SparcMetadata(languages=["python"]))
    left_out = advice(SparcMetadata(task_types=["analysis"]))
    assert left_out.endswith("but not elsewhere: evolve it for this context") and "SPARC" not in left_out
    # Not known (a version no longer served): the field, without what it lists.
    (found,) = recommendations(records)
    assert "narrow its SPARC task_types so the SPARC score ranks it lower there" in found.advice


def test_a_version_that_fails_in_one_testing_status_is_not_told_to_narrow_metadata_that_has_no_field_for_it() -> None:
    records = [in_context(i, True, "analysis", testing="passing") for i in range(6)]
    records += [in_context(6 + i, False, "analysis", testing="failing") for i in range(6)]
    found = [r for r in recommendations(records, sparc={"lint@1.0.0": None}) if r.context == "testing=failing"]
    assert found and found[0].advice.endswith("but not elsewhere: evolve it for this context")


def test_a_tie_names_both_error_classes_and_half_refused_inputs_is_not_told_to_evolve_or_retire() -> None:
    """QA AD: a 1-to-1 tie of bad_input and timeout was "fails in general (mostly bad_input): evolve
    it or retire it", the advice a version that mostly refused its input is told not to follow."""
    records = [record(0, False, "bad_input", "sort these"), record(1, False, "timeout", "sort these")]
    (found,) = recommendations(records, min_runs=1)
    assert found.advice.startswith("as often as not refused its input (bad_input)")
    records.append(record(2, False, "timeout", "sort these"))
    records.append(record(3, False, "crash", "sort these"))
    records.append(record(4, False, "crash", "sort these"))
    (found,) = recommendations(records, min_runs=1)
    assert found.advice.startswith("fails in general (mostly crash and timeout): evolve it or retire it")


def test_the_records_set_aside_as_a_callers_mistake_are_no_evidence_for_recommend() -> None:
    """QA AF: refused inputs of a job a tool does, set aside by selection, would list it."""
    records = [record(i, False, "bad_input", "sha256 of this").model_copy(update={"forgiven": True}) for i in range(6)]
    report = recommendation_report(records, min_runs=3, max_rate=0.5, judgements_applied=True)
    assert (report.recommendations, report.records, report.set_aside) == ([], 0, 6)  # said, not silently fewer (QA ops)
    assert recommendation_report([r.model_copy(update={"forgiven": False}) for r in records], min_runs=3, max_rate=0.5,
                                 judgements_applied=True).recommendations


def test_a_context_no_caller_gave_is_marked_detected() -> None:
    """QA ops: "task_type=modification", detected from "convert", sent the operator looking for callers."""
    def run(i: int, success: bool, source: str) -> ExecutionRecord:
        return record(i, success, None if success else "crash", "convert this").model_copy(update={"features": {
            "task_type": "modification", "source": {"task_type": source}}})

    def found(records: list[ExecutionRecord]) -> dict[str, bool]:
        return {r.context: r.detected for r in recommendations(records, min_runs=3)}

    ok = [record(100 + i, True, None, "sort numbers") for i in range(10)]
    assert found([run(i, False, "detected") for i in range(4)] + ok) == {"task_type=modification": True}
    assert found([run(i, False, "detected") for i in range(3)] + [run(9, False, "explicit")] + ok) == {
        "task_type=modification": False}


def test_contexts_with_exactly_the_same_runs_are_one_row() -> None:
    """QA ops: the same 5 refusals of CSV jobs were listed as "languages=python", again as
    "task_type=modification", and within "any"."""
    def csv_job(i: int, language: str = "python") -> ExecutionRecord:
        return record(i, False, "crash", "convert this CSV export").model_copy(update={"features": {
            "task_type": "modification", "languages": [language]}})

    ok = [record(100 + i, True, None, "miles in 10 km") for i in range(10)]
    rows = recommendations([csv_job(i) for i in range(5)] + ok)
    assert [(r.context, r.same_runs) for r in rows] == [("task_type=modification", ["languages=python"])]
    # Runs that differ in one context stay rows of their own.
    rows = recommendations([csv_job(i) for i in range(5)] + [csv_job(5, "java")] + ok)
    assert sorted(r.context for r in rows) == ["languages=python", "task_type=modification"]


def test_a_version_failing_on_large_inputs_is_told_so_by_a_complexity_band() -> None:
    """QA ops: timeouts on 30,000 numbers (complexity 0.61) could only be blamed on the language the
    calls also gave; the retrain on the same records learned a complexity weight."""
    def run(i: int, ok: bool, complexity: float) -> ExecutionRecord:
        return record(i, ok, None if ok else "timeout", "order the scores").model_copy(update={"features": {
            "complexity": complexity, "source": {"complexity": "detected"}}})

    records = [run(i, True, 0.16) for i in range(10)] + [run(10 + i, False, 0.61) for i in range(5)]
    (row,) = recommendations(records, sparc={"convert_units@1.0.0": SparcMetadata()})
    assert row.context == "complexity=0.5-1.0" and row.detected and row.elsewhere_rate == 1.0
    assert "lower its SPARC complexity_max to 0.5 (it is 1.0)" in row.advice
    (row,) = recommendations(records, sparc={"convert_units@1.0.0": SparcMetadata(complexity_max=0.5)})
    assert row.advice.endswith("evolve it for this context")  # its range leaves such inputs out already
    # QA selection F12: "but not elsewhere" of a single run elsewhere told a tool to raise its
    # complexity_min past 42 of its 43 runs; fewer runs elsewhere than min_runs say nothing of it.
    few = [run(i, True, 0.16) for i in range(2)] + [run(10 + i, False, 0.61) for i in range(5)]
    (row,) = [r for r in recommendations(few, sparc={"convert_units@1.0.0": SparcMetadata()}) if r.context != "any"]
    assert row.elsewhere_rate == 1.0 and row.advice == "fails where complexity=0.5-1.0 (mostly timeout): evolve it"
    # A complexity nothing measured (a call without input) is no band.
    unknown = [r.model_copy(update={"features": {"complexity": 0.0, "source": {"complexity": "default"}}}) for r in records]
    assert [r.context for r in recommendations(unknown)] == []


def test_a_version_no_longer_served_is_left_out_and_named() -> None:
    """QA integration L5: a removed tool and a version replaced in place were told "evolve it or retire it"."""
    from selection.manifest import ToolManifest

    records = [record(i, False, "timeout", "convert 3 miles") for i in range(6)]
    served = ToolManifest(name="convert_units", version="1.1.0", description="d",
                          implementation={"kind": "http", "url": "http://127.0.0.1:9/x"})
    report = recommendation_report(records, min_runs=5, max_rate=0.5, judgements_applied=True, manifests=[served],
                                   registered_only=True)
    assert (report.recommendations, report.not_served) == ([], ["convert_units@1.0.0"])
    deprecated = served.model_copy(update={"version": "1.0.0", "deprecated": True})
    assert recommendation_report(records, min_runs=5, max_rate=0.5, judgements_applied=True, manifests=[deprecated],
                                 registered_only=True).not_served == ["convert_units@1.0.0"]
    kept = recommendation_report(records, min_runs=5, max_rate=0.5, judgements_applied=True,
                                 manifests=[served.model_copy(update={"version": "1.0.0"})], registered_only=True)
    assert [r.tool for r in kept.recommendations] == ["convert_units@1.0.0"] and kept.not_served == []
    # Without the whole registry (the CLI reading the tools directory alone), nothing is left out.
    assert recommendation_report(records, min_runs=5, max_rate=0.5, judgements_applied=True,
                                 manifests=[served]).recommendations[0].tool == "convert_units@1.0.0"

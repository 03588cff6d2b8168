"""SPARC scoring: components, breakdown and rationale; missing metadata is neutral, not zero."""

from __future__ import annotations

import pytest

from selection.context import ContextFeatures, analyse
from selection.manifest import ToolManifest
from selection.sparc import COMPONENTS, NEUTRAL, declared_against, language_component, sparc_score, task_component

HTTP = {"kind": "http", "url": "http://127.0.0.1:9/run"}

EQUAL = {c: 0.2 for c in COMPONENTS}


def tool(sparc: dict | None = None) -> ToolManifest:
    return ToolManifest(name="t", description="d", sparc=sparc, implementation={"kind": "http", "url": "http://x"})


def test_tool_without_metadata_scores_neutral() -> None:
    features = ContextFeatures(phase="refinement", languages=["python"], complexity=0.4, task_type="bug_fix")
    s = sparc_score(tool(), features, EQUAL)
    assert s.components == {c: NEUTRAL for c in COMPONENTS}
    assert s.score == NEUTRAL
    assert "neutral" in s.rationale


def test_matching_tool_beats_mismatching_one_with_a_breakdown() -> None:
    features = ContextFeatures(phase="refinement", languages=["python"], complexity=0.4, task_type="bug_fix")
    fit = sparc_score(tool({"phases": ["refinement"], "languages": ["python"], "task_types": ["bug_fix"],
                            "complexity_min": 0.2, "complexity_max": 0.6}), features, EQUAL)
    misfit = sparc_score(tool({"phases": ["specification"], "languages": ["java"], "task_types": ["documentation"],
                               "complexity_min": 0.8, "complexity_max": 1.0}), features, EQUAL)
    assert fit.components == {"phase": 1.0, "language": 1.0, "complexity": 1.0, "task_type": 1.0, "history": NEUTRAL}
    assert misfit.components["phase"] == 0.125  # specification is 3 phases from refinement: under neutral
    assert misfit.components["language"] == 0.0
    assert misfit.components["complexity"] == 0.1  # 0.4 outside the range 0.8-1.0
    assert misfit.components["task_type"] == 0.0
    assert fit.score > NEUTRAL > misfit.score
    assert "refinement phase fits" in fit.rationale and "supports python" in fit.rationale
    assert "no support for python" in misfit.rationale


def test_a_context_just_outside_what_a_tool_declares_scores_under_a_tool_that_declares_nothing() -> None:
    """QA AD: sort_numbers (complexity up to 0.5) scored 0.88 on a 0.56 list, above fast_sort's neutral
    0.5 (no range declared), ran first and timed out; a phase one away from a tool's scored 0.75."""
    features = ContextFeatures(phase="pseudocode", complexity=0.56, source={"complexity": "detected"})
    for declared in ({"complexity_max": 0.5}, {"phases": ["architecture", "refinement"]}):
        limited = sparc_score(tool(declared), features, EQUAL)
        assert limited.score < sparc_score(tool(), features, EQUAL).score == NEUTRAL, declared
    assert sparc_score(tool({"complexity_max": 0.5}), features, EQUAL).components["complexity"] == pytest.approx(0.44)
    assert sparc_score(tool({"phases": ["architecture"]}), features, EQUAL).components["phase"] == 0.375


def test_a_complexity_nobody_gave_or_measured_scores_neutral() -> None:
    """QA AC: a call without files or input got complexity 0.0 by default, and a tool made for
    simple jobs (complexity up to 0.4) a full 1.0 on it, ahead of tools without metadata."""
    simple = tool({"complexity_max": 0.4})
    unknown = sparc_score(simple, analyse("make a URL slug from the article title"), EQUAL)
    assert unknown.components["complexity"] == NEUTRAL and unknown.score == NEUTRAL
    assert "nothing in its SPARC metadata decides this context" in unknown.rationale
    stated = sparc_score(simple, analyse("make a URL slug from the article title", {"complexity": 0.0}), EQUAL)
    assert stated.components["complexity"] == 1.0 and "complexity 0.00 within 0.0-0.4" in stated.rationale
    measured = sparc_score(simple, analyse("make a URL slug", input={"title": "Hello world"}), EQUAL)
    assert measured.components["complexity"] == 1.0


@pytest.mark.parametrize("context", [{"language": "python3"}, {"language": "py"}, {"languages": ["Python 3.11"]},
                                     {"language": "python"}])
def test_a_language_alias_scores_a_tool_of_that_language_as_a_match(context: dict[str, str]) -> None:
    """QA F6: `fittest explain "parse a spreadsheet saved as CSV into records" --context
    '{"language":"python3"}'` scored csv_to_json (`languages: [python]`) 0 on language, worse than
    saying nothing (0.5)."""
    features = analyse("parse a spreadsheet saved as CSV into records", context)
    s = sparc_score(tool({"languages": ["python"]}), features, EQUAL)
    assert s.components["language"] == 1.0 and "supports python" in s.rationale


def test_languages_given_with_commas_or_declared_in_another_spelling_match() -> None:
    both = analyse("parse csv", {"languages": "python,rust"})
    assert sparc_score(tool({"languages": ["python"]}), both, EQUAL).components["language"] == 0.5  # one of two
    assert sparc_score(tool({"languages": ["Python3", "rs"]}), both, EQUAL).components["language"] == 1.0


def test_a_known_language_the_tool_lacks_scores_0_and_an_unknown_name_neutral() -> None:
    python_tool = tool({"languages": ["python"]})
    rust = sparc_score(python_tool, analyse("parse csv", {"language": "rust"}), EQUAL)
    assert rust.components["language"] == 0.0 and "no support for rust" in rust.rationale
    typo = analyse("parse csv", {"language": "pyhton"})  # a spelling nobody taught it neither helps nor hurts
    assert sparc_score(python_tool, typo, EQUAL).components["language"] == NEUTRAL
    assert language_component(python_tool.sparc, typo) == (NEUTRAL, "language pyhton not known")
    assert sparc_score(tool({"languages": ["cobol"]}), analyse("x", {"language": "COBOL"}), EQUAL).components["language"] == 1.0


def test_unknown_context_leaves_metadata_neutral() -> None:
    s = sparc_score(tool({"phases": ["completion"], "languages": ["go"]}), ContextFeatures(), EQUAL)
    assert s.components["phase"] == NEUTRAL and s.components["language"] == NEUTRAL


def test_history_component_and_weights() -> None:
    features = ContextFeatures()
    good = sparc_score(tool(), features, {"history": 1.0}, successes=3.0, failures=0.0)
    bad = sparc_score(tool(), features, {"history": 1.0}, successes=0.0, failures=3.0)
    assert good.components["history"] > NEUTRAL > bad.components["history"]
    assert good.score == good.components["history"]  # all weight on history
    # A weight of zero removes a component's influence.
    assert sparc_score(tool(), features, {"phase": 1.0}, successes=3.0).score == NEUTRAL


def test_a_history_of_as_many_successes_as_failures_is_named_though_it_scores_neutral() -> None:
    """QA AD: 3 successes and 3 failures nearby were explained as "no SPARC metadata or history"."""
    even = sparc_score(tool(), ContextFeatures(), EQUAL, successes=3.0, failures=3.0)
    assert even.score == NEUTRAL and even.rationale == "history 0.50 (3.00 successes, 3.00 failures nearby)"
    trace = sparc_score(tool(), ContextFeatures(), EQUAL, successes=0.01)  # QA AE: a trace was named
    assert trace.rationale == "no SPARC metadata or history: neutral"


def test_a_component_the_learned_weights_give_nothing_is_not_given_as_a_reason() -> None:
    """QA AD: "pseudocode phase is 1 from its phases" was a reason at phase weight 0.00."""
    features = ContextFeatures(phase="pseudocode", languages=["python"])
    meta = {"phases": ["architecture"], "languages": ["python"]}
    no_phase = {**EQUAL, "phase": 0.0}
    s = sparc_score(tool(meta), features, no_phase)
    assert s.rationale == "supports python" and "phase" not in s.rationale
    only_phase = sparc_score(tool({"phases": ["architecture"]}), features, no_phase)
    assert only_phase.score == NEUTRAL and only_phase.rationale == "what it says weighs nothing under the current weights: neutral"


def test_only_a_language_the_call_states_sets_apart_a_tool_that_declares_none_of_it() -> None:
    python_only = tool({"languages": ["python"]})
    stated = analyse("review this code for bugs", {"language": "javascript"})
    assert declared_against(python_only, stated)
    assert not declared_against(tool(), stated)  # declares nothing
    assert not declared_against(tool({"languages": ["python", "js"]}), stated)  # an alias of javascript
    assert not declared_against(python_only, analyse("review this code for bugs", {"languages": "python,javascript"}))
    detected = analyse("review this code for bugs", {"files": ["app/main.js"]})
    assert detected.languages == ["javascript"] and not declared_against(python_only, detected)  # only scales
    assert not declared_against(python_only, analyse("review this code for bugs", {"language": "klingon"}))


# QA 58b: behaviours a single mutation changed while every unit test passed
def test_an_unknown_language_beside_a_known_one_is_left_out_of_the_share() -> None:
    """Mutant P2 (`len(shared) / len(known)` -> `/ len(wanted)`) survived. sparc.py: a name neither the
    analyser nor the tool knows is left out of the share."""
    meta = ToolManifest(name="t", description="d", implementation=HTTP, sparc={"languages": ["python"]}).sparc
    value, _ = language_component(meta, ContextFeatures(languages=["python", "klingon"]))
    assert value == 1.0


def test_a_general_purpose_tool_scores_neutral_on_a_task_type_it_does_not_list() -> None:
    """Mutant P6 (general-purpose -> 0.0) survived."""
    meta = ToolManifest(name="t", description="d", implementation=HTTP, sparc={"task_types": ["general"]}).sparc
    assert task_component(meta, ContextFeatures(task_type="bug_fix"))[0] == 0.5
    other = ToolManifest(name="t", description="d", implementation=HTTP, sparc={"task_types": ["documentation"]}).sparc
    assert task_component(other, ContextFeatures(task_type="bug_fix"))[0] == 0.0

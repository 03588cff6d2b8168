"""SPARC scoring: components, breakdown and rationale; missing metadata is neutral, not zero."""

from __future__ import annotations

from selection.context import ContextFeatures
from selection.manifest import ToolManifest
from selection.sparc import COMPONENTS, NEUTRAL, sparc_score

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
    assert misfit.components["phase"] == 0.25  # specification is 3 phases from refinement
    assert misfit.components["language"] == 0.0
    assert misfit.components["complexity"] == 0.2  # 0.4 outside the range 0.8-1.0
    assert misfit.components["task_type"] == 0.0
    assert fit.score > NEUTRAL > misfit.score
    assert "refinement phase fits" in fit.rationale and "supports python" in fit.rationale
    assert "no support for python" in misfit.rationale


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

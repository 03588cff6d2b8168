"""SPARC score: how well a tool version fits the call's context, with a breakdown and a rationale.

Five components, each 0..1, where 0.5 means "nothing known" (a tool without SPARC metadata, or a
context that says nothing about that aspect) so that missing metadata neither helps nor hurts:

- phase: 1 when the tool lists the call's phase; otherwise under neutral, the less the further its
  nearest phase is (0 at 4 apart);
- language: the share of the call's languages the tool supports, both named canonically
  (selection/context.py); a name neither the analyser nor the tool knows is left out of the share
  (it may be a spelling nobody taught it), and with only such names the component is neutral;
- complexity: 1 inside the tool's range; outside it from neutral down to 0 at 0.5 outside;
- task_type: 1 when the tool lists it, 0.5 when it lists "general", else 0;
- history: the tool version's success rate in similar past scenarios, kernel-weighted
  (selection/feedback.py), with one pseudo-observation at 0.5.

A component of the context outside what a tool declares scores under neutral, never above it: a
declared limit must not rank a tool above one that declares none where the limit says it does not
belong (QA AD: a sort declared for complexity up to 0.5 scored 0.88 at 0.56, above the neutral 0.5
of the sort made for large lists, ran first and timed out).

The score is the weighted mean of the components under the learner's weights.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from selection.context import KNOWN_LANGUAGES, PHASES, ContextFeatures, canonical_language
from selection.manifest import SparcMetadata, ToolManifest

NEUTRAL = 0.5
COMPONENTS = ("phase", "language", "complexity", "task_type", "history")
PHASE_SPAN = len(PHASES) - 1
COMPLEXITY_FALLOFF = 2.0  # per unit of distance outside the tool's range
HISTORY_PRIOR = 1.0  # pseudo-observations at NEUTRAL
HISTORY_NAMED = 0.1  # kernel-weighted outcomes nearby (a tenth of one of the same scenario) before history is a reason


class SparcScore(BaseModel):
    score: float = Field(ge=0.0, le=1.0)
    components: dict[str, float]
    rationale: str


def phase_component(meta: SparcMetadata | None, features: ContextFeatures) -> tuple[float, str]:
    if meta is None or not meta.phases or features.phase is None:
        return NEUTRAL, "phase unknown" if features.phase is None else "no phase metadata"
    at = PHASES.index(features.phase)
    gap = min(abs(PHASES.index(p) - at) for p in meta.phases)
    if gap == 0:
        return 1.0, f"{features.phase} phase fits"
    return NEUTRAL * max(0.0, 1.0 - gap / PHASE_SPAN), f"{features.phase} phase is {gap} from its phases"


def language_component(meta: SparcMetadata | None, features: ContextFeatures) -> tuple[float, str]:
    if meta is None or not meta.languages or not features.languages:
        return NEUTRAL, "language unknown" if not features.languages else "no language metadata"
    supported = {canonical_language(x) for x in meta.languages}
    wanted = sorted({canonical_language(x) for x in features.languages})
    known = [x for x in wanted if x in KNOWN_LANGUAGES or x in supported]
    if not known:
        return NEUTRAL, f"language {', '.join(wanted)} not known"
    shared = sorted(supported.intersection(known))
    if not shared:
        return 0.0, f"no support for {', '.join(known)}"
    return len(shared) / len(known), f"supports {', '.join(shared)}"


def declared_against(manifest: ToolManifest, features: ContextFeatures) -> bool:
    """Whether the tool declares languages none of which the call's context states explicitly:
    such a version ranks after every other candidate (each group in the policy's order). The
    language component alone only scales a score, which a description 0.04 more similar or two
    earlier successes outweigh (QA: a python-only tool ranked first for a call stating javascript,
    its rationale saying "no support for javascript"). A language only detected in the words or
    files is no such statement, and still only scales."""
    if features.source.get("languages") != "explicit":
        return False
    return language_component(manifest.sparc, features)[0] == 0.0


def declared_for(manifest: ToolManifest, features: ContextFeatures) -> bool:
    """Whether the tool declares one of the languages the call's context states explicitly."""
    meta = manifest.sparc
    if features.source.get("languages") != "explicit" or meta is None or not meta.languages:
        return False
    return bool({canonical_language(x) for x in meta.languages} & {canonical_language(x) for x in features.languages})


def complexity_component(meta: SparcMetadata | None, features: ContextFeatures) -> tuple[float, str]:
    """A complexity nothing stated or measured (the 0.0 of a call without files or input) is
    unknown, as a phase or language nothing said is (QA AC: it scored a tool made for simple jobs 1.0)."""
    if features.source.get("complexity") == "default":
        return NEUTRAL, "complexity unknown"
    if meta is None or (meta.complexity_min, meta.complexity_max) == (0.0, 1.0):
        return NEUTRAL, "any complexity"
    c = features.complexity
    lo, hi = meta.complexity_min, meta.complexity_max
    distance = max(lo - c, c - hi, 0.0)
    if distance == 0:
        return 1.0, f"complexity {c:.2f} within {lo:.1f}-{hi:.1f}"
    return NEUTRAL * max(0.0, 1.0 - COMPLEXITY_FALLOFF * distance), f"complexity {c:.2f} outside {lo:.1f}-{hi:.1f}"


def task_component(meta: SparcMetadata | None, features: ContextFeatures) -> tuple[float, str]:
    if meta is None or not meta.task_types or features.task_type == "general":
        return NEUTRAL, "task unknown" if features.task_type == "general" else "no task metadata"
    if features.task_type in meta.task_types:
        return 1.0, f"made for {features.task_type}"
    if "general" in meta.task_types:
        return NEUTRAL, f"general-purpose for {features.task_type}"
    return 0.0, f"not made for {features.task_type}"


def history_component(successes: float, failures: float) -> tuple[float, str]:
    """`successes`/`failures`: kernel-weighted counts of this version's outcomes in similar scenarios."""
    value = (successes + NEUTRAL * HISTORY_PRIOR) / (successes + failures + HISTORY_PRIOR)
    if successes + failures < 0.01:
        return value, "no history nearby"
    return value, f"history {value:.2f} ({successes:.2f} successes, {failures:.2f} failures nearby)"


def normalised(weights: Mapping[str, float]) -> dict[str, float]:
    """The weights of COMPONENTS summing to 1 (equal when none is positive)."""
    positive = {c: max(0.0, float(weights.get(c, 0.0))) for c in COMPONENTS}
    total = sum(positive.values())
    if total <= 0:
        return {c: 1.0 / len(COMPONENTS) for c in COMPONENTS}
    return {c: v / total for c, v in positive.items()}


def sparc_score(
    manifest: ToolManifest,
    features: ContextFeatures,
    weights: Mapping[str, float],
    successes: float = 0.0,
    failures: float = 0.0,
) -> SparcScore:
    meta = manifest.sparc
    parts = {
        "phase": phase_component(meta, features),
        "language": language_component(meta, features),
        "complexity": complexity_component(meta, features),
        "task_type": task_component(meta, features),
        "history": history_component(successes, failures),
    }
    w = normalised(weights)
    components = {c: round(v, 4) for c, (v, _) in parts.items()}
    score = sum(w[c] * parts[c][0] for c in COMPONENTS)
    # The rationale names what moved the score: the components away from neutral, strongest first.
    # A history of as many successes as failures is telling too, though it scores neutral (QA AD: 3
    # and 3 nearby were explained as "no SPARC metadata or history"); a component the learned weights
    # give nothing moved nothing (QA AD: "pseudocode phase is 1 from its phases" at phase weight 0).
    # History is told by how much of it there is: a trace (QA AE: 0.01 successes nearby) is not named.
    telling = [c for c in COMPONENTS
               if (successes + failures >= HISTORY_NAMED if c == "history" else abs(parts[c][0] - NEUTRAL) > 1e-9)]
    weighed = sorted((c for c in telling if w[c] > 0), key=lambda c: -w[c] * abs(parts[c][0] - NEUTRAL))
    reasons = [parts[c][1] for c in weighed] or [
        "what it says weighs nothing under the current weights: neutral" if telling else
        "no SPARC metadata or history: neutral" if meta is None else "nothing in its SPARC metadata decides this context: neutral"]
    return SparcScore(score=round(min(1.0, max(0.0, score)), 4), components=components, rationale="; ".join(reasons))

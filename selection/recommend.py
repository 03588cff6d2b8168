"""Improvement recommendations: tool versions that do badly in some context, with the evidence.

A context is one value of one SPARC feature of the calls (task type, phase, language, testing
status, a band of complexity), or "any". For each tool version and context with at least `min_runs` recent attempts,
the success rate is compared with `max_rate`; a version that falls below it there is worth
evolving, narrowing (its SPARC metadata), or documenting. The evidence says how many runs, how
they failed, how the version does elsewhere, and a few scenarios that failed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from selection.learner import JUDGED_WRONG, ExecutionRecord
from selection.manifest import SparcMetadata, ToolManifest

FACETS = ("task_type", "phase", "languages", "testing")
METADATA_FIELDS = {"task_type": "task_types", "phase": "phases", "languages": "languages"}  # testing has none
# Complexity (0..1) in bands, so that a version failing on large inputs is told so, not blamed on the
# language those calls also had (QA ops: timeouts on 30,000 numbers, complexity 0.61, read as
# "fails where languages=rust"). From 0.5 on, inputs are large or nested (size alone gives at most 0.5).
COMPLEXITY_BANDS = ((0.0, 0.2), (0.2, 0.5), (0.5, 1.0))
EXAMPLES = 3


class Recommendation(BaseModel):
    tool: str  # name@version
    context: str  # e.g. "task_type=bug_fix", or "any"
    runs: int
    success_rate: float
    elsewhere_rate: float | None  # the same version outside this context (None: never ran elsewhere)
    error_classes: dict[str, int]
    failed_scenarios: list[str]
    advice: str
    # The context was read from the calls' scenarios and inputs, not given by any caller (QA ops:
    # "task_type=modification", detected from "convert", sent the operator looking for callers).
    detected: bool = False
    # Other contexts of the same version whose runs are exactly these (QA ops: the same 5 refusals
    # were listed as "languages=python" and again as "task_type=modification").
    same_runs: list[str] = []


def _given(record: ExecutionRecord, context: str) -> bool:
    """Whether the call gave this facet of its context itself (`context`: "facet=value")."""
    facet = context.partition("=")[0]
    return (record.features.get("source") or {}).get(facet) == "explicit"


def _contexts(record: ExecutionRecord) -> list[str]:
    out = ["any"]
    for facet in FACETS:
        value = record.features.get(facet)
        values = value if isinstance(value, list) else [value]
        out += [f"{facet}={v}" for v in values if v not in (None, "", "general", "none")]
    complexity = record.features.get("complexity")
    if complexity is not None and (record.features.get("source") or {}).get("complexity") != "default":
        lo, hi = next(b for b in COMPLEXITY_BANDS if float(complexity) < b[1] or b[1] == 1.0)
        out.append(f"complexity={lo:.1f}-{hi:.1f}")
    return out


def _narrowing(context: str, sparc: SparcMetadata | None, known: bool) -> str | None:
    """How the version's SPARC metadata could rank it lower in `context`, or None where it cannot:
    no field says that facet (testing status), or the field leaves the value out already, so the
    SPARC score ranks it lower there now (QA AC: the advice said to narrow metadata the manifest
    did not have, or that already left the context out). `known`: whether `sparc` is the
    manifest's (a version no longer served, or a report without the manifests, gets the general
    advice)."""
    facet, _, value = context.partition("=")
    if facet == "complexity":
        return _narrowing_complexity(value, sparc, known)
    field = METADATA_FIELDS.get(facet)
    if field is None:
        return None
    if not known:
        return f"narrow its SPARC {field}"
    listed: list[str] = list(getattr(sparc, field)) if sparc is not None else []
    if not listed:
        return f"give it SPARC {field} that leave {value} out (it lists none, which scores neutral everywhere)"
    if listed == [value]:  # taken out, the field would list nothing, which scores neutral everywhere (QA AF)
        return f"list in its SPARC {field} where it succeeds, not only {value}"
    if value in listed:
        return f"take {value} out of its SPARC {field} ({', '.join(listed)})"
    return None


def _narrowing_complexity(band: str, sparc: SparcMetadata | None, known: bool) -> str | None:
    """`_narrowing` for a complexity band ("0.5-1.0"): an end band is left out by moving the range's
    end past it; a middle band cannot be, without the bands on both sides."""
    lo, hi = (float(x) for x in band.split("-"))
    if not known:
        return "narrow its SPARC complexity range" if lo == 0.0 or hi == 1.0 else None
    low, high = (sparc.complexity_min, sparc.complexity_max) if sparc is not None else (0.0, 1.0)
    if hi == 1.0 and high > lo:
        return f"lower its SPARC complexity_max to {lo:.1f} (it is {high:.1f})"
    if lo == 0.0 and low < hi:
        return f"raise its SPARC complexity_min to {hi:.1f} (it is {low:.1f})"
    return None


def recommendations(records: Iterable[ExecutionRecord], min_runs: int = 5, max_rate: float = 0.5,
                    sparc: Mapping[str, SparcMetadata | None] | None = None) -> list[Recommendation]:
    """Versions whose success rate in some context is below `max_rate`, worst first. `sparc`: each
    version's SPARC metadata by key, which the advice to narrow it reads (None: not known)."""
    runs: dict[tuple[str, str], list[ExecutionRecord]] = defaultdict(list)
    totals: Counter[str] = Counter()
    successes: Counter[str] = Counter()
    for r in records:
        totals[r.key] += 1
        successes[r.key] += int(r.success)
        for context in _contexts(r):
            runs[(r.key, context)].append(r)
    out = []
    listed: dict[tuple[str, frozenset[str]], Recommendation] = {}  # a version's runs, and the row that has them
    for (key, context), rs in runs.items():
        n = len(rs)
        ok = sum(r.success for r in rs)
        rate = ok / n
        if n < min_runs or rate >= max_rate:
            continue
        if context != "any" and n == totals[key]:
            continue  # the same runs as "any": nothing context-specific to say
        if (row := listed.get((key, ids := frozenset(r.attempt_id for r in rs)))) is not None:
            row.same_runs.append(context)
            continue
        other_n = totals[key] - n
        elsewhere = round((successes[key] - ok) / other_n, 4) if other_n else None
        errors = Counter(r.error_class or "unknown" for r in rs if not r.success)
        failed = list(dict.fromkeys(r.scenario[:200] for r in rs if not r.success))[:EXAMPLES]
        top = max(errors.values(), default=0)
        top_error = " and ".join(sorted(c for c, k in errors.items() if k == top)) or "failure"  # a tie names both (QA AD)
        if errors.get("bad_input", 0) * 2 >= sum(errors.values()) > 0:  # half or more: not "evolve or retire" (QA AD)
            # Refused input is no fault of the tool's code (QA I: convert_units, 10 of 10 of its own
            # jobs done, was told "evolve it or retire it" for the VAT and CSV jobs it was tried on
            # as a fallback): what to look at is which calls bring it in.
            where = "" if context == "any" else f" where {context}"
            share = "mostly" if errors.get("bad_input", 0) * 2 > sum(errors.values()) else "as often as not"
            advice = (f"{share} refused its input{where} (bad_input): check the scenarios it failed on; jobs of other "
                      "tools that its description or examples match (tried as a fallback), or callers' mistakes, "
                      "are not fixed by evolving or retiring it")
        elif errors.get(JUDGED_WRONG, 0) * 2 >= sum(errors.values()):
            # QA 56a M2: title_case, right on its own job, was judged wrong on one a team wanted in
            # capitals, and told "fails in general: evolve it or retire it"; the evolution that
            # followed learned that job as its own.
            where = "" if context == "any" else f" where {context}"
            advice = (f"people judge its outputs wrong{where} (mostly {top_error}): on jobs another tool should do, "
                      "judge that tool's outputs right or have callers name it; on its own jobs, evolve it")
        elif context == "any":
            advice = f"fails in general (mostly {top_error}): evolve it or retire it"
        elif elsewhere is not None and elsewhere >= max_rate and other_n >= min_runs:
            # As many runs elsewhere as here at least: "but not elsewhere" of 1 run told a tool to
            # raise its complexity_min past 42 of its 43 runs (QA selection F12).
            narrow = _narrowing(context, (sparc or {}).get(key), sparc is not None and key in sparc)
            advice = (f"fails where {context} (mostly {top_error}) but not elsewhere: "
                      + (f"{narrow} so the SPARC score ranks it lower there, or evolve it for this context" if narrow
                         else "evolve it for this context"))
        else:
            advice = f"fails where {context} (mostly {top_error}): evolve it"
        out.append(Recommendation(tool=key, context=context, runs=n, success_rate=round(rate, 4), elsewhere_rate=elsewhere,
                                  error_classes=dict(errors), failed_scenarios=failed, advice=advice,
                                  detected=context != "any" and not any(_given(r, context) for r in rs)))
        listed[(key, ids)] = out[-1]
    return sorted(out, key=lambda r: (r.success_rate, -r.runs, r.tool, r.context))


class RecommendationReport(BaseModel):
    """What `fittest recommend` shows, as the `fittest.recommend` task answers it."""

    records: int  # the recent attempts read (the learner's window), those set aside left out
    judged_wrong: int | None  # of them, outputs a person judged wrong (None: judgements not applied)
    # Left out: the records set aside as a caller's mistake, refusals and successes on them, and a
    # fallback's refusals of other tools' jobs (QA ops: `weights` counted 836 records of the window
    # and `recommend` 725, with nothing to say why).
    set_aside: int = 0
    # Versions of the window no longer served (a manifest removed, or its version changed in place;
    # deprecated): left out, as there is nothing to evolve or retire (QA integration L5).
    not_served: list[str] = []
    recommendations: list[Recommendation]


def recommendation_report(records: list[ExecutionRecord], min_runs: int, max_rate: float, *,
                          judgements_applied: bool, manifests: Iterable[ToolManifest] = (),
                          registered_only: bool = False) -> RecommendationReport:
    """`recommendations` over `records`, with how many of them people judged wrong when their
    judgements were applied to them (workers/feedback_store.py `as_people_judged`); `manifests`:
    the versions registered, whose SPARC metadata the advice to narrow it reads, and with
    `registered_only` (they are all the registry has: evolved versions too) the only versions
    advised on, less the deprecated ones. The records set aside as a caller's mistake (a refused
    input of a job its tool does: selection/job_record.py `does_the_job`) are no evidence of what a
    version does (QA AF); nor are a fallback's refusals of another tool's job, which `fittest tools`
    counts among its refused inputs, not its failures (QA 56a M2: title_case, refusing a capital
    city job it was tried on, was listed as failing it with bad_input)."""
    manifests = list(manifests)
    kept = [r for r in records if not r.forgiven and not r.not_its_job]
    judged = sum(r.error_class == JUDGED_WRONG for r in kept) if judgements_applied else None
    found = recommendations(kept, min_runs, max_rate, {m.key: m.sparc for m in manifests})
    served = {m.key for m in manifests if not m.deprecated}
    gone = sorted({r.tool for r in found if r.tool not in served}) if registered_only else []
    return RecommendationReport(records=len(kept), judged_wrong=judged, set_aside=len(records) - len(kept), not_served=gone,
                                recommendations=[r for r in found if r.tool not in gone])

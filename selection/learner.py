"""The weight learner: how strongly each SPARC component predicts that an attempt succeeds.

An online learner in River's style (`learn_one`, `predict_one`): it keeps, per component, the
running means, variances and covariance with the outcome (Welford's updates, numerically stable,
one pass, constant memory), so it can learn from a stream of execution records of any length.
A component's weight is its correlation with success, normalised to sum 1, counted only above
the noise of n records (2/sqrt(n), twice the standard error of the correlation of unrelated
variables, which about 95 % of chance correlations stay under). One that tracks success steers
selection in proportion; one that varies against success beyond the noise is weighted 0; one the
window tells nothing of (it did not vary, as when no call states a context, or too little to tell
from chance) keeps a small weight (FLOOR_WEIGHT), and the telling ones share the rest. With fewer
than MIN_RECORDS records, or when no component correlates positively beyond that noise, the
weights are left as they were (QA U: 34 records put every weight on complexity for a correlation of +0.04, where the
noise of 34 records is 0.34).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field, FiniteFloat

from selection.manifest import VersionKeyed
from selection.ports import RetrainEvidence, SelectionWeights
from selection.sparc import COMPONENTS, normalised

MIN_RECORDS = 10
FLOOR_WEIGHT = 0.05  # the weight of a component the window tells nothing of (`WeightLearner.untold`)
JUDGED_WRONG = "judged_wrong"  # the error class of a run whose output a person judged wrong


class ExecutionRecord(VersionKeyed, BaseModel):
    """One attempt as the learner keeps it: the context features, the chosen tool version and the
    SPARC components it was chosen with, the outcome and when. Stored with its scenario's vector
    (EXECUTIONS) and in the recent window the weights are learned from."""

    attempt_id: str
    call_id: str
    tool: str
    version: str
    scenario: str
    features: dict[str, Any] = Field(default_factory=dict)
    # Finite (QA 60b F4): one infinite value took its component out of the whole window's weights,
    # and a stored record that holds one is skipped as unreadable when the window is read.
    components: dict[str, FiniteFloat] = Field(default_factory=dict)
    success: bool
    error_class: str | None = None
    probability: float = 1.0
    policy: str = ""
    execution_time_ms: float = 0.0
    timestamp: float = Field(default_factory=time.time)
    # Set aside as the caller's mistake (selection/models.py `OutcomeRecord.set_aside`): a refusal of
    # an input by a tool that does the job, or a success on it by a version that has done no such
    # job; or, as the window is read, a failure of an outage its version recovered from
    # (workers/outage.py). No evidence of what the tool does: the weights and `fittest recommend`
    # leave it out.
    forgiven: bool = False
    # A success that says nothing of whether the version does such jobs (ToolExecutionResult.unconfirmed).
    unconfirmed: bool = False
    # A success on a call that named the tool's namespace: the caller chose it, however weakly it
    # matches, so a call's own similarity floor is not passed by it (QA live F4).
    named: bool = False
    # A fallback's refusal of another tool's job (OutcomeRecord.not_its_job): a refused input in its
    # version's stats, and no failure of it in `fittest recommend`.
    not_its_job: bool = False


class _Moments(BaseModel):
    n: int = 0
    mean_x: float = 0.0
    mean_y: float = 0.0
    m2_x: float = 0.0
    m2_y: float = 0.0
    c_xy: float = 0.0

    def update(self, x: float, y: float) -> None:
        self.n += 1
        dx = x - self.mean_x
        self.mean_x += dx / self.n
        dy = y - self.mean_y
        self.mean_y += dy / self.n
        self.m2_x += dx * (x - self.mean_x)
        self.m2_y += dy * (y - self.mean_y)
        self.c_xy += dx * (y - self.mean_y)

    def correlation(self) -> float:
        if self.m2_x <= 1e-12 or self.m2_y <= 1e-12:
            return 0.0
        return self.c_xy / math.sqrt(self.m2_x * self.m2_y)


class WeightLearner:
    """learn_one(components, success) / predict_one(components) -> the SPARC score under the
    learned weights, i.e. how promising the learner finds a candidate with these components."""

    def __init__(self, initial: Mapping[str, float] | None = None) -> None:
        self._moments = {c: _Moments() for c in COMPONENTS}
        self._initial = normalised(initial or {})
        self.n = 0
        self.successes = 0

    def learn_one(self, x: Mapping[str, float], y: bool) -> None:
        _known(x)
        self.n += 1
        self.successes += int(y)
        for c, m in self._moments.items():
            m.update(float(x.get(c, 0.5)), 1.0 if y else 0.0)

    def correlations(self) -> dict[str, float]:
        return {c: round(m.correlation(), 4) for c, m in self._moments.items()}

    def noise(self) -> float:
        """The correlation that n records may show by chance alone (twice its standard error)."""
        return 2 / math.sqrt(self.n) if self.n else 1.0

    def telling(self) -> dict[str, float]:
        """Each component's correlation with success where it is positive beyond `noise`, else 0."""
        return {c: r if r > self.noise() else 0.0 for c, r in self.correlations().items()}

    def weights(self) -> dict[str, float]:
        """The telling correlations normalised; the initial weights until there is enough evidence."""
        telling = self.telling()
        if self.n < MIN_RECORDS or sum(telling.values()) <= 0:
            return dict(self._initial)
        untold = self.untold()
        learned = normalised({c: v for c, v in telling.items() if c not in untold})
        rest = 1.0 - FLOOR_WEIGHT * len(untold)
        return {c: round(FLOOR_WEIGHT if c in untold else learned[c] * rest, 4) for c in COMPONENTS}

    def untold(self) -> set[str]:
        """The components the records tell nothing of: ones that did not vary, or whose correlation
        with success is within the noise either way. Weighted 0, they stopped counting where they
        do tell (QA 60b F3: with no call stating a context, four of five components were constant,
        and a tool's declared complexity range stopped keeping it from jobs outside it; review 60f:
        one call stating a complexity took it to 0 again): each keeps FLOOR_WEIGHT. Only one that
        correlates with failure beyond the noise is weighted 0."""
        noise = self.noise()
        return {c for c, r in self.correlations().items() if -noise <= r <= noise}

    def predict_one(self, x: Mapping[str, float]) -> float:
        """The weighted SPARC score of components `x` (missing ones neutral) under the weights
        learned so far: what the learner's weights make of one candidate, for checking a learner
        by hand or in a test without a policy (selection ranks through the policies, which read
        `weights()`)."""
        _known(x)
        w = self.weights()
        return sum(w[c] * float(x.get(c, 0.5)) for c in COMPONENTS)


def _known(x: Mapping[str, float]) -> None:
    """A component the learner does not know is a misspelling (`langauge`), which would otherwise
    be learned or scored as that component's absence, neutral, without a word; one not finite
    (NaN, inf) would turn its correlation to NaN for the whole window (QA 60b F4)."""
    if unknown := sorted(set(x) - set(COMPONENTS)):
        raise ValueError(f"unknown SPARC component(s) {', '.join(map(repr, unknown))} (known: {', '.join(COMPONENTS)})")
    if not_finite := sorted(c for c, v in x.items() if not math.isfinite(float(v))):
        raise ValueError(f"SPARC component(s) {', '.join(map(repr, not_finite))} not a finite number: "
                         f"{', '.join(repr(x[c]) for c in not_finite)}")


def _against_advice(learner: WeightLearner) -> list[str]:
    """What to look at when components correlate with failure beyond the noise. A metadata
    component so likely means a tool's SPARC metadata says the opposite of where it works (QA
    selection F7: language at -0.68 went unsaid). History is no metadata: it is a version's own
    success near the scenario, and it predicts failure when versions that did such jobs fail them
    now (QA learning F3: the advice sent operators to manifests that were not at fault)."""
    against = sorted(c for c, r in learner.correlations().items() if r < -learner.noise())
    metadata = [c for c in against if c != "history"]
    advice = []
    if metadata:
        advice.append(f"{', '.join(metadata)} correlate{'s' if len(metadata) == 1 else ''} with failure beyond it: "
                      "check the SPARC metadata of the tools that fail")
    if "history" in against:
        advice.append("history correlates with failure beyond it: versions that did such jobs fail them now "
                      "(`fittest recommend` lists them)")
    return advice


def retrain(records: Iterable[ExecutionRecord], current: SelectionWeights) -> tuple[SelectionWeights | None, RetrainEvidence]:
    """New weights from a window of execution records, or None (and why) when they stay as they are.

    The evidence (record count, success rate, correlation of each component) is returned either
    way, so an operator can see why the weights did or did not move. The records set aside as a
    caller's mistake say nothing of how well a component predicts a tool's fitness: left out, and
    counted apart (QA ops: `weights` read 836 records where `recommend`, which left them out, read
    725, with nothing to say why)."""
    learner = WeightLearner(current.weights)
    set_aside = 0
    for record in records:
        if record.forgiven:
            set_aside += 1
            continue
        learner.learn_one(record.components, record.success)
    evidence = RetrainEvidence(
        records=learner.n,
        set_aside=set_aside,
        success_rate=round(learner.successes / learner.n, 4) if learner.n else None,
        correlations=learner.correlations(),
        noise=round(learner.noise(), 4),
        min_records=MIN_RECORDS,
    )
    if learner.n < MIN_RECORDS:
        evidence.unchanged = f"{learner.n} records, fewer than {MIN_RECORDS}"
        return None, evidence
    if not any(learner.telling().values()):
        evidence.unchanged = (f"no component correlates positively with success beyond the noise of {learner.n} "
                              f"records ({learner.noise():.2f})"
                              + "".join(f"; {advice}" for advice in _against_advice(learner)))
        return None, evidence
    if learner.weights() == current.weights:  # the same window (no new records since): no new version
        evidence.unchanged = "the recent records give the weights in use"
        return None, evidence
    weights = SelectionWeights(weights=learner.weights(), evidence=evidence, updated_at=time.time())
    return weights, evidence

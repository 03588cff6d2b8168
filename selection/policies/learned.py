"""The `learned` policy (the default): rank by what the outcomes of similar past calls taught.

For each candidate the policy weighs three kinds of evidence, all by the same similarity kernel
(selection/feedback.py: a past scenario 0.9 similar counts 0.37, one 0.7 similar 0.05):

- successes of its namespace on similar past scenarios (S), by any version: a new or evolved
  version inherits what its namespace is good at;
- failures of this exact version on similar past scenarios (F): an evolved version does not
  inherit its parent's failures, so where the parent failed it is the one tried first (this, not a
  random bonus, is how a new version gets the traffic it can prove itself on);
- a prior from the description match and the source, as the seed design ranks them (a softmax of
  the seed's base score over the candidates at the kernel's bandwidth), times the version's
  standing, worth PRIOR_STRENGTH (a) observations. A look-alike's description match also counts
  LEXICAL_WEIGHT of its word match (selection/lexical.py), which the embedding alone misses.

    mass = a * prior * standing + S           which tool similar jobs were served by (Dirichlet),
    mass = mass * K / (K + mass)                saturated: past K, more successes say little more
    standing = quality + (1 - quality) * successes / (successes + failures + 1)
    rate = (a + S) / (a + S + F)              how often this version works around here (Beta)
    utility = log(mass * rate * (1 + feedback/100) * (0.5 + sparc)) + c * log p
    p = softmax of the tool classifier's scores over the candidates (selection/classifier.py),
        floored at e^-3

Standing: quality only falls (the design's demotion per failure), so a version that fails at one
kind of job and serves another well would reach 0 and rank below tools with nothing to do with a
job it is good at. Its share of successes anywhere gives back part of what its failures took; where
it fails, F keeps it away all the same.

The classifier (refitted on the beat from every success) knows the shape of each namespace's
region as a whole, where S knows only the neighbours of this one scenario; the two disagree on
the scenarios between two tools, and there the two together are right more often than either
(the selection bench: docs/benches.md). Before the first refit the term is absent.

Saturation: two tools that both do a job (each with many successes nearby) are then ranked by
their rates, not by which served more of it. Unsaturated, the incumbent's successes kept a strictly
better newcomer as its fallback for good (QA 60b F2, against an incumbent failing 15 %: first on
1 of the last 100 of 300 calls; saturated, on 100), and a tool that turned bad kept its place on
the strength of old successes (first on 88 of the next 150 calls; saturated, 55). Masses keep
their order, and the ratio of two is divided by (K + the larger) / (K + the smaller), little
below K, where the selection bench's masses mostly are: K = 5, 20 and none gave the same numbers
to the digit on its 2,000-query slice (K = 1 took 0.3 points off top-1 of the 2nd half).

With no evidence a candidate keeps its prior; one success on a near-identical scenario outweighs
the best description match; failures nearby push a version down until untried candidates come
first. Feedback points and the SPARC score scale the result the way the seed design scales its
score.

Exploration: the order is drawn from a Plackett-Luce distribution over the utilities with a small
temperature, so candidates within a few percent of each other are tried in either order while a
clearly better one is chosen every time; the probability of each placement is logged on the
candidate (and with every attempt). A tool added to a running system, which has no outcomes where
the incumbents have successes, is tried first on a share of the calls it matches until it has run
a few times (selection/serving.py `newcomer_to_try`), outside this policy: the tools the system
started with are explored by their descriptions alone. The three hyper-parameters (kernel bandwidth, a, temperature)
are round values chosen on one half of the development queries of the selection bench and checked
on the other half; none is fitted to any label. The classifier's weight c and its floor are round
values chosen on the bench's stream in the order of seed 0 and checked in the order of seed 1. The
word match's weight is a round value from a sweep of zero-shot top-1 over the development queries
(0.05 / 0.1 / 0.15: +2.5 / +3.5 / +3.1 points), checked in the stream at seeds 0 and 1.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from typing import NamedTuple, Protocol

from selection.evidence import SEMANTIC_FACTOR, CandidateEvidence
from selection.feedback import BANDWIDTH, similarity_weight
from selection.models import Candidate, ScoreBreakdown

PRIOR_STRENGTH = 0.1  # a: the prior is worth this many identical-scenario observations
TEMPERATURE = 0.02  # of the log-utility: a 2% better candidate is ~2.7x as likely to go first
FLOOR = 1e-12
CUTOFF = 30.0  # e^-30: a placement this unlikely is not drawn
CLASSIFIER_WEIGHT = 0.3  # c: the weight of the classifier's log-probability in the utility
CLASSIFIER_LOG_FLOOR = -3.0  # log p below this counts as this: its doubt costs at most e^(-3c) (0.41)
LEXICAL_WEIGHT = 0.1  # a look-alike's best word match counts as 0.1 more cosine in its prior
SATURATION = 5.0  # K: mass past which more successes nearby say little more (mass K/(K + mass))


class Counted(Protocol):
    """A version's quality and counters: its evidence in a call, or its stats (`fittest tools`)."""

    @property
    def quality(self) -> float: ...
    @property
    def successes(self) -> int: ...
    @property
    def failures(self) -> int: ...


def standing(e: Counted) -> float:
    """The version's quality, with what its successes anywhere give back of what failures took.
    `fittest tools` shows it beside the quality: a tool that succeeds 2 times in 3 has quality 0.00
    after its 13 failures and a standing of 0.66, which is what ranks it (QA onboarding L1)."""
    return e.quality + (1.0 - e.quality) * e.successes / (e.successes + e.failures + 1)


class _Terms(NamedTuple):
    utility: float  # log(mass * rate * feedback and SPARC factor)
    prior: float
    successes: float  # kernel-weighted successes of the namespace nearby (S)
    failures: float  # kernel-weighted failures of this version nearby (F)
    mass: float
    rate: float
    classifier: float | None  # p of the tool classifier over the candidates


class LearnedPolicy:
    name = "learned"

    def __init__(self, bandwidth: float = BANDWIDTH, prior_strength: float = PRIOR_STRENGTH,
                 temperature: float = TEMPERATURE, classifier_weight: float = CLASSIFIER_WEIGHT,
                 lexical_weight: float = LEXICAL_WEIGHT, saturation: float = SATURATION) -> None:
        positive = {"bandwidth": bandwidth, "prior_strength": prior_strength, "saturation": saturation}
        non_negative = {"temperature": temperature, "classifier_weight": classifier_weight, "lexical_weight": lexical_weight}
        wrong = ([f"{name} must be > 0, got {v!r}" for name, v in positive.items() if not v > 0]
                 + [f"{name} must be >= 0, got {v!r}" for name, v in non_negative.items() if not v >= 0])
        if wrong:
            raise ValueError("; ".join(wrong))
        self.bandwidth = bandwidth
        self.prior_strength = prior_strength
        self.temperature = temperature
        self.classifier_weight = classifier_weight
        self.lexical_weight = lexical_weight
        self.saturation = saturation

    def _kernel_sum(self, similarities: list[float]) -> float:
        return sum(similarity_weight(s, self.bandwidth) for s in similarities)

    def _terms(self, evidence: list[CandidateEvidence]) -> list[_Terms]:
        """The numbers each candidate's utility is made of (cheap: no models, no strings)."""
        logits = [self._match(e) / self.bandwidth for e in evidence]
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        total = sum(exps)
        a = self.prior_strength
        log_p = self._classifier_log_p(evidence)
        out = []
        for e, x, lp in zip(evidence, exps, log_p, strict=True):
            prior = x / total
            s = self._kernel_sum(e.namespace_success_similarities)
            f = self._kernel_sum(e.failure_similarities)
            mass = a * prior * standing(e) + s
            mass = mass * self.saturation / (self.saturation + mass)
            rate = (a + s) / (a + s + f)
            factor = (1.0 + e.feedback_points / 100.0) * (0.5 + e.sparc)
            utility = math.log(max(mass * rate * factor, FLOOR)) + self.classifier_weight * (lp or 0.0)
            out.append(_Terms(utility, prior, s, f, mass, rate, None if lp is None else math.exp(lp)))
        return out

    def _match(self, e: CandidateEvidence) -> float:
        """The seed's base score, with a look-alike's word match counted as more similarity."""
        words = SEMANTIC_FACTOR * self.lexical_weight * e.lexical if e.source == "semantic" else 0.0
        return e.base_score() + words

    @staticmethod
    def _classifier_log_p(evidence: list[CandidateEvidence]) -> list[float | None]:
        """log softmax of the classifier's scores over the candidates (None where it gave none), floored:
        the classifier may vouch for a candidate as strongly as it likes, but its doubt is bounded,
        so among the candidates it doubts the neighbours' evidence still decides (unbounded, at
        c = 0.5, it took 1.4 points of resolved_within_5 off the selection bench; floored, at
        c = 0.3, resolved stayed where it was: +0.4 points at seed 0, -0.1 at seed 1)."""
        scores = [e.classifier_score for e in evidence if e.classifier_score is not None]
        if not scores:
            return [None] * len(evidence)
        top = max(scores)
        log_total = top + math.log(sum(math.exp(v - top) for v in scores))
        return [None if e.classifier_score is None else max(e.classifier_score - log_total, CLASSIFIER_LOG_FLOOR)
                for e in evidence]

    @staticmethod
    def _breakdown(e: CandidateEvidence, t: _Terms) -> ScoreBreakdown:
        return ScoreBreakdown(
            base=e.base_score(),
            source=e.source,
            similarity=e.similarity,
            quality=e.quality,
            failure_penalty=round(t.rate, 4),
            similar_failures=len(e.failure_similarities),
            feedback=e.feedback_points,
            sparc=e.sparc,
            sparc_components=e.sparc_components,
            extra={"prior": round(t.prior, 4), "lexical": e.lexical, "successes_nearby": round(t.successes, 4),
                   "failures_nearby": round(t.failures, 4), "mass": round(t.mass, 4), "success_rate": round(t.rate, 4),
                   **({} if t.classifier is None else {"classifier_p": round(t.classifier, 4)})},
            rationale=(
                f"{t.successes:.2f} successes of {e.manifest.name} and {t.failures:.2f} failures of this version nearby "
                f"(rate {t.rate:.2f}), prior {t.prior:.2f} ({e.source} {e.base_score():.2f}"
                + (f", word match {e.lexical:.2f}" if e.lexical else "")
                + f") x quality {e.quality:.2f}"
                + (f" ({standing(e):.2f} with its {e.successes} successes)" if e.successes and e.quality < 1 else "")
                + ("" if t.classifier is None else f"; classifier p {_classifier_p(t.classifier)}")
                + (f"; feedback {e.feedback_points:+.0f}" if abs(e.feedback_points) >= 0.5 else "")
                + f"; SPARC {e.sparc:.2f}: {e.sparc_rationale or 'neutral'}"
            ),
        )

    def rank(
        self, evidence: list[CandidateEvidence], rng: random.Random, limit: int | None = None,
        last: Collection[str] = (),
    ) -> list[Candidate]:
        if not evidence:
            return []
        terms = self._terms(evidence)
        # Plackett-Luce: draw the first place from softmax(utility / T), then the next from the rest,
        # for as many places as the plan keeps; only the placed candidates get a breakdown. The
        # `last` keys are drawn the same way once every other candidate is placed.
        remaining = sorted(range(len(evidence)), key=lambda i: (-terms[i].utility, evidence[i].key))
        places = len(remaining) if limit is None else min(limit, len(remaining))
        ranked: list[Candidate] = []
        for group in ([i for i in remaining if evidence[i].key not in last], [i for i in remaining if evidence[i].key in last]):
            while group and len(ranked) < places:
                pick, chances = self._draw([terms[i].utility for i in group], rng)
                name = evidence[group[pick]].manifest.name
                of_its_tool = sum(p for j, p in enumerate(chances) if evidence[group[j]].manifest.name == name)
                i = group.pop(pick)
                e, t = evidence[i], terms[i]
                ranked.append(Candidate(key=e.key, manifest=e.manifest, score=round(math.exp(t.utility), 6),
                                        probability=round(chances[pick], 6), namespace_probability=round(of_its_tool, 6),
                                        breakdown=self._breakdown(e, t)))
        return ranked

    def _draw(self, utilities: list[float], rng: random.Random) -> tuple[int, list[float]]:
        """Index drawn, and the probability each candidate had of the place (those after the
        cutoff had none); `utilities` are best first (ties by key), so the scan stops at the first
        candidate whose weight is negligible (e^-CUTOFF of the best)."""
        if self.temperature == 0 or len(utilities) == 1:
            return 0, [1.0]
        top = utilities[0]
        weights: list[float] = []
        for u in utilities:
            z = (u - top) / self.temperature
            if z < -CUTOFF:
                break
            weights.append(math.exp(z))
        total = sum(weights)
        chances = [w / total for w in weights]
        r = rng.random() * total
        for i, w in enumerate(weights):
            r -= w
            if r <= 0:
                return i, chances
        return len(weights) - 1, chances


def _classifier_p(p: float) -> str:
    """The classifier's probability as the rationale says it: one at the floor it is counted at is
    at most that (QA 48: six tools at 0.05 beside 0.90 and 0.09 summed to 1.29)."""
    floor = math.exp(CLASSIFIER_LOG_FLOOR)
    return f"at most {floor:.2f} (its floor)" if p <= floor * (1 + 1e-9) else f"{p:.2f}"

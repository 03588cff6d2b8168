"""The `seed` policy: the formulas of the design documents, faithfully, and deterministic.

score = base (promoted 1.0, original 0.9, semantic 0.8 x similarity) x quality
        x 0.7 per past failure of that version whose scenario is > 0.7 similar
          (FITTEST_FAILURE_SIMILARITY, 0.7 by default)
        x (1 + feedback points / 100)   (points within ±50: at most ±50%)
        x (0.5 + SPARC score)           (neutral 0.5: x1; from x0.5 to x1.5)
"""

from __future__ import annotations

import random
from collections.abc import Collection

from selection.evidence import FAILURE_DEMOTION, CandidateEvidence
from selection.models import Candidate, ScoreBreakdown


class SeedPolicy:
    name = "seed"

    def __init__(self, failure_similarity: float = 0.7) -> None:
        self.failure_similarity = failure_similarity

    def score(self, e: CandidateEvidence) -> tuple[float, ScoreBreakdown]:
        n_fail = e.similar_failures(self.failure_similarity)
        penalty = FAILURE_DEMOTION**n_fail
        base = e.base_score()
        score = base * e.quality * penalty * (1.0 + e.feedback_points / 100.0) * (0.5 + e.sparc)
        return score, ScoreBreakdown(
            base=base,
            source=e.source,
            similarity=e.similarity,
            quality=e.quality,
            failure_penalty=penalty,
            similar_failures=n_fail,
            feedback=e.feedback_points,
            sparc=e.sparc,
            sparc_components=e.sparc_components,
            rationale=(
                f"{e.source} base {base:.2f} x quality {e.quality:.2f}"
                + (f" x {FAILURE_DEMOTION:g}^{n_fail} similar failures" if n_fail else "")
                + (f" x feedback {e.feedback_points:+.0f}%" if abs(e.feedback_points) >= 0.5 else "")
                + f" x SPARC {0.5 + e.sparc:.2f} ({e.sparc_rationale or 'neutral'})"
            ),
        )

    def rank(
        self, evidence: list[CandidateEvidence], rng: random.Random, limit: int | None = None,
        last: Collection[str] = (),
    ) -> list[Candidate]:
        scored = [(self.score(e), e) for e in evidence]
        # Ties break by key so that the seed policy is reproducible.
        scored.sort(key=lambda item: (item[1].key in last, -item[0][0], item[1].key))
        return [
            Candidate(key=e.key, manifest=e.manifest, score=s, probability=1.0, breakdown=b)
            for (s, b), e in scored[:limit]
        ]

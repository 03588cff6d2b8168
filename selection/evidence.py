"""What is known about one candidate when a call is ranked.

Workers gather it from the stores; policies turn it into an order. Keeping the two apart lets a
policy be tested, benchmarked and replayed without any service.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from selection.feedback import JudgedOutput
from selection.manifest import ToolManifest
from selection.models import Source

# Base scores of the seed design: the served version first, then the original, then look-alikes.
BASE_SCORE: dict[str, float] = {"promoted": 1.0, "version": 1.0, "original": 0.9}
SEMANTIC_FACTOR = 0.8
FAILURE_DEMOTION = 0.7


class CandidateEvidence(BaseModel):
    manifest: ToolManifest
    source: Source = "semantic"
    similarity: float = 0.0  # cosine of the scenario to the tool's served description
    lexical: float = 0.0  # BM25 match of the scenario's words to its texts, over the best-matching text's (0..1)
    quality: float = 1.0
    successes: int = 0  # of this version, anywhere (the state store's counters)
    failures: int = 0
    refused_in_a_row: int = 0  # inputs it refused as callers' mistakes since its last success
    failure_similarities: list[float] = Field(default_factory=list)  # past failures of this version
    # Of them, those that say it was down or broke on its input (unavailable, timeout, crash: OUTAGE_CLASSES),
    # not that it does the job wrong (selection/serving.py `best_match_again`).
    outage_similarities: list[float] = Field(default_factory=list)
    success_similarities: list[float] = Field(default_factory=list)  # past successes of this version
    # Of them, those that say it does such jobs (not `ToolExecutionResult.unconfirmed`), and the
    # outputs of it a person judged right: what `does_the_job` counts.
    doing_similarities: list[float] = Field(default_factory=list)
    # Past successes of the namespace, any version (this one included): what a new version inherits.
    namespace_success_similarities: list[float] = Field(default_factory=list)
    feedback_points: float = 0.0  # -50..50
    # Outputs of this version that people judged, wrong (they count among its failures nearby too)
    # or right (selection/feedback.py `judged_outputs`).
    judged_outputs: list[JudgedOutput] = Field(default_factory=list)
    sparc: float = 0.5
    sparc_components: dict[str, float] = Field(default_factory=dict)
    sparc_rationale: str = ""
    timeout_s: float | None = None  # the adaptive timeout of its attempt (selection/timeouts.py)
    # The tool classifier's score of its namespace for the scenario (selection/classifier.py); None
    # when no classifier has been fitted (or it is off).
    classifier_score: float | None = None

    @property
    def key(self) -> str:
        return self.manifest.key

    def base_score(self) -> float:
        if self.source == "semantic":
            return SEMANTIC_FACTOR * self.similarity
        return BASE_SCORE[self.source]

    def similar_failures(self, threshold: float) -> int:
        return sum(1 for s in self.failure_similarities if s > threshold)

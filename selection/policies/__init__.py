"""Selection policies: turn the evidence about candidates into an ordered plan.

A policy is a ranker without state of its own: what outcomes teach reaches it as evidence (the
successes and failures nearby, feedback, the weights that selection/learner.py learns one record
at a time, the classifier that selection/classifier.py fits), so one object serves every call
and is tested with evidence made by hand.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from typing import Protocol

from selection.evidence import CandidateEvidence
from selection.models import Candidate
from selection.policies.learned import LearnedPolicy
from selection.policies.seed import SeedPolicy


class Policy(Protocol):
    name: str

    def rank(
        self, evidence: list[CandidateEvidence], rng: random.Random, limit: int | None = None,
        last: Collection[str] = (),
    ) -> list[Candidate]:
        """Order the candidates, best first; each carries the probability it was placed with.
        `limit`: fill only the first places (a plan keeps no more); None: every candidate.
        `last`: keys placed after every other candidate (each group in the policy's order), as
        `declared_against` (selection/sparc.py) asks."""
        ...


_POLICIES: dict[str, Callable[[float], Policy]] = {
    "seed": SeedPolicy,
    # Counts every failure the store found at least FITTEST_FAILURE_SIMILARITY similar, as evidence.
    "learned": lambda failure_similarity: LearnedPolicy(),
}


def get_policy(name: str, failure_similarity: float = 0.7) -> Policy:
    """`failure_similarity`: how similar a past failure's scenario must be to count against a
    version (FITTEST_FAILURE_SIMILARITY; QA 58c: the seed policy kept its own 0.7 below it)."""
    try:
        factory = _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown selection policy '{name}' (known: {', '.join(sorted(_POLICIES))})") from None
    return factory(failure_similarity)


def policy_names() -> list[str]:
    return sorted(_POLICIES)

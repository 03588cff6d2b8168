"""Selection policies: turn the evidence about candidates into an ordered plan.

A policy is an online learner in River's sense: `rank` is its predict, and it learns only through
the stores that the outcome-recording code updates, so the same object serves every call.
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


_POLICIES: dict[str, Callable[[], Policy]] = {"seed": SeedPolicy, "learned": LearnedPolicy}


def get_policy(name: str) -> Policy:
    try:
        factory = _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown selection policy '{name}' (known: {', '.join(sorted(_POLICIES))})") from None
    return factory()


def policy_names() -> list[str]:
    return sorted(_POLICIES)

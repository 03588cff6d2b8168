"""Description variants: several descriptions of one tool version, tried against each other.

A variant has a status (active, testing, deprecated), an environment (`any`, or the value of a
call's `context.environment` it is meant for), an access count (calls it was served in) and an
effectiveness: the first-attempt success rate of the calls in which it made the match (one half
before any). Not smoothed: a smoothed rate ((s + 1) / (n + 2)) rewards the larger sample, so a
variant that succeeded as often as the incumbent, on more calls, replaced it (QA evolution F8:
4/4 promoted over 1/1).

Selection serves the best active variant (the manifest's description, variant "0", when a tool has
no variants) and, with probability p, a testing one instead, chosen by a hash of the call so the
outcome can be credited to the variant that was really served. Once a testing variant has
`min_trials` first-attempt matches it is promoted (active) if its calls succeeded more often than
the best active one's, and retired (deprecated) otherwise, a tie included: a new description has
to do better to replace the words callers already find; the served description is always the
best active one.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, Field

from evolution.served_version import in_share

MANIFEST_VARIANT = "0"
ANY_ENVIRONMENT = "any"
VariantStatus = Literal["active", "testing", "deprecated"]


class DescriptionVariant(BaseModel):
    id: str
    text: str
    status: VariantStatus = "testing"
    environment: str = ANY_ENVIRONMENT
    source: Literal["manifest", "operator"] = "operator"
    created_at: float = Field(default_factory=time.time)
    trials: int = 0
    successes: int = 0
    accesses: int = 0

    @property
    def effectiveness(self) -> float:
        return self.successes / self.trials if self.trials else 0.5


def usable(variants: list[DescriptionVariant], environment: str | None) -> list[DescriptionVariant]:
    env = environment or ANY_ENVIRONMENT
    return [v for v in variants if v.status != "deprecated" and v.environment in (ANY_ENVIRONMENT, env)]


def best_active(variants: list[DescriptionVariant]) -> DescriptionVariant | None:
    active = [v for v in variants if v.status == "active"]
    # Ties go to the older variant: a new one has to beat the incumbent, not match it.
    return max(active, key=lambda v: (v.effectiveness, -v.created_at), default=None)


def served(variants: list[DescriptionVariant], call_id: str, key: str, environment: str | None, probability: float) -> str:
    """The id of the variant this call is served for tool version `key`."""
    pool = usable(variants, environment)
    testing = [v for v in pool if v.status == "testing"]
    if testing and in_share(call_id, f"variant:{key}", probability):
        return min(testing, key=lambda v: (v.trials, v.created_at)).id
    best = best_active(pool)
    return best.id if best is not None else MANIFEST_VARIANT


def judge(variants: list[DescriptionVariant], min_trials: int) -> dict[str, VariantStatus]:
    """New statuses for testing variants that have been tried enough: promoted or retired. Each is
    measured against the best active variant served where it is (its environment, or any)."""
    changes: dict[str, VariantStatus] = {}
    for v in variants:
        if v.status == "testing" and v.trials >= min_trials:
            changes[v.id] = "active" if v.effectiveness > rate_to_beat(variants, v) else "deprecated"
    return changes


def rate_to_beat(variants: list[DescriptionVariant], challenger: DescriptionVariant) -> float:
    """The success rate a testing variant must exceed: that of the best active variant served
    where it is (one half when none is)."""
    incumbent = best_active(usable(variants, challenger.environment))
    return incumbent.effectiveness if incumbent is not None else 0.5

"""The quality rule: how much one failure costs a tool version.

Quality is kept in integer basis points (0..10000) so that N workers demoting one tool in any
order end at exactly the same value as applying the failures one by one.
"""

from __future__ import annotations

import math

from selection.models import Severity

FULL_QUALITY_BP = 10_000
SEVERITY_PENALTY_BP: dict[Severity, int] = {
    Severity.low: 100,  # 0.01
    Severity.medium: 500,  # 0.05
    Severity.high: 1000,  # 0.10
}
PAST_5_EXTRA_BP = 500  # a further 0.05 from the 6th failure on
PAST_10_EXTRA_BP = 1000  # a further 0.10 (instead) from the 11th failure on


def failure_penalty_bp(severity: Severity, failures_including_this: int) -> int:
    """Basis points to take off for a failure, given the version's failure count after it."""
    extra = 0
    if failures_including_this > 10:
        extra = PAST_10_EXTRA_BP
    elif failures_including_this > 5:
        extra = PAST_5_EXTRA_BP
    return SEVERITY_PENALTY_BP[severity] + extra


def apply_failure_bp(quality_bp: int, failures_before: int, severity: Severity) -> tuple[int, int]:
    """Return (new quality, new failure count) after one failure; quality never goes below 0."""
    failures = failures_before + 1
    return max(0, quality_bp - failure_penalty_bp(severity, failures)), failures


def bp_to_quality(bp: int) -> float:
    return bp / FULL_QUALITY_BP


def quality_to_bp(quality: float) -> int:
    if not math.isfinite(quality) or not 0.0 <= quality <= 1.0:
        raise ValueError(f"quality must be within 0..1, got {quality!r}")
    return round(quality * FULL_QUALITY_BP)

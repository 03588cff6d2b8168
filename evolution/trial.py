"""Trial rules: whether an evolved version that serves a share of its namespace's calls has proven
itself.

A promoted version starts `on_trial`: it serves `share` of the namespace's calls (which calls is
evolution/served_version.py's) and the parent serves the rest. The outcomes of both during the
trial decide:

- activate once the version has K successes and a success rate no worse than the parent's;
- roll back once it has K runs and a success rate more than TOLERANCE below the parent's, or 4K
  runs with its rate still below the parent's: the parent is served again.

The parent's rate is its rate during the trial when it has run at least `min_parent_runs` times
there, else its rate over its whole history (which includes the failures that started the
evolution).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

TOLERANCE = 0.1
Verdict = Literal["activate", "rollback", "continue"]


class TrialCounts(BaseModel):
    evolved_successes: int = 0
    evolved_failures: int = 0
    parent_successes: int = 0
    parent_failures: int = 0


class JudgedTrial(BaseModel):
    """The trial a judgement of a call's output counted in, as it stands after it."""

    namespace: str
    evolved_version: str  # the version on trial
    role: Literal["evolved", "parent"]  # what the judged version is in it
    status: str  # the promotion's status after the judgement: on_trial, active or rolled_back
    counts: TrialCounts
    # The trial had been decided when the judgement came (its K-th run decides it within a second of
    # that call): the judgement counts in the version's record, not in the verdict (QA 65c-A).
    decided_before: bool = False


class TrialRules(BaseModel):
    successes: int = Field(5, ge=1)  # K
    min_parent_runs: int = Field(3, ge=1)


def _rate(successes: int, failures: int) -> float | None:
    runs = successes + failures
    return successes / runs if runs else None


def parent_rate(counts: TrialCounts, history_successes: int, history_failures: int, rules: TrialRules) -> float:
    if counts.parent_successes + counts.parent_failures >= rules.min_parent_runs:
        return _rate(counts.parent_successes, counts.parent_failures) or 0.0
    return _rate(history_successes, history_failures) or 0.0


def decide(counts: TrialCounts, parent: float, rules: TrialRules) -> Verdict:
    """The verdict on a trial, given the parent's success rate (`parent_rate`)."""
    runs = counts.evolved_successes + counts.evolved_failures
    rate = _rate(counts.evolved_successes, counts.evolved_failures)
    if rate is None:
        return "continue"
    if counts.evolved_successes >= rules.successes and rate >= parent:
        return "activate"
    if runs >= rules.successes and rate < parent - TOLERANCE:
        return "rollback"
    if runs >= 4 * rules.successes and rate < parent:
        return "rollback"
    return "continue"

"""What evolution keeps between calls, one small interface per concept: the changelog, cool-downs,
trial counts, recent successes and description variants.

Evolution's code and the workers that run it need these, not Redis: each is a Protocol, so that
the rules that read them can be tested with an in-memory store (tests/fakes_evolution.py) and the
one suite of tests/contract/test_evolution_state.py holds every implementation to the same
behaviour. The implementation the workers run is workers/state/evolution.py (Redis, one Lua script
per atomic step). A count or an entry sent again (a worker's retry, a redelivered message) is
applied once: the id it carries says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from evolution.descriptions import DescriptionVariant, VariantStatus
from evolution.models import ChangelogEntry, SuccessfulRun
from evolution.trial import TrialCounts
from selection.models import Sentiment

# Entries kept in a namespace's changelog: far more than a namespace's evolutions, so its lineage
# is shown whole; the cap only keeps the list from growing without end.
CHANGELOG_LIMIT = 1000
# Recent successes kept per tool version: the evidence of what a parent does right that its
# evolution is given, with room beyond the few verification replays (evolution/verification.py) for
# those judged wrong or without an input; more would only be older.
RECENT_SUCCESSES_LIMIT = 20
# Events that repeat call after call while nothing changes (`log_unless_repeated`), and how many of
# a namespace's latest entries are looked at for a repeat: an evolution logs one line per candidate
# and its no_fix, far fewer.
REPEATING = ("skipped", "no_fix")
REPEATS_LOOKED_AT = 50
# The longest text a description variant may have.
VARIANT_TEXT_LIMIT = 4000


class Changelog(Protocol):
    """A namespace's history, oldest first: each candidate's verdict, promotions, rollbacks."""

    def log(self, entry: ChangelogEntry, once: str | None = None) -> None:
        """Append `entry` (the newest CHANGELOG_LIMIT are kept). `once`: a name of the change it
        tells, under which another process that saw the same change appends nothing (for a while)."""
        ...

    def log_unless_repeated(self, entry: ChangelogEntry) -> bool:
        """Append `entry` unless it repeats what the namespace's latest outcomes say while nothing
        else happened: an entry with the same event, version, parent, mutator, mutation and reason
        among the latest entries (at most REPEATS_LOOKED_AT) whose events are all REPEATING. True
        when appended. Two calls failing at the same moment log it once."""
        ...

    def changelog(self, namespace: str) -> list[ChangelogEntry]:
        ...


class Cooldowns(Protocol):
    def cooldown(self, name: str, seconds: float) -> bool:
        """Start the cool-down `name` for `seconds` unless one is running; True when this call
        started it (always, for `seconds` <= 0)."""
        ...


class TrialLedger(Protocol):
    """The outcomes of a version on trial and of its parent since its promotion (evolution/trial.py
    decides on them)."""

    def trial_record(
        self, namespace: str, evolved_version: str, role: Literal["evolved", "parent"], success: bool, attempt_id: str,
        call_id: str | None = None, judged: Sentiment | None = None,
    ) -> tuple[bool, TrialCounts]:
        """Count one attempt, once per `attempt_id`; (counted now?, the counts after it). A success
        of `call_id` is noted for `trial_judge`, and counts as a failure when a person judged its
        output wrong already (`judged`)."""
        ...

    def trial_judge(self, namespace: str, evolved_version: str, role: Literal["evolved", "parent"], call_id: str,
                    sentiment: Sentiment) -> tuple[bool, TrialCounts]:
        """A person's judgement of the output `role` gave `call_id` in the trial: a success judged
        wrong counts as a failure, and one judged right again as a success, once however often it
        is sent; (changed?, counts). A call the trial did not count changes nothing."""
        ...


class RecentSuccesses(Protocol):
    """A tool version's latest successful runs, newest first: what an evolution replays."""

    def push_successes(self, runs: Sequence[tuple[str, str, SuccessfulRun]]) -> list[bool]:
        """Keep each (tool key, attempt id, run), once per attempt id (the newest
        RECENT_SUCCESSES_LIMIT per key); True for each run kept now, False for one kept before."""
        ...

    def recent_successes(self, key: str) -> list[SuccessfulRun]:
        ...


class DescriptionVariants(Protocol):
    """Several descriptions of one tool version, tried against each other (evolution/descriptions.py)."""

    def add_variant(self, key: str, text: str, manifest_description: str, *, environment: str = "any") -> DescriptionVariant:
        """Add an operator's variant, on test (`variant_text` checks its text); the first one also records the manifest's
        description as variant "0" (active), so that the incumbent is measured like its
        challengers. ValueError when the version has this text for this environment already."""
        ...

    def variants(self, key: str) -> list[DescriptionVariant]:
        ...

    def all_variants(self, keys: list[str] | None = None) -> dict[str, list[DescriptionVariant]]:
        """Every variant of the given tool versions (of all that have any, by default), by id."""
        ...

    def record_variant(self, key: str, variant_id: str, call_id: str, first: bool, success: bool) -> bool:
        """Credit `call_id` to the variant it was served, once per call and tool: an access, and
        when the variant made the match of the call's first attempt (`first`), a trial and its
        outcome. True when credited now."""
        ...

    def set_variant_status(self, key: str, variant_id: str, expected: VariantStatus, new: VariantStatus) -> bool:
        """Change the status only from `expected` (two workers judging one test cannot both act)."""
        ...


class EvolutionLedger(Changelog, Cooldowns, TrialLedger, RecentSuccesses, DescriptionVariants, Protocol):
    """All of evolution's state, as one store keeps it: what the evolver and the operator's
    commands are given."""


def variant_text(key: str, text: str, manifest_description: str) -> str:
    """The text a new description variant of `key` is kept with (its whitespace folded), or
    ValueError naming what is wrong with it."""
    text = " ".join(text.split())
    if not text:
        raise ValueError("a description variant needs some text")
    if len(text) > VARIANT_TEXT_LIMIT:
        raise ValueError(f"a description variant is limited to {VARIANT_TEXT_LIMIT} characters")
    if text == " ".join(manifest_description.split()):
        raise ValueError(f"{key} has this text already (the manifest's description): a variant must say something else")
    return text

"""An in-memory EvolutionLedger (evolution/ports.py), for tests of the rules that read evolution's
state without Redis. tests/contract/test_evolution_state.py holds it and the Redis store to the same
behaviour."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Literal

from evolution.descriptions import MANIFEST_VARIANT, DescriptionVariant, VariantStatus
from evolution.models import ChangelogEntry, SuccessfulRun
from evolution.ports import CHANGELOG_LIMIT, RECENT_SUCCESSES_LIMIT, REPEATING, REPEATS_LOOKED_AT, variant_text
from evolution.trial import TrialCounts
from selection.manifest import tool_key

_COUNT = {("evolved", True): "evolved_successes", ("evolved", False): "evolved_failures",
          ("parent", True): "parent_successes", ("parent", False): "parent_failures"}


def _repeat_of(entry: ChangelogEntry) -> tuple[str, str, str, str, str, str]:
    return entry.event, entry.version or "", entry.parent or "", entry.mutator, entry.mutation, entry.reason


class InMemoryEvolutionState:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._changelog: dict[str, list[ChangelogEntry]] = defaultdict(list)
        self._cooldowns: dict[str, float] = {}  # name -> when it ends
        self._trials: dict[str, TrialCounts] = defaultdict(TrialCounts)
        self._judged: dict[str, dict[str, str]] = defaultdict(dict)  # trial -> {call|role: counted | negative | positive}
        self._recent: dict[str, list[SuccessfulRun]] = defaultdict(list)
        self._variants: dict[str, dict[str, DescriptionVariant]] = {}
        self._seq: dict[str, int] = defaultdict(int)
        self._applied: set[tuple[str, ...]] = set()  # ids of what was applied once

    def _once(self, *what: str) -> bool:
        if what in self._applied:
            return False
        self._applied.add(what)
        return True

    # Changelog --------------------------------------------------------------------------------

    def log(self, entry: ChangelogEntry, once: str | None = None) -> None:
        if once is not None and not self._once("changelog", once):
            return
        entries = self._changelog[entry.namespace]
        entries.append(entry)
        del entries[:-CHANGELOG_LIMIT]

    def log_unless_repeated(self, entry: ChangelogEntry) -> bool:
        for earlier in reversed(self._changelog[entry.namespace][-REPEATS_LOOKED_AT:]):
            if earlier.event not in REPEATING:
                break
            if _repeat_of(earlier) == _repeat_of(entry):
                return False
        self.log(entry)
        return True

    def changelog(self, namespace: str) -> list[ChangelogEntry]:
        return list(self._changelog.get(namespace, []))

    # Cool-downs -------------------------------------------------------------------------------

    def cooldown(self, name: str, seconds: float) -> bool:
        if seconds <= 0:
            return True
        now = self.clock()
        if self._cooldowns.get(name, 0.0) > now:
            return False
        self._cooldowns[name] = now + seconds
        return True

    # Trials -----------------------------------------------------------------------------------

    def trial_record(
        self, namespace: str, evolved_version: str, role: Literal["evolved", "parent"], success: bool, attempt_id: str,
        call_id: str | None = None, judged: Literal["positive", "negative"] | None = None,
    ) -> tuple[bool, TrialCounts]:
        trial = tool_key(namespace, evolved_version)
        counts = self._trials[trial]
        if not self._once("trial", attempt_id):
            return False, counts.model_copy()
        field = _COUNT[(role, success and judged != "negative")]
        setattr(counts, field, getattr(counts, field) + 1)
        if success and call_id is not None:
            self._judged[trial][f"{call_id}|{role}"] = judged or "counted"
        return True, counts.model_copy()

    def trial_judge(self, namespace: str, evolved_version: str, role: Literal["evolved", "parent"], call_id: str,
                    sentiment: Literal["positive", "negative"]) -> tuple[bool, TrialCounts]:
        trial = tool_key(namespace, evolved_version)
        counts, marks, member = self._trials[trial], self._judged[trial], f"{call_id}|{role}"
        before = marks.get(member)
        if before is None or before == sentiment:
            return False, counts.model_copy()
        marks[member] = sentiment
        if (before == "negative") == (sentiment == "negative"):
            return False, counts.model_copy()
        won, lost = _COUNT[(role, True)], _COUNT[(role, False)]
        source, target = (won, lost) if sentiment == "negative" else (lost, won)
        setattr(counts, source, max(0, getattr(counts, source) - 1))
        setattr(counts, target, getattr(counts, target) + 1)
        return True, counts.model_copy()

    # Recent successes -------------------------------------------------------------------------

    def push_successes(self, runs: Sequence[tuple[str, str, SuccessfulRun]]) -> list[bool]:
        pushed = []
        for key, attempt_id, run in runs:
            if self._once("recent", attempt_id):
                self._recent[key].insert(0, run)
                del self._recent[key][RECENT_SUCCESSES_LIMIT:]
                pushed.append(True)
            else:
                pushed.append(False)
        return pushed

    def recent_successes(self, key: str) -> list[SuccessfulRun]:
        return list(self._recent.get(key, []))

    # Description variants ---------------------------------------------------------------------

    def add_variant(self, key: str, text: str, manifest_description: str, *, environment: str = "any") -> DescriptionVariant:
        text = variant_text(key, text, manifest_description)
        same = next((v for v in self.variants(key) if v.text == text and v.environment == environment), None)
        if same is not None:
            which = f"variant #{same.id}" if same.id != MANIFEST_VARIANT else "the manifest's description"
            raise ValueError(f"{key} has this text already ({which}): a variant must say something else")
        self._seq[key] += 1
        kept = self._variants.setdefault(key, {})
        kept.setdefault(MANIFEST_VARIANT, DescriptionVariant(id=MANIFEST_VARIANT, text=manifest_description, status="active",
                                                             source="manifest"))
        added = DescriptionVariant(id=str(self._seq[key]), text=text, environment=environment)
        kept[added.id] = added
        return added.model_copy()

    def variants(self, key: str) -> list[DescriptionVariant]:
        return self.all_variants([key]).get(key, [])

    def all_variants(self, keys: list[str] | None = None) -> dict[str, list[DescriptionVariant]]:
        keys = sorted(self._variants) if keys is None else keys
        return {key: [v.model_copy() for v in sorted(self._variants[key].values(), key=lambda v: int(v.id))]
                for key in keys if self._variants.get(key)}

    def record_variant(self, key: str, variant_id: str, call_id: str, first: bool, success: bool) -> bool:
        if not self._once("variant", call_id, key):
            return False
        variant = self._variants.get(key, {}).get(variant_id)
        if variant is not None:
            variant.accesses += 1
            variant.trials += first
            variant.successes += first and success
        return True

    def set_variant_status(self, key: str, variant_id: str, expected: VariantStatus, new: VariantStatus) -> bool:
        variant = self._variants.get(key, {}).get(variant_id)
        if variant is None or variant.status != expected:
            return False
        variant.status = new
        return True

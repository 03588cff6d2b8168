"""InMemoryStateStore: the StateStore port in pure Python, for unit tests of pure logic.

Same behaviour as workers/state/redis.py (the contract suite in tests/contract/test_state_store.py
runs against both): quality by selection/quality.py in basis points, idempotency per attempt id,
JSON round trips for promotions and weights, breakers with a cool-down, capped durations, locks
with a TTL. One lock makes every method atomic. `clock` (seconds) can be injected.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from selection.models import FailureCount, Promotion, Severity, call_of_attempt
from selection.ports import (DURATIONS_KEPT, BreakerOutcome, BreakerState, FailureApplied, RetrainNote, SelectionWeights, StateVersions,
                             ToolStats)
from selection.quality import FULL_QUALITY_BP, apply_failure_bp, bp_to_quality, quality_to_bp
from selection.percentile import percentile
from workers.state.base import IDEMPOTENCY_TTL_S
from workers.state.redis import PROMOTION_HISTORY_LIMIT, WEIGHTS_HISTORY_LIMIT


@dataclass
class _Tool:
    quality_bp: int = FULL_QUALITY_BP
    successes: int = 0
    failures: int = 0
    refused_inputs: int = 0
    refused_in_a_row: int = 0
    judged_wrong: int = 0


@dataclass
class _Breaker:
    fails: int = 0
    open_until: float | None = None


@dataclass
class _State:
    tools: dict[str, _Tool] = field(default_factory=dict)
    guards: dict[str, float] = field(default_factory=dict)  # key -> expiry
    fed_breakers: dict[str, BreakerOutcome] = field(default_factory=dict)  # attempt id -> what feeding its breaker returned
    promotions: dict[str, str] = field(default_factory=dict)
    promotion_history: dict[str, list[str]] = field(default_factory=dict)
    weights: str | None = None
    weights_version: int = 0
    weights_history: list[str] = field(default_factory=list)  # newest first
    last_retrain: str | None = None
    classifier: str | None = None
    state_version: int = 0
    promotions_version: int = 0
    namespaces: set[str] = field(default_factory=set)
    newcomers: dict[str, float] = field(default_factory=dict)
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex)  # a new one with every clear()
    breakers: dict[str, _Breaker] = field(default_factory=dict)
    durations: dict[str, list[float]] = field(default_factory=dict)
    locks: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> (owner, expiry)
    judged: dict[tuple[str, str], str] = field(default_factory=dict)  # (key, call) -> judgement applied
    judged_early: set[tuple[str, str]] = field(default_factory=set)  # (key, call) judged wrong before its success was counted
    judgements: int = 0


class InMemoryStateStore:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self._s = _State()

    def _claim(self, key: str) -> bool:
        now = self.clock()
        expiry = self._s.guards.get(key)
        if expiry is not None and expiry > now:
            return False
        self._s.guards[key] = now + IDEMPOTENCY_TTL_S
        return True

    # Quality and counters
    def stats(self, keys: Sequence[str]) -> dict[str, ToolStats]:
        with self._lock:
            out = {}
            for key in keys:
                t = self._s.tools.get(key, _Tool())
                out[key] = ToolStats(quality=bp_to_quality(t.quality_bp), successes=t.successes, failures=t.failures,
                                     refused_inputs=t.refused_inputs, refused_in_a_row=t.refused_in_a_row)
            return out

    def all_stats(self) -> dict[str, ToolStats]:
        with self._lock:
            keys = list(self._s.tools)
        return self.stats(keys)

    def set_quality(self, key: str, quality: float) -> None:
        bp = quality_to_bp(quality)
        with self._lock:
            self._s.tools.setdefault(key, _Tool()).quality_bp = bp
            self._s.state_version += 1

    def mark_failure(self, key: str, attempt_id: str, severity: Severity,
                     counted: FailureCount = FailureCount.failure) -> FailureApplied:
        severity, counted = Severity(severity), FailureCount(counted)
        with self._lock:
            applied = self._claim(f"applied:outcome:{attempt_id}")
            t = self._s.tools.setdefault(key, _Tool())
            before = t.quality_bp
            if applied and counted is not FailureCount.failure:
                t.refused_inputs += 1
                if counted is FailureCount.refused_input:
                    t.refused_in_a_row += 1
                else:
                    self._s.state_version += 1
            elif applied:
                t.quality_bp, ran = apply_failure_bp(t.quality_bp, t.failures - t.judged_wrong, severity)
                t.failures = ran + t.judged_wrong
                self._s.state_version += 1
            return FailureApplied(applied=applied, quality=bp_to_quality(t.quality_bp), failures=t.failures,
                                  quality_before=bp_to_quality(before))

    def forgive_failures(self, key: str, failures: Sequence[tuple[str, int]]) -> int:
        given = 0
        with self._lock:
            t = self._s.tools.setdefault(key, _Tool())
            for attempt_id, cost in failures:
                if t.failures - t.judged_wrong > 0 and self._claim(f"forgiven:failure:{attempt_id}"):
                    t.quality_bp, t.failures = min(FULL_QUALITY_BP, t.quality_bp + int(cost)), t.failures - 1
                    given += 1
            if given:
                self._s.state_version += 1
        return given

    def record_successes(self, attempts: Sequence[tuple[str, str]]) -> list[bool]:
        counted = []
        with self._lock:
            for key, attempt_id in attempts:
                counted.append(self._claim(f"applied:outcome:{attempt_id}"))
                if counted[-1]:
                    t = self._s.tools.setdefault(key, _Tool())
                    t.refused_in_a_row = 0
                    if (key, call_of_attempt(attempt_id)) in self._s.judged_early:
                        self._s.judged_early.discard((key, call_of_attempt(attempt_id)))  # its judgement counted it
                    else:
                        t.successes += 1
        return counted

    def judge_output(self, key: str, call_id: str, sentiment: Literal["positive", "negative"]) -> bool:
        with self._lock:
            before = self._s.judged.get((key, call_id))
            if before == sentiment:
                return False
            self._s.judged[(key, call_id)] = sentiment
            if (before == "negative") == (sentiment == "negative"):
                return False
            tool = self._s.tools.setdefault(key, _Tool())
            if sentiment == "negative":
                if tool.successes == 0:
                    self._s.judged_early.add((key, call_id))  # before its success was counted (record_successes)
                tool.successes, tool.failures = max(0, tool.successes - 1), tool.failures + 1
                tool.judged_wrong += 1
            else:
                if (key, call_id) in self._s.judged_early:
                    self._s.judged_early.discard((key, call_id))  # its success is still to come
                else:
                    tool.successes += 1
                tool.failures = max(0, tool.failures - 1)
                tool.judged_wrong = max(0, tool.judged_wrong - 1)
            return True

    # Promotions
    def promotion(self, namespace: str) -> Promotion | None:
        with self._lock:
            raw = self._s.promotions.get(namespace)
        return None if raw is None else Promotion.model_validate_json(raw)

    def promotions(self, namespaces: Sequence[str]) -> dict[str, Promotion | None]:
        return {ns: self.promotion(ns) for ns in dict.fromkeys(namespaces)}

    def promote(self, promotion: Promotion) -> None:
        raw = promotion.model_dump_json()
        with self._lock:
            self._s.promotions[promotion.namespace] = raw
            history = self._s.promotion_history.setdefault(promotion.namespace, [])
            history.append(raw)
            del history[: max(0, len(history) - PROMOTION_HISTORY_LIMIT)]
            self._s.state_version += 1
            self._s.promotions_version += 1

    # Newcomers
    def note_namespaces(self, namespaces: Sequence[str], now: float) -> list[str]:
        with self._lock:
            had = bool(self._s.namespaces)
            new = sorted(set(namespaces) - self._s.namespaces)
            self._s.namespaces |= set(new)
            if not had or not new:
                return []
            self._s.newcomers.update(dict.fromkeys(new, now))
            self._s.state_version += 1
            self._s.promotions_version += 1
            return new

    def renew_newcomers(self, namespaces: Sequence[str], now: float) -> None:
        with self._lock:
            if not namespaces:
                return
            self._s.newcomers.update(dict.fromkeys(namespaces, now))
            self._s.state_version += 1
            self._s.promotions_version += 1

    def newcomers(self) -> dict[str, float]:
        with self._lock:
            return dict(self._s.newcomers)

    def promote_if(self, promotion: Promotion, expect_version: str | None, expect_status: Sequence[str]) -> bool:
        with self._lock:
            current = self.promotion(promotion.namespace)
            if current is None or expect_version is None:
                if (current is None) != (expect_version is None):
                    return False
            elif current.evolved_version != expect_version or current.status not in expect_status:
                return False
            self.promote(promotion)
            return True

    def promotion_history(self, namespace: str) -> list[Promotion]:
        with self._lock:
            raws = list(self._s.promotion_history.get(namespace, []))
        return [Promotion.model_validate_json(r) for r in raws]

    def all_promotion_histories(self) -> dict[str, list[Promotion]]:
        with self._lock:
            names = list(self._s.promotion_history)
        return {name: self.promotion_history(name) for name in names}

    # Weights
    def weights(self) -> SelectionWeights:
        with self._lock:
            raw = self._s.weights
        return SelectionWeights() if raw is None else SelectionWeights.model_validate_json(raw)

    def set_weights(self, weights: SelectionWeights, classifier: str | None = None) -> SelectionWeights:
        for name, value in weights.weights.items():
            if not math.isfinite(value):
                raise ValueError(f"weight {name!r} is not finite: {value!r}")
        with self._lock:
            self._s.weights_version += 1
            stored = weights.model_copy(
                update={"version": self._s.weights_version, "updated_at": weights.updated_at or self.clock()}
            )
            raw = stored.model_dump_json()
            self._s.weights = raw
            self._s.weights_history.insert(0, raw)
            del self._s.weights_history[WEIGHTS_HISTORY_LIMIT:]
            if classifier:
                self._s.classifier = classifier
            self._s.state_version += 1
        return SelectionWeights.model_validate_json(raw)

    def classifier(self) -> str | None:
        with self._lock:
            return self._s.classifier

    def weights_history(self, limit: int = 20) -> list[SelectionWeights]:
        with self._lock:
            raws = self._s.weights_history[: max(0, limit)]
        return [SelectionWeights.model_validate_json(r) for r in raws]

    def note_retrain(self, note: RetrainNote) -> None:
        with self._lock:
            self._s.last_retrain = note.model_dump_json()

    def last_retrain(self) -> RetrainNote | None:
        with self._lock:
            raw = self._s.last_retrain
        return None if raw is None else RetrainNote.model_validate_json(raw)

    def note_judgement(self) -> None:
        with self._lock:
            self._s.state_version += 1
            self._s.judgements += 1

    def note_memory_change(self) -> None:
        with self._lock:
            self._s.state_version += 1

    def versions(self) -> StateVersions:
        with self._lock:
            return StateVersions(self._s.state_version, self._s.promotions_version, self._s.weights_version,
                                 self._s.epoch, self._s.judgements)

    # Circuit breakers and durations
    def stats_and_breakers(self, keys: Sequence[str]) -> tuple[dict[str, ToolStats], dict[str, BreakerState]]:
        stats = self.stats(keys)
        with self._lock:
            recent = {key: list(self._s.durations.get(key, [])) for key in keys}
        for key, runs in recent.items():
            stats[key].recent_runs = len(runs)
            stats[key].recent_p95_ms = percentile(runs, 0.95) if runs else None
        with self._lock:
            now = self.clock()
            breakers: dict[str, BreakerState] = {}
            for key in keys:
                b = self._s.breakers.get(key)
                if b is None or b.open_until is None:
                    breakers[key] = "closed"
                else:
                    breakers[key] = "open" if now < b.open_until else "half_open"
        return stats, breakers

    def record_run(self, key: str, ms: float, success: bool | None, threshold: int, cooldown_s: float,
                   attempt_id: str | None = None) -> BreakerOutcome | None:
        if not math.isfinite(ms) or ms < 0:
            raise ValueError(f"duration must be a finite number >= 0, got {ms!r}")
        if success is not None and threshold < 1:
            raise ValueError("threshold must be at least 1")
        if success is not None and (not math.isfinite(cooldown_s) or cooldown_s < 0):
            raise ValueError("cooldown_s must be a finite number >= 0")
        with self._lock:
            values = self._s.durations.setdefault(key, [])
            values.append(float(ms))
            del values[: max(0, len(values) - DURATIONS_KEPT)]
            if success is None:
                return None
            if attempt_id is not None and not self._claim(f"once:breaker:{attempt_id}"):
                return self._s.fed_breakers.get(attempt_id)
            state = self._feed_breaker(key, success, threshold, self.clock(), cooldown_s)
            if attempt_id is not None:
                self._s.fed_breakers[attempt_id] = state
            return state

    def _feed_breaker(self, key: str, success: bool, threshold: int, now: float, cooldown_s: float) -> BreakerOutcome:
        b = self._s.breakers.get(key)
        if success:
            self._s.breakers.pop(key, None)
            if b is not None and b.open_until is not None:
                self._s.state_version += 1
                return "recovered"
            return "closed"
        b = self._s.breakers.setdefault(key, _Breaker())
        b.fails += 1
        if b.fails < threshold:
            return "closed"
        if b.open_until is not None and now < b.open_until:
            return "open"
        b.open_until = now + cooldown_s
        self._s.state_version += 1
        return "open"

    # Locks
    def acquire_lock(self, name: str, owner: str, ttl_s: float, *, reclaim: bool = False) -> bool:
        with self._lock:
            now = self.clock()
            held = self._s.locks.get(name)
            if held is not None and held[1] > now and not (reclaim and held[0] == owner):
                return False
            self._s.locks[name] = (owner, now + max(0.001, ttl_s))
            return True

    def release_lock(self, name: str, owner: str) -> bool:
        with self._lock:
            held = self._s.locks.get(name)
            if held is None or held[1] <= self.clock() or held[0] != owner:
                return False
            del self._s.locks[name]
            return True

    def clear(self) -> None:
        with self._lock:
            self._s = _State()

"""The state store on Redis: quality and counters per tool version, promotions, selection weights,
circuit breakers, recent durations, idempotency guards and namespace locks.

Every read-modify-write is one Lua script (the `.lua` files in `lua/` beside this module, each
headed by the KEYS and ARGV it takes) or one MULTI, so N workers updating one tool at once lose no
update. Quality is kept in integer basis points (selection/quality.py); the penalty numbers are
passed to the scripts as ARGV so they live in Python only.

Key layout (P = the store's prefix, e.g. `fittest:`); the fixed type word comes before any
caller-supplied part, so no two kinds of key can collide:

    P tool:{key}             hash   quality_bp, successes, failures, refused_inputs, refused_in_a_row,
                                    judged_wrong (of the failures, outputs a person judged wrong)
                                    (absent field: default)
    P applied:outcome:{aid}  string idempotency key of an attempt's outcome: mark_failure or record_successes
                                    (record_success.lua), whichever comes first (TTL, 7 days)
    P forgiven:failure:{aid} string a failure of a recovered outage gives its cost back once (forgive_failures.lua, TTL)
    P judged:{key}           hash   call id -> the judgement of its output last applied to the counters
                                    (judge_count.lua)
    P judged_early:{key}     hash   call id -> 1: judged wrong before its success was counted, which then
                                    counts nothing (judge_count.lua, record_success.lua; TTL, 7 days)
    P once:breaker:{aid}     string an attempt feeds its breaker once; what that returned (breaker_record.lua, TTL)
    P once:{what}:{token}    string a change not keyed by an attempt (a run's duration, a promotion, new
                                    weights) applies once, however often it is sent (once.py, TTL)
    P promotion:{ns}         string current Promotion JSON
    P promotions:{ns}        list   Promotion JSON history, oldest first (capped)
    P namespaces             set    every namespace ever served (note_namespaces.lua)
    P newcomers              hash   namespace -> when it came to the running system (s), for its trial, or its
                                    original was replaced by another version (renew_newcomers)
    P weights:current        string SelectionWeights JSON, with its version
    P weights:version        int    last weights version handed out
    P weights:history        list   SelectionWeights JSON, newest first (capped)
    P weights:classifier     string the tool classifier (selection/classifier.py) as base64 text
    P weights:last_retrain   string RetrainNote JSON: why the latest retrain stored nothing new
    P state:version          int    grows with every change of quality, promotion, weights, breaker, and of
                                    records selection reads (note_judgement, note_memory_change)
    P state:promotions       int    grows with every change of a promotion
    P state:epoch            string names this life of the counters; made by the first versions()
                                    that finds it gone (a Redis restart with nothing on disk, clear)
    P state:judgements       int    grows with every person's judgement (note_judgement)
    P breaker:{key}          hash   fails (consecutive), open_until (ms, Redis server clock)
    P durations:{key}        list   recent run durations in ms, oldest first (capped)
    P lock:{name}            string owner token (PX TTL)

For Redis Cluster, give the prefix a hash tag (`{fittest}:`) so each script's keys share a slot.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

import redis
from redis.client import Pipeline

from selection.models import FailureCount, Promotion, Sentiment, Severity, call_of_attempt
from selection.ports import (DURATIONS_KEPT, BreakerOutcome, BreakerState, FailureApplied, RetrainNote, SelectionWeights, StateVersions,
                             ToolStats)
from selection.quality import FULL_QUALITY_BP, SEVERITY_PENALTY_BP, bp_to_quality, failure_penalty_bp, quality_to_bp
from workers.state.pipelined import execute_scripts
from workers.state.base import IDEMPOTENCY_TTL_S, PrefixedStore, as_text, load_scripts
from workers.state.once import ONCE_TTL_S, new_token, once_call

_SCRIPTS = ("apply_once", "breaker_record", "forgive_failures", "judge_count", "mark_failure", "note_namespaces", "promote",
            "promote_if", "reclaim_lock", "record_success", "release_lock", "set_weights", "stats_and_breakers")

# The fields of a tool version's hash that ToolStats holds, in the order stats_and_breakers.lua returns them.
STATS_FIELDS = ("quality_bp", "successes", "failures", "refused_inputs", "refused_in_a_row")
# Promotions kept per namespace: far more than a namespace goes through, so the history that
# metrics, the report and evolution read is whole; the cap only keeps the list from growing without end.
PROMOTION_HISTORY_LIMIT = 1000
# Former weights kept: far more than `fittest weights` lists (10 unless asked for more), few
# enough that the list stays small however long retraining runs.
WEIGHTS_HISTORY_LIMIT = 100
RUN_ID_READ_S = 1.0  # how long a read of the Redis server's run_id is taken for the server's (`_server_run`)
_GLOB_SPECIALS = frozenset("\\*?[]")
SCAN_COUNT = 1000  # keys a SCAN step looks at: few round trips, and no step holds Redis for long
EPOCH_KEY = "state:epoch"  # under a prefix: the life of the store its counters count in (`versions`)
SERVED_MARK = "namespaces"  # the key a memory worker writes under its prefix as it starts (note_newcomers)


EXTRA_STEPS_HORIZON = 1000  # failure counts read off the rule, past its last step


def _extra_steps() -> tuple[tuple[int, int], ...]:
    """The extra penalty of selection/quality.py as steps (from_failure_count, extra_bp).

    Read off `failure_penalty_bp` itself, so the Lua script applies exactly the Python rule
    (today: 500 bp from the 6th failure, 1000 bp instead from the 11th) without repeating it.
    """
    steps: list[tuple[int, int]] = []
    previous = 0
    for n in range(1, EXTRA_STEPS_HORIZON + 1):
        extras = {failure_penalty_bp(s, n) - SEVERITY_PENALTY_BP[s] for s in Severity}
        if len(extras) != 1:
            raise RuntimeError("failure_penalty_bp is no longer base(severity) + extra(count)")
        (extra,) = extras
        if extra != previous:
            steps.append((n, extra))
            previous = extra
    return tuple(steps)


EXTRA_STEPS = _extra_steps()
_EXTRA_ARGV: list[int] = [x for step in EXTRA_STEPS for x in step]


def _int(value: Any, default: int = 0) -> int:
    return default if value is None else int(value)


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in _GLOB_SPECIALS else c for c in text)


def weights_body(weights: SelectionWeights) -> str:
    """The weights as JSON without their version (the store assigns it); refuses non-finite values."""
    for name, value in weights.weights.items():
        if not math.isfinite(value):
            raise ValueError(f"weight {name!r} is not finite: {value!r}")
    updated_at = weights.updated_at or time.time()
    body = weights.model_copy(update={"updated_at": updated_at}).model_dump_json(exclude={"version"})
    if not body.startswith("{") or body == "{}":  # set_weights.lua splices the version in after '{'
        raise RuntimeError(f"unexpected weights JSON: {body[:80]!r}")
    return body


class RedisStateStore(PrefixedStore):
    """StateStore (selection/ports.py) on Redis. Works with clients with or without decode_responses."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        super().__init__(client, prefix)
        self.scripts = load_scripts(client, *_SCRIPTS)
        self._run_id, self._run_read_at = "", -math.inf

    # Keys ------------------------------------------------------------------------------------

    @property
    def _state_key(self) -> str:
        return self._k("state", "version")

    @property
    def _epoch_key(self) -> str:
        return self.prefix + EPOCH_KEY

    @property
    def _promotions_version_key(self) -> str:
        return self._k("state", "promotions")

    @property
    def _weights_version_key(self) -> str:
        return self._k("weights", "version")

    @property
    def _judgements_key(self) -> str:
        return self._k("state", "judgements")

    # Quality and counters ---------------------------------------------------------------------

    def stats(self, keys: Sequence[str]) -> dict[str, ToolStats]:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(self._k("tool", key), *STATS_FIELDS)
        return self._parse_stats(keys, pipe.execute())

    def all_stats(self) -> dict[str, ToolStats]:
        return self.stats(self._names("tool"))

    @staticmethod
    def _parse_stats(keys: list[str], rows: list[Any]) -> dict[str, ToolStats]:
        return {
            key: ToolStats(quality=bp_to_quality(_int(q, FULL_QUALITY_BP)), successes=_int(s), failures=_int(f),
                           refused_inputs=_int(r), refused_in_a_row=_int(a))
            for key, (q, s, f, r, a) in zip(keys, rows)
        }

    def stats_and_breakers(self, keys: Sequence[str]) -> tuple[dict[str, ToolStats], dict[str, BreakerState]]:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}, {}
        flat = self.scripts["stats_and_breakers"](
            keys=[self._k("tool", k) for k in keys] + [self._k("breaker", k) for k in keys]
            + [self._k("durations", k) for k in keys],
            args=[],
        )
        n = len(keys)
        values = [None if v is None else as_text(v) for v in flat[1:]]  # Lua false -> None
        k = len(STATS_FIELDS)
        rows = [values[k * i : k * i + k] for i in range(n)]
        opens = values[k * n : (k + 1) * n]
        stats = self._parse_stats(keys, rows)
        for i, key in enumerate(keys):
            runs, p95 = values[(k + 1) * n + 2 * i : (k + 1) * n + 2 * i + 2]
            stats[key].recent_runs = _int(runs)
            stats[key].recent_p95_ms = None if p95 is None else float(p95)
        return stats, self._breakers_at(int(flat[0]), keys, opens)

    def set_quality(self, key: str, quality: float) -> None:
        bp = quality_to_bp(quality)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self._k("tool", key), "quality_bp", bp)
        pipe.incr(self._state_key)
        pipe.execute()

    def mark_failure(self, key: str, attempt_id: str, severity: Severity,
                     counted: FailureCount = FailureCount.failure) -> FailureApplied:
        severity, counted = Severity(severity), FailureCount(counted)
        penalty = [SEVERITY_PENALTY_BP[severity], *_EXTRA_ARGV] if counted is FailureCount.failure else [counted.value]
        applied, q, f, before = self.scripts["mark_failure"](
            keys=[self._k("tool", key), self._k("applied", "outcome", attempt_id), self._state_key],
            args=[IDEMPOTENCY_TTL_S, FULL_QUALITY_BP, *penalty],
        )
        return FailureApplied(applied=bool(applied), quality=bp_to_quality(int(q)), failures=int(f),
                              quality_before=bp_to_quality(int(before)))

    def forgive_failures(self, key: str, failures: Sequence[tuple[str, int]]) -> int:
        if not failures:
            return 0
        return int(self.scripts["forgive_failures"](
            keys=[self._k("tool", key), self._state_key, *(self._k("forgiven", "failure", aid) for aid, _ in failures)],
            args=[IDEMPOTENCY_TTL_S, FULL_QUALITY_BP, *(int(cost) for _, cost in failures)],
        ))

    def record_successes(self, attempts: Sequence[tuple[str, str]]) -> list[bool]:
        if not attempts:
            return []
        def queue(pipe: Pipeline) -> None:
            for key, attempt_id in attempts:
                self.scripts["record_success"](
                    keys=[self._k("tool", key), self._k("applied", "outcome", attempt_id), self._k("judged_early", key)],
                    args=[IDEMPOTENCY_TTL_S, call_of_attempt(attempt_id)],
                    client=pipe,
                )

        return [bool(counted) for counted in execute_scripts(self.client, queue)]

    def judge_output(self, key: str, call_id: str, sentiment: Sentiment) -> bool:
        changed, _ = self.scripts["judge_count"](keys=[self._k("tool", key), self._k("judged", key), self._k("judged_early", key)],
                                                 args=[call_id, sentiment, "successes", "failures", "0", "judged_wrong",
                                                       IDEMPOTENCY_TTL_S])
        return bool(changed)

    # Promotions -------------------------------------------------------------------------------

    def promotion(self, namespace: str) -> Promotion | None:
        raw = self.client.get(self._k("promotion", namespace))
        return None if raw is None else Promotion.model_validate_json(raw)

    def promotions(self, namespaces: Sequence[str]) -> dict[str, Promotion | None]:
        names = list(dict.fromkeys(namespaces))
        if not names:
            return {}
        raws = self.client.mget([self._k("promotion", ns) for ns in names])
        return {ns: None if raw is None else Promotion.model_validate_json(raw) for ns, raw in zip(names, raws)}

    def promote(self, promotion: Promotion) -> None:
        ns = promotion.namespace
        self.scripts["promote"](
            keys=[self._k("promotion", ns), self._k("promotions", ns), self._state_key, self._promotions_version_key,
                  self._k("once", "promote", new_token())],
            args=[promotion.model_dump_json(), PROMOTION_HISTORY_LIMIT, ONCE_TTL_S],
        )

    def promote_if(self, promotion: Promotion, expect_version: str | None, expect_status: Sequence[str]) -> bool:
        if not expect_status or any("," in s for s in expect_status):
            raise ValueError(f"expected statuses must be non-empty words, got {list(expect_status)!r}")
        ns = promotion.namespace
        changed = self.scripts["promote_if"](
            keys=[self._k("promotion", ns), self._k("promotions", ns), self._state_key, self._promotions_version_key],
            args=[expect_version or "", ",".join(expect_status), promotion.model_dump_json(), PROMOTION_HISTORY_LIMIT],
        )
        return bool(changed)

    def promotion_history(self, namespace: str) -> list[Promotion]:
        return [Promotion.model_validate_json(raw) for raw in self.client.lrange(self._k("promotions", namespace), 0, -1)]

    def all_promotion_histories(self) -> dict[str, list[Promotion]]:
        names = self._names("promotions")
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.lrange(self._k("promotions", name), 0, -1)
        return {name: [Promotion.model_validate_json(r) for r in raws] for name, raws in zip(names, pipe.execute())}

    # Newcomers --------------------------------------------------------------------------------

    def note_namespaces(self, namespaces: Sequence[str], now: float) -> list[str]:
        names = sorted(set(namespaces))
        if not names:
            return []
        found = self.scripts["note_namespaces"](
            keys=[self._k(SERVED_MARK), self._k("newcomers"), self._state_key, self._promotions_version_key],
            args=[now, *names],
        )
        return [as_text(name) for name in found]

    def renew_newcomers(self, namespaces: Sequence[str], now: float) -> None:
        names = sorted(set(namespaces))
        if not names:
            return
        pipe = self.client.pipeline(transaction=True)  # no read: MULTI makes the three writes one
        pipe.hset(self._k("newcomers"), mapping=dict.fromkeys(names, now))
        pipe.incr(self._promotions_version_key)
        pipe.incr(self._state_key)
        pipe.execute()

    def newcomers(self) -> dict[str, float]:
        return {as_text(name): float(since) for name, since in self.client.hgetall(self._k("newcomers")).items()}

    # Weights ----------------------------------------------------------------------------------

    def weights(self) -> SelectionWeights:
        raw = self.client.get(self._k("weights", "current"))
        return SelectionWeights() if raw is None else SelectionWeights.model_validate_json(raw)

    def set_weights(self, weights: SelectionWeights, classifier: str | None = None) -> SelectionWeights:
        doc = self.scripts["set_weights"](
            keys=[
                self._weights_version_key,
                self._k("weights", "current"),
                self._k("weights", "history"),
                self._state_key,
                self._k("weights", "classifier"),
                self._k("once", "weights", new_token()),
            ],
            args=[weights_body(weights), WEIGHTS_HISTORY_LIMIT, classifier or "", ONCE_TTL_S],
        )
        return SelectionWeights.model_validate_json(doc)

    def classifier(self) -> str | None:
        raw = self.client.get(self._k("weights", "classifier"))
        return None if raw is None else as_text(raw)

    def weights_history(self, limit: int = 20) -> list[SelectionWeights]:
        if limit <= 0:
            return []
        raws = self.client.lrange(self._k("weights", "history"), 0, limit - 1)
        return [SelectionWeights.model_validate_json(raw) for raw in raws]

    def note_retrain(self, note: RetrainNote) -> None:
        self.client.set(self._k("weights", "last_retrain"), note.model_dump_json())

    def last_retrain(self) -> RetrainNote | None:
        raw = self.client.get(self._k("weights", "last_retrain"))
        return None if raw is None else RetrainNote.model_validate_json(raw)

    def note_judgement(self) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(self._state_key)
        pipe.incr(self._judgements_key)
        pipe.execute()

    def note_memory_change(self) -> None:
        self.client.incr(self._state_key)

    def versions(self) -> StateVersions:
        keys = [self._state_key, self._promotions_version_key, self._weights_version_key, self._epoch_key,
                self._judgements_key]
        state, promotions, weights, epoch, judgements = self.client.mget(keys)
        if epoch is None:  # a new store, or one that lost its keys: its counters start a new epoch
            self.client.set(self._epoch_key, uuid.uuid4().hex, nx=True)  # the first reader names it
            state, promotions, weights, epoch, judgements = self.client.mget(keys)
        return StateVersions(_int(state), _int(promotions), _int(weights), f"{as_text(epoch)}/{self._server_run()}",
                             _int(judgements))

    def _server_run(self) -> str:
        """The run of the Redis server (its `run_id`, new at each start), read at most once per
        RUN_ID_READ_S. A Redis restarted from a snapshot seconds old keeps the epoch key and puts
        the counters back: once they counted up to a number read before the restart, the cache
        served what was read then (QA 60c F1: a promotion made after the restart went unserved on 3
        calls of 4). "" when the server does not say (INFO refused to this user)."""
        now = time.monotonic()
        if now - self._run_read_at >= RUN_ID_READ_S:
            try:
                self._run_id = str(self.client.info("server").get("run_id", ""))
            except redis.ResponseError:
                self._run_id = ""
            self._run_read_at = now
        return self._run_id

    # Circuit breakers -------------------------------------------------------------------------

    def _breaker_call(self, key: str, success: bool, threshold: int, cooldown_s: float,
                      attempt_id: str | None) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of breaker_record.lua: it counts once per attempt, or, without one, once
        per call of this method, which a pipeline re-sent after NOSCRIPT sends again (review 57b F2:
        the outcome was fed to the breaker twice)."""
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        if not math.isfinite(cooldown_s) or cooldown_s < 0:
            raise ValueError("cooldown_s must be a finite number >= 0")
        keys = [self._k("breaker", key), self._state_key]
        once = self._k("once", "breaker", attempt_id if attempt_id is not None else new_token())
        return keys + [once], ["1" if success else "0", int(threshold), round(cooldown_s * 1000), IDEMPOTENCY_TTL_S]

    @staticmethod
    def _breakers_at(now_ms: int, keys: list[str], opens: list[Any]) -> dict[str, BreakerState]:
        out: dict[str, BreakerState] = {}
        for key, open_until in zip(keys, opens):
            if open_until is None:
                out[key] = "closed"
            else:
                out[key] = "open" if now_ms < int(open_until) else "half_open"
        return out

    # Durations --------------------------------------------------------------------------------

    def _queue_duration(self, pipe: Pipeline, key: str, ms: float) -> None:
        if not math.isfinite(ms) or ms < 0:
            raise ValueError(f"duration must be a finite number >= 0, got {ms!r}")
        name = self._k("durations", key)
        pipe.rpush(name, repr(float(ms)))
        pipe.ltrim(name, -DURATIONS_KEPT, -1)

    def record_run(self, key: str, ms: float, success: bool | None, threshold: int, cooldown_s: float,
                   attempt_id: str | None = None) -> BreakerOutcome | None:
        breaker = None if success is None else self._breaker_call(key, success, threshold, cooldown_s, attempt_id)
        timed = self.client.pipeline(transaction=True)  # records the duration's commands, never executed
        self._queue_duration(timed, key, ms)
        duration = once_call(timed, self._k("once", "run", new_token()))  # timed once, even if sent again

        def queue(pipe: Pipeline) -> None:
            self.scripts["apply_once"](keys=duration[0], args=duration[1], client=pipe)
            if breaker is not None:
                self.scripts["breaker_record"](keys=breaker[0], args=breaker[1], client=pipe)

        results = execute_scripts(self.client, queue)
        state = None if success is None else as_text(results[-1])
        return None if state == "skipped" else state  # type: ignore[return-value]

    # Locks ------------------------------------------------------------------------------------

    def acquire_lock(self, name: str, owner: str, ttl_s: float, *, reclaim: bool = False) -> bool:
        """Take the lock for `ttl_s` unless anyone (the same owner included, unless `reclaim`) holds it."""
        ttl_ms = max(1, round(ttl_s * 1000))
        if reclaim:
            return bool(self.scripts["reclaim_lock"](keys=[self._k("lock", name)], args=[owner, ttl_ms]))
        return bool(self.client.set(self._k("lock", name), owner, nx=True, px=ttl_ms))

    def release_lock(self, name: str, owner: str) -> bool:
        return bool(self.scripts["release_lock"](keys=[self._k("lock", name)], args=[owner]))

    # Housekeeping -----------------------------------------------------------------------------

    def _names(self, kind: str) -> list[str]:
        """The caller-supplied parts of the keys of one kind (`tool`: the tool versions), read by
        SCAN: only operators' reads (metrics, the report) ask for every one."""
        head = self._k(kind, "")
        return [as_text(raw)[len(head):]
                for raw in self.client.scan_iter(match=glob_escape(head) + "*", count=SCAN_COUNT)]

    def clear(self) -> None:
        batch: list[Any] = []
        for name in self.client.scan_iter(match=glob_escape(self.prefix) + "*", count=SCAN_COUNT):
            batch.append(name)
            if len(batch) >= 500:
                self.client.unlink(*batch)
                batch.clear()
        if batch:
            self.client.unlink(*batch)

    def __repr__(self) -> str:
        return f"RedisStateStore(prefix={self.prefix!r})"

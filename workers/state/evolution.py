"""Evolution's state on Redis (evolution/ports.py's EvolutionLedger): the changelog per namespace,
trial counts, recent successes per tool version, cool-downs, and description variants with their
effectiveness.

Every count is applied once per attempt (or per call) by a Lua script with an idempotency key,
like the quality scores in workers/state/redis.py; promotions themselves stay there.

Key layout (P = the key prefix, shared with RedisStateStore; the type word comes first):

    P changelog:{ns}            list   ChangelogEntry JSON, oldest first (capped)
    P once:changelog:{token}    string an entry is logged once, however often it is sent (once.py, TTL)
    P trial:{ns}@{version}      hash   es, ef, ps, pf: evolved / parent successes and failures
    P applied:trial:{aid}       string idempotency key of a trial count (TTL)
    P trial_judged:{ns}@{version} hash "{call_id}|evolved" or "|parent" -> counted | negative |
                                       positive: how each output the trial counted as a success counts now (TTL)
    P recent:{key}              list   SuccessfulRun JSON of a tool version, newest first (capped)
    P applied:recent:{aid}      string idempotency key of a recent success (TTL)
    P cooldown:{name}           string set while a cool-down runs (EX)
    P variants:index            set    tool keys that have description variants
    P variants:{key}            hash   variant id -> {text, environment, source, created_at} JSON
    P variant_status:{key}      hash   variant id -> active | testing | deprecated
    P variant_stats:{key}       hash   "{id}:accesses" / "{id}:trials" / "{id}:successes" -> count
    P variant_seq:{key}         int    last variant id handed out
    P applied:variant:{cid}:{key} string idempotency key of a call's variant credit (TTL)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import redis
from redis.client import Pipeline

from evolution.descriptions import MANIFEST_VARIANT, DescriptionVariant, VariantStatus
from evolution.models import ChangelogEntry, SuccessfulRun
from evolution.ports import CHANGELOG_LIMIT, RECENT_SUCCESSES_LIMIT, REPEATING, REPEATS_LOOKED_AT, variant_text
from evolution.trial import TrialCounts
from selection.manifest import tool_key
from selection.models import Sentiment
from workers.state.base import IDEMPOTENCY_TTL_S, PrefixedStore, as_text, load_scripts, push_recent
from workers.state.once import ONCE_TTL_S, apply_once, new_token

_SCRIPT_NAMES = ("apply_once", "changelog_unless_repeated", "trial_record", "judge_count", "push_recent", "variant_record", "variant_status")
# A description variant's own fields, in its hash; its status and counts are kept under keys of their own.
VARIANT_FIELDS = {"text", "environment", "source", "created_at"}
_COUNT_FIELDS = ("es", "ef", "ps", "pf")  # a trial hash's fields, in TrialCounts' order
_TRIAL_FIELDS = {("evolved", True): "es", ("evolved", False): "ef", ("parent", True): "ps", ("parent", False): "pf"}


def _trial_counts(es: Any, ef: Any, ps: Any, pf: Any) -> TrialCounts:
    """The counts of a trial's hash fields, as a script or HMGET returns them (None: never counted)."""
    return TrialCounts(evolved_successes=int(es or 0), evolved_failures=int(ef or 0),
                       parent_successes=int(ps or 0), parent_failures=int(pf or 0))


class EvolutionState(PrefixedStore):
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        super().__init__(client, prefix)
        self.scripts = load_scripts(client, *_SCRIPT_NAMES)

    # Changelog --------------------------------------------------------------------------------

    def log(self, entry: ChangelogEntry, once: str | None = None) -> None:
        name = self._k("changelog", entry.namespace)
        entries = self.client.pipeline(transaction=True)
        entries.rpush(name, entry.model_dump_json())
        entries.ltrim(name, -CHANGELOG_LIMIT, -1)
        # logged once, even if sent again, or told by another process too (`once`)
        apply_once(self.scripts["apply_once"], entries, self._k("once", "changelog", once or new_token()))

    def log_unless_repeated(self, entry: ChangelogEntry) -> bool:
        """Log `entry` unless it repeats what the namespace's latest outcomes say while nothing else
        happened: an entry with the same event, version, parent, mutator, mutation and reason among the
        latest entries whose events are all REPEATING; True when logged. For outcomes that repeat
        while nothing changes: 15 identical no_fix lines in 7 minutes told nothing the first did
        not (QA onboarding M2), and a mutation skipped as failed before added a `skipped` and a
        `no_fix` line per failed call (QA recheck N5). Any other event logged since (a verified
        version, a promotion) has it logged again. One script reads and appends, so two calls
        failing at the same moment log it once."""
        logged = self.scripts["changelog_unless_repeated"](
            keys=[self._k("changelog", entry.namespace), self._k("once", "changelog", new_token())],
            args=[ONCE_TTL_S, entry.model_dump_json(), CHANGELOG_LIMIT, REPEATS_LOOKED_AT, " ".join(REPEATING),
                  entry.event, entry.version or "", entry.parent or "", entry.mutator, entry.mutation, entry.reason])
        return bool(logged)

    def changelog(self, namespace: str) -> list[ChangelogEntry]:
        return [ChangelogEntry.model_validate_json(raw) for raw in self.client.lrange(self._k("changelog", namespace), 0, -1)]

    # Cool-downs -------------------------------------------------------------------------------

    def cooldown(self, name: str, seconds: float) -> bool:
        """Start a cool-down unless one is running; True when this call started it."""
        if seconds <= 0:
            return True
        return bool(self.client.set(self._k("cooldown", name), 1, nx=True, px=max(1, round(seconds * 1000))))

    # Trials -----------------------------------------------------------------------------------

    def trial_record(
        self, namespace: str, evolved_version: str, role: Literal["evolved", "parent"], success: bool, attempt_id: str,
        call_id: str | None = None, judged: Sentiment | None = None,
    ) -> tuple[bool, TrialCounts]:
        """Count one attempt in the trial of `namespace@evolved_version`; (counted now?, counts).
        A success of `call_id` is noted for `trial_judge`, and counts as a failure when a person
        judged its output wrong already (`judged`)."""
        trial = tool_key(namespace, evolved_version)
        wrong = success and judged == "negative"
        keys = [self._k("trial", trial), self._k("applied", "trial", attempt_id)]
        args: list[str | int] = [IDEMPOTENCY_TTL_S, _TRIAL_FIELDS[(role, success and not wrong)]]
        if success and call_id is not None:
            keys.append(self._k("trial_judged", trial))
            args += [f"{call_id}|{role}", judged or "counted"]
        counted, *counts = self.scripts["trial_record"](keys=keys, args=args)
        return bool(counted), _trial_counts(*counts)

    def trial_judge(self, namespace: str, evolved_version: str, role: Literal["evolved", "parent"], call_id: str,
                    sentiment: Sentiment) -> tuple[bool, TrialCounts]:
        """A person's judgement of the output the version on trial (`role` "evolved") or its parent
        gave `call_id`, in the trial of `namespace@evolved_version`: an output the trial counted as
        a success and now judged wrong counts as a failure, and one judged right again as a success,
        once however often it is sent. (changed?, counts); a call the trial did not count changes
        nothing (one whose outcome comes later is counted as judged: `trial_record`)."""
        changed, flat = self.scripts["judge_count"](
            keys=[self._k("trial", tool_key(namespace, evolved_version)), self._k("trial_judged", tool_key(namespace, evolved_version))],
            args=[f"{call_id}|{role}", sentiment, _TRIAL_FIELDS[(role, True)], _TRIAL_FIELDS[(role, False)], "1"],
        )
        counts = {as_text(f): v for f, v in zip(flat[::2], flat[1::2])}
        return bool(changed), _trial_counts(*(counts.get(f) for f in _COUNT_FIELDS))

    # Recent successes -------------------------------------------------------------------------

    def push_successes(self, runs: Sequence[tuple[str, str, SuccessfulRun]]) -> list[bool]:
        """Keep each run among its tool version's recent successes, once per attempt id, in one
        round trip; True for each run pushed now, False for one pushed before."""
        pushes = [(self._k("recent", key), self._k("applied", "recent", attempt_id), run.model_dump_json())
                  for key, attempt_id, run in runs]
        return push_recent(self.client, self.scripts["push_recent"], pushes, RECENT_SUCCESSES_LIMIT)

    def recent_successes(self, key: str) -> list[SuccessfulRun]:
        raws = self.client.lrange(self._k("recent", key), 0, RECENT_SUCCESSES_LIMIT - 1)
        return [SuccessfulRun.model_validate_json(raw) for raw in raws]

    # Description variants ---------------------------------------------------------------------

    def add_variant(
        self,
        key: str,
        text: str,
        manifest_description: str,
        *,
        environment: str = "any",
    ) -> DescriptionVariant:
        """Add an operator's variant, on test, to a tool version; the first one also records the manifest's description
        as variant "0" (active), so the incumbent is measured like its challengers."""
        text = variant_text(key, text, manifest_description)
        manifest = DescriptionVariant(id=MANIFEST_VARIANT, text=manifest_description, status="active", source="manifest")
        added: list[DescriptionVariant] = []

        def add(pipe: Pipeline) -> None:
            """Check and write under WATCH of the variants: a variant of the same text written
            between the two (another operator) makes the write start again, and
            the check then finds it."""
            same = next((v for v in self.variants(key) if v.text == text and v.environment == environment), None)
            if same is not None:
                which = f"variant #{same.id}" if same.id != MANIFEST_VARIANT else "the manifest's description"
                raise ValueError(f"{key} has this text already ({which}): a variant must say something else")
            variant_id = str(self.client.incr(self._k("variant_seq", key)))
            added[:] = [DescriptionVariant(id=variant_id, text=text, environment=environment)]
            pipe.multi()
            pipe.hsetnx(self._k("variants", key), MANIFEST_VARIANT, self._variant_json(manifest))
            pipe.hsetnx(self._k("variant_status", key), MANIFEST_VARIANT, "active")
            pipe.hset(self._k("variants", key), variant_id, self._variant_json(added[0]))
            pipe.hset(self._k("variant_status", key), variant_id, added[0].status)
            pipe.sadd(self._k("variants", "index"), key)

        self.client.transaction(add, self._k("variants", key))
        return added[0]

    @staticmethod
    def _variant_json(v: DescriptionVariant) -> str:
        """What a variant's hash field keeps: what it is; its status and counts have keys of their own."""
        return v.model_dump_json(include=VARIANT_FIELDS)

    def variants(self, key: str) -> list[DescriptionVariant]:
        return self.all_variants([key]).get(key, [])

    def all_variants(self, keys: list[str] | None = None) -> dict[str, list[DescriptionVariant]]:
        """Every variant of the given tool versions (all that have any, by default), in one round trip."""
        if keys is None:
            keys = sorted(as_text(k) for k in self.client.smembers(self._k("variants", "index")))
        if not keys:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(self._k("variants", key))
            pipe.hgetall(self._k("variant_status", key))
            pipe.hgetall(self._k("variant_stats", key))
        raw = pipe.execute()
        out: dict[str, list[DescriptionVariant]] = {}
        for i, key in enumerate(keys):
            docs, statuses, stats = raw[3 * i], raw[3 * i + 1], raw[3 * i + 2]
            statuses = {as_text(k): as_text(v) for k, v in statuses.items()}
            stats = {as_text(k): int(v) for k, v in stats.items()}
            found = []
            for vid, doc in docs.items():
                vid = as_text(vid)
                found.append(DescriptionVariant.model_validate({
                    **json.loads(doc),
                    "id": vid,
                    "status": statuses.get(vid, "testing"),
                    "accesses": stats.get(f"{vid}:accesses", 0),
                    "trials": stats.get(f"{vid}:trials", 0),
                    "successes": stats.get(f"{vid}:successes", 0),
                }))
            if found:
                out[key] = sorted(found, key=lambda v: int(v.id))
        return out

    def record_variant(self, key: str, variant_id: str, call_id: str, first: bool, success: bool) -> bool:
        credited = self.scripts["variant_record"](
            keys=[self._k("variant_stats", key), self._k("applied", "variant", call_id, key)],
            args=[IDEMPOTENCY_TTL_S, variant_id, "1" if first else "0", "1" if success else "0"],
        )
        return bool(credited)

    def set_variant_status(self, key: str, variant_id: str, expected: VariantStatus, new: VariantStatus) -> bool:
        return bool(self.scripts["variant_status"](keys=[self._k("variant_status", key)], args=[variant_id, expected, new]))

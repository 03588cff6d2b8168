"""What selection needs from storage, as small Protocols (evolution's are in evolution/ports.py).

`workers/` implements them against Redis, Qdrant and fastembed; unit tests may use in-memory
implementations, and each port has one contract suite that runs against every real adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from selection.models import FailureCount, Promotion, Sentiment, Severity
from selection.quality import quality_to_bp

# Collections of the vector memory (each adapter prefixes them, e.g. `fittest_tools`).
TOOLS = "tools"
FEEDBACK = "feedback"
FAILURES = "failures"
EVOLUTIONS = "evolutions"
EXECUTIONS = "executions"
COLLECTIONS = (TOOLS, FEEDBACK, FAILURES, EVOLUTIONS, EXECUTIONS)

# Payload fields that filters (and ordered scrolls) use; every adapter indexes them.
INDEXED_FIELDS: dict[str, tuple[str, ...]] = {
    TOOLS: ("tool", "name", "tags", "deprecated"),
    FEEDBACK: ("tool", "name", "positive", "source", "replaced", "forgiven", "timestamp", "call_id"),
    FAILURES: ("tool", "name", "error_class", "tags", "forgiven", "timestamp"),
    EVOLUTIONS: ("name", "outcome"),
    EXECUTIONS: ("tool", "name", "success", "forgiven", "timestamp"),
}
# Of those, the fields that hold booleans: they get a bool index instead, as a keyword index skips
# boolean values and leaves filters on them to a full scan.
BOOL_FIELDS = frozenset({"deprecated", "forgiven", "positive", "replaced", "success"})
# Of those, the numeric fields a scroll can be ordered by: they get a float index.
FLOAT_FIELDS = frozenset({"timestamp"})


class Match(BaseModel):
    """One filter condition: payload field `key` equals any of `any_of` (for a list field: contains)."""

    key: str
    any_of: list[str | int | bool]


# How far from a float it was given a store may read it back: Qdrant parses a payload's numbers
# without round-trip exactness, so one may come back one unit in the last place off. A range that
# is to hold one written time reaches this far to either side of it.
STORED_TIME_SLACK_S = 1e-3


class Range(BaseModel):
    """Numeric payload field `key` (one of FLOAT_FIELDS) is at least `gte` and below `lt`; None: open."""

    key: str
    gte: float | None = None
    lt: float | None = None


class VectorFilter(BaseModel):
    """All of `must` and `ranges` hold and none of `must_not` does."""

    must: list[Match] = Field(default_factory=list)
    must_not: list[Match] = Field(default_factory=list)
    ranges: list[Range] = Field(default_factory=list)

    @classmethod
    def where(cls, **fields: Any) -> VectorFilter:
        return cls(must=[Match(key=k, any_of=v if isinstance(v, list) else [v]) for k, v in fields.items()])


# A record that says nothing of what its tool is fit for: a failure in an outage its tool recovered
# from, a refusal of an input the caller got wrong, and a success on that input by a version that
# has done no such job (workers/outage.py, selection/models.py `OutcomeRecord.set_aside`).
# Selection's searches and the scores leave it out.
FORGIVEN = Match(key="forgiven", any_of=[True])
# The successes that count as evidence of what a tool does.
SUCCESSES = VectorFilter(must=[Match(key="success", any_of=[True])], must_not=[FORGIVEN])


class VectorPoint(BaseModel):
    """A stored vector; `id` is any string, adapters map it to a stable UUID (upsert is idempotent)."""

    id: str
    vector: list[float]
    payload: dict[str, Any] = Field(default_factory=dict)


class VectorHit(NamedTuple):
    """A search result. A tuple, not a model: a selection reads a few hundred of them, straight
    from our own store, and a model costs an object, a dict and a fields set each (validation
    included) for nothing the store has not already checked."""

    id: str
    score: float  # cosine similarity
    payload: dict[str, Any]


@runtime_checkable
class VectorMemory(Protocol):
    """Tool descriptions, feedback, failure records, evolution patterns, execution contexts."""

    dim: int

    def ensure_collections(self) -> None: ...

    def upsert(self, collection: str, points: Sequence[VectorPoint]) -> None: ...

    def search(
        self,
        collection: str,
        vector: Sequence[float],
        limit: int = 10,
        filter: VectorFilter | None = None,
        score_threshold: float | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[VectorHit]:
        """The nearest points by cosine, best first. `fields`: the payload keys the caller reads
        (None: the whole payload); a store answers faster when it does not copy payloads nobody reads."""
        ...

    def scroll(
        self, collection: str, filter: VectorFilter | None = None, limit: int = 1000,
        descending_by: str | None = None,
    ) -> list[VectorPoint]:
        """Up to `limit` points with their vectors; with `descending_by` (one of FLOAT_FIELDS that
        the collection indexes), those with the highest values of that payload field, highest
        first (points without it are left out), else in the store's own order."""
        ...

    def count(self, collection: str, filter: VectorFilter | None = None) -> int: ...

    def delete(self, collection: str, filter: VectorFilter) -> None: ...

    def drop_all(self) -> None:
        """Remove this memory's collections (only those with its prefix)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Embedder(Protocol):
    dim: int
    precision: str  # the model that runs: "int8" (its quantised copy) or "fp32"; shown by health and benches

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_one(self, text: str) -> list[float]: ...


# The newest run durations a tool version keeps, for its adaptive timeout's p95.
DURATIONS_KEPT = 50


class ToolStats(BaseModel):
    quality: float = 1.0
    successes: int = 0
    failures: int = 0
    # Refusals of an input by this version, counted apart (FailureCount): the caller's mistake
    # (selection/job_record.py `does_the_job`), or, as a fallback, the input of another tool's job.
    # They lower no quality, nor raise what later failures cost (QA ops: ten of them made a tool's
    # next crash cost 0.20, not 0.10).
    refused_inputs: int = 0
    # Of the caller's mistakes, those since its last success: a version that refuses every input
    # may be broken rather than its callers all wrong (selection/job_record.py `refuses_everything`).
    refused_in_a_row: int = 0
    # Recent run durations (the DURATIONS_KEPT newest), summarised for the attempt's adaptive
    # timeout (selection/timeouts.py): how many are kept, and their 95th percentile by nearest rank
    # (None without runs).
    recent_runs: int = 0
    recent_p95_ms: float | None = None


class FailureApplied(BaseModel):
    applied: bool  # False when this attempt id had been applied before
    quality: float
    failures: int
    quality_before: float | None = None  # the quality this failure took off from (None: not known)

    @property
    def cost_bp(self) -> int:
        """The quality this failure took off, in basis points (0 when it was applied before)."""
        if not self.applied or self.quality_before is None:
            return 0
        return quality_to_bp(self.quality_before) - quality_to_bp(self.quality)

    def fell_below(self, threshold: float) -> bool:
        """Whether this failure took the quality from at least `threshold` to under it."""
        return self.applied and self.quality < threshold and (self.quality_before is None or self.quality_before >= threshold)


class SuccessesSeen(BaseModel):
    """What a refit of the tool classifier would read, as seen from outside (workers/tool_classifier.py
    `successes_seen`): while it looks the same, the last refit's verdict stands."""

    successes: int  # successful execution records, up to FITTEST_CLASSIFIER_MAX_RECORDS
    newest: float  # the newest one's time
    namespaces: str  # a digest of the namespaces registered
    max_namespaces: int


class ClassifierFit(BaseModel):
    """What a refit of the tool classifier read and did (workers/tool_classifier.py `refit`)."""

    successes: int | None = None  # the successes it learned from
    namespaces: int | None = None  # the namespaces registered
    newest: float | None = None  # the newest success's time
    seen: SuccessesSeen | None = None
    revision: str | None = None  # of the classifier fitted (None: none was)
    fit_s: float | None = None
    namespaces_fitted: int | None = None
    unchanged: str | None = None  # why it fitted nothing


class RetrainEvidence(BaseModel):
    """What a retrain read and found (selection/learner.py `retrain`), stored with the weights and
    kept for the latest retrain that stored nothing: what `fittest weights` shows and explains."""

    records: int = 0  # the window's records learned from
    set_aside: int = 0  # records left out as a caller's mistake
    success_rate: float | None = None
    correlations: dict[str, float] = Field(default_factory=dict)  # of each SPARC component with success
    noise: float | None = None  # the correlation `records` may show by chance alone
    min_records: int | None = None
    unchanged: str | None = None  # why the weights stayed as they were
    classifier: ClassifierFit | None = None


class SelectionWeights(BaseModel):
    """Weights of the SPARC components; versioned so selection can tell when they changed."""

    version: int = 0
    weights: dict[str, float] = Field(
        default_factory=lambda: {
            "phase": 0.2,
            "language": 0.2,
            "complexity": 0.2,
            "task_type": 0.2,
            "history": 0.2,
        }
    )
    evidence: RetrainEvidence = Field(default_factory=RetrainEvidence)
    updated_at: float = 0.0
    # Revision of the tool classifier (selection/classifier.py) stored with these weights; "" none.
    classifier: str = ""


class RetrainNote(BaseModel):
    """What the latest retrain that stored nothing found: why the weights (and the tool classifier)
    stayed as they were (`evidence.unchanged`), so that `fittest weights` can say it."""

    at: float  # when it ran (s since the epoch)
    evidence: RetrainEvidence = Field(default_factory=RetrainEvidence)


# A circuit breaker's state: "half_open" once an open breaker's cool-down has passed (it may be tried
# again; the next outcome closes or re-opens it). The store does not limit how many probes go.
BreakerState = Literal["closed", "open", "half_open"]
# What one outcome left a breaker at: "recovered" is a success that closed it after it had opened (the
# version's probe, or a run begun before it opened): the failures that opened it were an outage.
BreakerOutcome = Literal["closed", "open", "recovered"]


class StateVersions(NamedTuple):
    """What a reader compares to know whether what it cached is still what the store holds."""

    # grows with every change selection ranks by: quality, promotions, weights, breakers, newcomers,
    # refusals, and the records it reads (a person's judgement, the vector memory's pruning)
    state: int
    promotions: int  # grows with every change of a promotion
    weights: int  # the version of the current weights (0: the defaults)
    # The life of the store the counters count in. A store that lost its keys (a Redis restart with
    # nothing on disk, `clear`) counts again from 0 under a new epoch, so a version read before the
    # loss is never taken for the same number reached after it.
    epoch: str
    judgements: int = 0  # grows with every person's judgement (0: selection need not look for any)


class QualityScores(Protocol):
    """Each tool version's quality and its counters of successes and failures."""

    def stats(self, keys: Sequence[str]) -> dict[str, ToolStats]: ...

    def all_stats(self) -> dict[str, ToolStats]:
        """`stats` of every tool version the store has counted or set a quality for: what metrics
        and the report show, not knowing the catalog."""
        ...

    def set_quality(self, key: str, quality: float) -> None: ...

    def mark_failure(self, key: str, attempt_id: str, severity: Severity,
                     counted: FailureCount = FailureCount.failure) -> FailureApplied:
        """Count one failed attempt once per attempt id (not at all when it counted as a success:
        an attempt has one outcome, whichever is applied first), as `counted` says: a failure demotes the
        version by its severity; a refused input that was the caller's mistake, or a fallback's
        refusal of another tool's job, is counted in `refused_inputs` only (not in `failures`, from
        whose count the penalty of later failures grows), and the caller's mistake in
        `refused_in_a_row` too (`refuses_everything`)."""
        ...

    def forgive_failures(self, key: str, failures: Sequence[tuple[str, int]]) -> int:
        """Give back what failures of `key` cost (attempt id, the quality bp it took off when it was
        counted: `FailureApplied`), each once per attempt id: its quality rises by that cost, at
        most full, and `failures` falls by one, so later failures cost the extra of the count
        without it; the number given back now. A recovered outage's (workers/outage.py)."""
        ...

    def record_successes(self, attempts: Sequence[tuple[str, str]]) -> list[bool]:
        """Count each (key, attempt id) success once per attempt id (not when it counted as a
        failure), in one round trip; per pair,
        in order, False when it was counted before."""
        ...

    def judge_output(self, key: str, call_id: str, sentiment: Sentiment) -> bool:
        """A person's judgement of what `key` gave in call `call_id` (a success: a failed attempt
        gave nothing to judge), in its counters: an output judged wrong counts as a failure, not a
        success, and one judged right again as a success once more; the same judgement sent again
        changes nothing. Quality stays as it was, and the penalty of later failures too: it grows
        with the failures that ran, not with outputs judged wrong (QA ops: one judgement cost a
        version 0.05 more at its 5th timeout). True when the counters changed."""
        ...


class Promotions(Protocol):
    """Which version each namespace serves, and how that changed."""

    def promotion(self, namespace: str) -> Promotion | None: ...

    def promote(self, promotion: Promotion) -> None:
        """Set the namespace's promotion and append it to its history, atomically."""
        ...

    def promote_if(self, promotion: Promotion, expect_version: str | None, expect_status: Sequence[str]) -> bool:
        """`promote`, but only while the current promotion is for `expect_version` in one of
        `expect_status` (None: while the namespace has no promotion; compare-and-set); False when
        it changed meanwhile."""
        ...

    def promotions(self, namespaces: Sequence[str]) -> dict[str, Promotion | None]:
        """The current promotion of each namespace (None when never promoted), in one round trip:
        selection asks for every namespace its candidates come from."""
        ...

    def promotion_history(self, namespace: str) -> list[Promotion]: ...

    def all_promotion_histories(self) -> dict[str, list[Promotion]]:
        """`promotion_history` of every namespace ever promoted: what metrics and the report show."""
        ...


class Newcomers(Protocol):
    """The tools added to a running system: they compete with incumbents that have outcomes where
    they have none, so selection gives them a trial (selection/serving.py `newcomer_to_try`)."""

    def note_namespaces(self, namespaces: Sequence[str], now: float) -> list[str]:
        """Remember these namespaces as served; those new to a store that knew others already are
        newcomers from `now` (returned). The namespaces of a first catalog are not newcomers."""
        ...

    def renew_newcomers(self, namespaces: Sequence[str], now: float) -> None:
        """Make these namespaces, known already, newcomers again from `now`: their original was
        replaced by another version, which has no outcomes yet (evolution/promotions.py
        `renewed_originals`). Moves the promotions version, as a newcomer does."""
        ...

    def newcomers(self) -> dict[str, float]:
        """Every newcomer namespace and when it came; a change moves the promotions version."""
        ...


class WeightsStore(Protocol):
    """The learned SPARC weights with their history, and the tool classifier fitted with them."""

    def weights(self) -> SelectionWeights: ...

    def set_weights(self, weights: SelectionWeights, classifier: str | None = None) -> SelectionWeights:
        """Store new weights with the next version number and keep the old ones in history;
        `classifier` (a refitted tool classifier as text, whose revision `weights.classifier` names)
        replaces the stored one in the same step, so no reader sees one without the other."""
        ...

    def classifier(self) -> str | None:
        """The tool classifier stored with the latest weights that had one (None: never fitted)."""
        ...

    def weights_history(self, limit: int = 20) -> list[SelectionWeights]: ...

    def note_retrain(self, note: RetrainNote) -> None:
        """Keep `note`, of a retrain that stored nothing new, in place of the one before."""
        ...

    def last_retrain(self) -> RetrainNote | None:
        """The note of the latest retrain that stored nothing new (None: there was none)."""
        ...


class StateVersioning(Protocol):
    """The counters a reader compares to know whether what it cached is still what the store holds."""

    def versions(self) -> StateVersions:
        """The state version (the selection cache's key) with the promotions' and the weights' own
        counters, in one read: a selector keeps what it read of promotions and weights across the
        many quality changes that move only the state version."""
        ...

    def note_judgement(self) -> None:
        """A person's judgement was stored (in the vector memory): move the state version on, so
        selection sees it at once, and count it, so that selection looks for people's judgements
        apart from the calls' outcomes once there is one."""
        ...

    def note_memory_change(self) -> None:
        """Records selection reads were changed in the vector memory (an outage's failures
        forgiven): move the state version on, so that no cached search hides the change."""
        ...

    def clear(self) -> None:
        """Remove every key of this store's prefix."""
        ...


class Breakers(Protocol):
    """Circuit breakers and recent run durations per tool version (adaptive timeouts)."""

    def stats_and_breakers(self, keys: Sequence[str]) -> tuple[dict[str, ToolStats], dict[str, BreakerState]]:
        """`stats` and the state of each key's circuit breaker ("closed" when never fed) in one
        round trip (what selection asks); these stats also summarise the recent durations
        (`recent_runs`, `recent_p95_ms`)."""
        ...

    def record_run(self, key: str, ms: float, success: bool | None, threshold: int, cooldown_s: float,
                   attempt_id: str | None = None) -> BreakerOutcome | None:
        """After one run, in one round trip: append its duration, keeping the DURATIONS_KEPT most
        recent, and feed its outcome to the breaker unless `success` is None (an outcome that says nothing
        about the tool): `threshold` consecutive failures open the breaker for `cooldown_s` (a
        failure once it is half open re-opens it); a success closes it. With `attempt_id` the
        breaker is fed at most once per attempt, and a repeated attempt returns what the first
        returned (a probe run again after its worker died still recovered the tool). Returns the
        breaker's new state, "recovered" for a success that closed it after it had opened (None
        when it was not fed)."""
        ...


class Locks(Protocol):
    """Named locks with an owner and an expiry (one evolution per namespace, a half-open probe)."""

    def acquire_lock(self, name: str, owner: str, ttl_s: float, *, reclaim: bool = False) -> bool:
        """Take the lock for `ttl_s` seconds; False while anyone (the same owner too) holds it.
        With `reclaim`, `owner` takes it also when it holds it already, for `ttl_s` from now: for
        an owner that is one piece of work, whose earlier run was killed holding the lock."""
        ...

    def release_lock(self, name: str, owner: str) -> bool:
        """Release the lock only if `owner` holds it; False otherwise."""
        ...


@runtime_checkable
class StateStore(QualityScores, Promotions, Newcomers, WeightsStore, StateVersioning, Breakers, Locks, Protocol):
    """The whole state store, one interface per concept above; every read-modify-write is atomic
    in the store. A backend implements all of them; a consumer types the concepts it uses."""

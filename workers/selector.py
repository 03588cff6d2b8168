"""Gathers what the stores know about the candidates of a call and lets the policy rank them.

This is where selection meets the services: the embedder, the vector memory and the state store.
What it hands the policy is plain evidence (selection/evidence.py). The points it searches for
the tools' texts are written by the tool index (workers/tool_index.py), which it owns.
"""

from __future__ import annotations

import logging
import marshal
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from evolution.descriptions import MANIFEST_VARIANT
from evolution.models import removal_told
from evolution.served_version import in_share, served_original, served_version, served_versions, withdrawn_versions
from selection.cache import TTLCache, VersionedValue
from selection.classifier import ToolClassifier
from selection.call_endings import HELD_BACK_WHEN_PLANNED
from selection.context import ContextFeatures, analyse, context_typos
from selection.crowded import CROWDED_SIMILARITY, with_the_crowded_out, with_the_doers_crowded_out
from selection.evidence import CandidateEvidence
from selection.feedback import MIN_SIMILARITY, judged_outputs, points_by_tool, similarity_weight
from selection.job_record import (does_such_jobs_here, does_the_job, may_change_things_for_it, namespace_did_the_job, proven,
                                  refuses_everything)
from selection.lexical import LexicalIndex, version_text
from selection.manifest import ToolManifest, split_key, tool_key
from selection.models import CallPlan, CallRequest, Candidate, Promotion, Source
from selection.policies import get_policy
from selection.ports import (
    EXECUTIONS,
    FAILURES,
    FEEDBACK,
    FORGIVEN,
    SUCCESSES,
    TOOLS,
    BreakerState,
    Match,
    SelectionWeights,
    ToolStats,
    VectorFilter,
    VectorHit,
)
from selection.serving import (OUTAGE_CLASSES, ServedVersions, best_matches, breaker_probe, evolved_first, explored_first,
                               newcomer_to_try, served_first)
from selection.sparc import declared_against, declared_for, sparc_score
from selection.timeouts import earned_floor, timeout_from_p95
from workers.degraded import registry_similarities
from workers.outage import cosines
from workers.store_failures import is_store_failure
from workers.tool_classifier import stored_classifier
from workers.tool_index import ToolIndex
from workers.variants import VariantBook, variant_point_id

if TYPE_CHECKING:
    from selection.registry import ToolRegistry
    from workers.runtime import Runtime
    from workers.settings import Settings

log = logging.getLogger("fittest.selection")

SEARCH_DEPTH = 4  # tool points searched per candidate kept (descriptions and examples)
SUCCESS_NEIGHBOURS = 32  # successful past scenarios consulted per selection (their tools become candidates)
FEEDBACK_LIMIT = 64  # feedback entries of the candidates consulted per selection
FAILURE_LIMIT = 64  # failure records of the candidates consulted per selection

# The payload keys each search of a plan reads: a feedback or failure point also stores its
# scenario and reason, which selection never looks at and which the store would copy for each hit.
TOOL_FIELDS = ("tool",)
EXECUTION_FIELDS = ("tool", "name", "unconfirmed", "named", "call_id")  # call_id: a judged call counts once (`_with_outcomes`)
FAILURE_FIELDS = ("tool", "error_class")
FEEDBACK_FIELDS = ("tool", "value", "positive", "timestamp", "source", "call_id", "replaced")
# The tool points no search may match: a deprecated version's, a removed one's, and an example or a
# description its manifest no longer has (workers/tool_index.py: the port deletes by payload only).
RETIRED = Match(key="deprecated", any_of=[True])
# Feedback the calls' outcomes gave, and of it, what a person's judgement of the same call took the
# place of (no longer in force).
OUTCOMES = Match(key="source", any_of=["outcome"])
REPLACED = Match(key="replaced", any_of=[True])


def attempt_timeout(settings: Settings, registry: ToolRegistry, manifest: ToolManifest, stats: ToolStats) -> float:
    """The hard timeout of an attempt of `manifest` (selection/timeouts.py), from its recent runs as
    the state store summarises them. Selection puts it in the plan; the executor works it out by
    the same rule for a plan without one (degraded, or queued by an older worker)."""
    parent = registry.get(tool_key(manifest.name, manifest.parent_version)) if manifest.parent_version else None
    floor = earned_floor(manifest.timeout_s, parent.timeout_s if parent else None, manifest.side_effects)
    return round(timeout_from_p95(stats.recent_p95_ms, stats.recent_runs, manifest.timeout_s,
                                  settings.min_timeout_s, settings.max_timeout_s, floor_s=floor), 3)


class Selector:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.settings = rt.settings
        self.policy = get_policy(self.settings.policy, self.settings.failure_similarity)
        self.rng = random.Random()
        self.variants = VariantBook(rt)
        self.index = ToolIndex(rt, on_change=self._index_changed)
        # Vector-memory answers by (search, state version): a repeated scenario is not searched again
        # while nothing that ranks it changed; the TTL bounds how old the memory it saw can be.
        self.cache: TTLCache[tuple[float, bytes]] = TTLCache(self.settings.selection_cache_ttl_s, maxsize=4096)
        self._local = threading.local()
        # The weights and promotions read last, by the (epoch, version) they were read at (`_version`).
        self._weights: VersionedValue[SelectionWeights] = VersionedValue()
        self._classifier: VersionedValue[ToolClassifier | None] = VersionedValue()  # by the revision the weights name
        self._promotions: VersionedValue[dict[str, Promotion | None]] = VersionedValue()
        self._newcomers: VersionedValue[frozenset[str]] = VersionedValue()
        self._withdrawn: VersionedValue[dict[str, frozenset[str]]] = VersionedValue()
        self._lexical: tuple[tuple[int, int, int], LexicalIndex] | None = None  # by (registry, its size, variants' revision)

    def _index_changed(self) -> None:
        """The tool index changed: searches cached before it would leave out the versions it added
        for a TTL, or name versions as they were; the word index is rebuilt by the thread that
        changed it, once, rather than in the next call."""
        self.cache.clear()
        self.lexical_index()

    def lexical_index(self) -> LexicalIndex:
        """The word index of the registry's versions and of their description variants (by variant
        point id; `version_text`), as the variants were last read. Rebuilt when the registry changes
        or a variant's text does; 10,000 versions take ~0.25 s."""
        registry, variants = self.rt.registry, self.variants
        signature = (id(registry), registry.revision, variants.revision)
        if self._lexical is None or self._lexical[0] != signature:
            texts = {m.key: version_text(m) for m in registry.all()}
            for point_id, text in variants.texts.items():
                if (m := registry.get(point_id.rpartition("#")[0])) is not None:
                    texts[point_id] = version_text(m, text)
            self._lexical = (signature, LexicalIndex(texts))
        return self._lexical[1]

    # ----------------------------------------------------------------- planning
    def plan(self, request: CallRequest) -> CallPlan:
        context = analyse(request.scenario, request.context, request.input)
        features = context.model_dump(mode="json")
        self._local.versions = versions = self.rt.state.versions()
        self._local.held_back = []
        self._local.held_back_match = 0.0
        self._local.half_open = set()
        self._local.cached_at = None  # when the oldest cached search this plan read was made
        degraded: list[str] = []
        named_unknown = bool(request.namespace and not request.version and self.rt.registry.original(request.namespace) is None)
        # A namespace no tool has names none: the call is ranked by its scenario alone, by every rule
        # a call that names none is (review 50: no newcomer, probe or best match again was tried first).
        ruled = request.model_copy(update={"namespace": None}) if named_unknown else request
        try:
            evidence = [e for e in self._evidence(ruled, features, degraded) if may_change_things_for_it(e, ruled.namespace)]
            served = self._served(ruled, evidence)
            newcomer = newcomer_to_try(ruled, evidence, self.newcomers(), self.settings.trial_successes,
                                       self._local.held_back_match, served)
            probe = breaker_probe(ruled, evidence, self._local.half_open, served)
        finally:
            self._local.versions = None
        share = self.settings.trial_share
        passed: str | None = None  # a newcomer this call could have tried first, but its share did not draw
        if newcomer is not None and not in_share(request.call_id, f"newcomer:{newcomer.manifest.name}", share):
            passed, newcomer = newcomer.key, None
        keep = max(self.settings.max_candidates, request.max_attempts)
        # The retry after an evolution moves the new version to the front, wherever it placed, a
        # namespace's served version moves before its other versions, a call's named namespace goes
        # first (QA resilience: one ranked 9th after a failure was cut, and the call said no tool of
        # that name was ranked), and a newcomer on trial goes first: they need the whole ranking.
        several = len({e.manifest.name for e in evidence}) < len(evidence)
        whole = request.after_evolution or several or newcomer is not None or bool(ruled.namespace)
        against = {e.key for e in evidence if declared_against(e.manifest, context)}
        # Tried after the others that do such jobs, not after tools that do other jobs: those go
        # with them, in the policy's order (QA integration M1: for a call stating rust, two linters
        # 0.82 similar came after five text tools 0.27 similar, and neither ran in 5 attempts).
        last = (against | {e.key for e in evidence if not declared_for(e.manifest, context) and not does_such_jobs_here(e)}
                if against else set())
        ranked = self.policy.rank(evidence, self.rng, limit=None if whole else keep, last=last)
        for c in ranked:
            if c.key in against and c.breakdown is not None:
                c.breakdown.rationale += (f"; ranked with the tools that do other jobs, after those that do such jobs: it declares "
                                          f"none of the languages the call states ({', '.join(context.languages)})")
        ranked = evolved_first(ruled, served_first(ruled, ranked, served), served)
        best = best_matches(evidence, self._local.held_back_match)
        ranked = explored_first(ruled, ranked, evidence, share, lambda salt: in_share(request.call_id, salt, share),
                                newcomer=newcomer.key if newcomer else None, passed=passed, probe=probe,
                                half_open=self._local.half_open, best=best, served=served)
        timeouts = {e.key: e.timeout_s for e in evidence}
        doers = {e.key for e in evidence if does_the_job(e)}
        namespace_doers = {e.key for e in evidence if namespace_did_the_job(e)}
        tried_and_true = {e.key for e in evidence if proven(e, ruled.namespace, best)}
        refusing = {e.key for e in evidence if refuses_everything(e)}
        for c in ranked:
            c.timeout_s = timeouts.get(c.key)
            c.does_the_job, c.matches_best, c.refuses_everything = c.key in doers, c.key in best, c.key in refusing
            c.namespace_did_the_job, c.proven = c.key in namespace_doers, c.key in tried_and_true
            c.parent_http = self.rt.registry.http_root(c.manifest)
        return CallPlan(
            request=request,
            candidates=ranked[:keep],
            variants=self.variants.served_for(request, [c.key for c in ranked[:keep]]),
            features=features,
            policy=self.policy.name,
            weights_version=versions.weights,
            degraded=degraded,
            held_back=self._local.held_back,
            held_back_match=self._local.held_back_match,
            notes=self._notes(request, ranked, self._local.held_back, named_unknown),
            named_unknown=named_unknown,
            probe=probe if ranked and ranked[0].key == probe else None,
            evidence_age_s=None if self._local.cached_at is None else round(time.monotonic() - self._local.cached_at, 1),
        )

    def removal(self, name: str | None) -> str:
        """When a tool none of whose versions is served was removed, and why, as its changelog says
        ("" when it says nothing of it, or Redis does not answer: the call goes on without it)."""
        if not name:
            return ""
        try:
            return removal_told(self.rt.evolution.changelog(name), name)
        except Exception:  # noqa: BLE001 - a note, not worth failing a call for
            return ""

    def _notes(self, request: CallRequest, ranked: list[Candidate], held_back: list[str], named_unknown: bool) -> list[str]:
        """What the caller should know of this call that did not stop it. A namespace no tool has
        is a typo more often than not, and a scenario call goes on without it (QA: a service that
        sent namespace "vat_prize" was served by vat_price with nothing said); so is a context key
        nothing reads but close to one that it reads. A namespace whose versions are all held back
        by their breakers is served by other tools, which only the CLI said (QA evolution L3: a
        client's call got another tool's output and empty notes); so is one whose versions are all
        deprecated (QA integration M5: the CLI alone warned, of "no tool named" a tool that exists)."""
        notes = []
        versions = self.rt.registry.versions(request.namespace) if request.namespace and not request.version else []
        if named_unknown:
            told = self.removal(request.namespace) or self.rt.registry.did_you_mean(request.namespace or "")
            notes.append(f"no tool named '{request.namespace}'{f' ({told})' if told else ''}: the call was ranked by its "
                         "scenario alone")
        elif versions and all(m.deprecated for m in versions):
            named = " or ".join(f"{m.key}" for m in versions[-3:])
            notes.append(f"every version of '{request.namespace}' is deprecated, so none is offered (a call naming "
                         f"one, {named}, runs it): the call was ranked by its scenario alone")
        held = [key for key in held_back if split_key(key)[0] == request.namespace]
        if held and ranked and not any(c.manifest.name == request.namespace for c in ranked):
            notes.append(f"{', '.join(held)} {HELD_BACK_WHEN_PLANNED}")
        return notes + self._exclude_typos(request.exclude) + context_typos(request.context)

    def _exclude_typos(self, exclude: list[str]) -> list[str]:
        """A version `exclude` names that no tool has excludes nothing: said, as a namespace no tool
        has is (QA 59a L4: `sort_numbers@7.0.0` passed with no word, and sort_numbers ran)."""
        notes = []
        for key in exclude:
            if self.rt.registry.get(key) is not None:
                continue
            name = split_key(key)[0]
            has = ", ".join(m.version for m in self.rt.registry.versions(name))
            notes.append(f"exclude names {key}, which no tool is, so it excludes nothing"
                         + (f" ({name} has {has})" if has else f" (no tool named '{name}')"))
        return notes

    def _evidence(self, request: CallRequest, features: dict[str, Any], degraded: list[str]) -> list[CandidateEvidence]:
        """What the stores know; when the embedder or the vector memory fails, what the registry and
        Redis know (workers/degraded.py), and why, appended to `degraded`."""
        try:
            return self.gather(request, self.rt.embedder.embed_one(request.scenario), features)
        except Exception as exc:
            if not is_store_failure(exc):
                raise
            degraded.append(f"vector memory unavailable ({type(exc).__name__}: {str(exc)[:300]}); "
                            "ranked by registry and Redis scores only, without similarity, feedback or failure memory")
            log.warning("selection degraded: %s", exc, extra={"event": "selection_degraded", "call_id": request.call_id})
            return self.gather(request, None, features)

    def gather(self, request: CallRequest, vector: list[float] | None, features: dict[str, Any]) -> list[CandidateEvidence]:
        """`vector` None: the vector memory is not asked (degraded selection)."""
        registry = self.rt.registry
        if vector is not None:
            similarity = self._similarities(request, vector)
        else:
            similarity = registry_similarities(request, registry, self.lexical_index())
            if request.min_similarity is not None:  # no cosine to hold the call's floor to: only what it names (review)
                similarity = {key: score for key, score in similarity.items() if split_key(key)[0] == request.namespace}
        successes = self._successes(request, vector, similarity) if vector is not None else []
        sources: dict[str, Source] = {}
        promotions = self.promotions(
            ([request.namespace] if request.namespace else []) + [split_key(k)[0] for k in similarity]
        ) if request.use_evolved and not request.version else {}

        if request.namespace:
            versions = registry.versions(request.namespace)
            if request.version:
                versions = [m for m in versions if m.version == request.version]
                sources.update({m.key: "version" for m in versions})
            else:
                original = registry.original(request.namespace)
                if original is not None:
                    sources[original.key] = "original"
                served = self._promoted(request.namespace, request, promotions) if request.use_evolved else None
                if served is not None:
                    sources[served.key] = "promoted"
                for m in versions:
                    sources.setdefault(m.key, "semantic")
        # Semantic matches (all of a scenario-only call; fallbacks of a namespace call). Within a
        # namespace the promoted version is served in place of the version that matched.
        if not request.version:
            best_by_ns: dict[str, float] = defaultdict(float)
            for key, sim in similarity.items():
                name = split_key(key)[0]
                best_by_ns[name] = max(best_by_ns[name], sim)
            for key in list(similarity):
                name = split_key(key)[0]
                served = self._promoted(name, request, promotions) if request.use_evolved else None
                if served is not None and served.key != key and served.key not in request.exclude:
                    similarity[served.key] = max(similarity.get(served.key, 0.0), best_by_ns[name])
                    sources.setdefault(served.key, "semantic")
                sources.setdefault(key, "semantic")

        wanted = set(request.tags)
        # A call that names a tool with side effects wants that change made, by that tool: another
        # one's fallback would make another change (QA 63e: calls naming a refund tool held back by
        # its breaker were served by another team's refund ledger, which wrote them).
        own = bool(request.namespace) and registry.has_side_effects(request.namespace or "")
        manifests = {  # a deprecated version is offered only to a call that names it by version (its manifest's promise)
            k: found
            for k in sources
            if k not in request.exclude and (found := registry.get(k)) is not None
            and (not found.deprecated or sources[k] == "version") and wanted <= set(found.tags)
            and (not own or found.name == request.namespace)
        }
        if not manifests:
            return []
        stats, breakers = self.rt.state.stats_and_breakers(list(manifests))
        blocked = self._breaker_blocked(breakers)
        self._local.half_open = {k for k, state in breakers.items() if state == "half_open"}
        # Best match first: a call whose tools tried all refused its input evolves the first of these.
        self._local.held_back = sorted(blocked & set(manifests), key=lambda k: (-similarity.get(k, 0.0), k))
        self._local.held_back_match = max((similarity.get(k, 0.0) for k in self._local.held_back
                                           if sources[k] == "semantic"), default=0.0)
        keys = [k for k in manifests if k not in blocked]
        failures, outages = self._failure_similarities(keys, vector) if vector is not None else ({}, {})
        evidence = [
            CandidateEvidence(
                manifest=manifests[k],
                source=sources[k],
                similarity=similarity.get(k, 0.0),
                quality=stats[k].quality,
                successes=stats[k].successes,
                failures=stats[k].failures,
                refused_in_a_row=stats[k].refused_in_a_row,
                failure_similarities=failures.get(k, []),
                outage_similarities=outages.get(k, []),
                timeout_s=attempt_timeout(self.settings, self.rt.registry, manifests[k], stats[k]),
            )
            for k in keys
        ]
        # Words are matched against the description each tool is served in this call, as the embedding is.
        variants = self.variants.served_for(request, keys)
        documents = {k: k if variants.get(k, MANIFEST_VARIANT) == MANIFEST_VARIANT else variant_point_id(k, variants[k])
                     for k in keys}
        lexical = self.lexical_index().scores(request.scenario, documents.values())
        for e in evidence:
            e.lexical = round(lexical[documents[e.key]], 4)
        # The classifier ranks the candidates found; it finds none of its own: making the 8 namespaces
        # it scores highest candidates too changed nothing on the selection bench but the time.
        if vector is not None and (classifier := self.classifier()) is not None:
            scores = classifier.predict_one(vector, [e.manifest.name for e in evidence])
            for e in evidence:
                e.classifier_score = round(classifier.score(scores, e.manifest.name, e.similarity), 4)
        return self._with_outcomes(evidence, successes, vector, features)

    @staticmethod
    def _breaker_blocked(breakers: dict[str, BreakerState]) -> set[str]:
        """Versions whose circuit breaker keeps them out of this call: every open one. A half-open one
        stays a candidate: its single probe is taken by the call that comes to run it (the executor,
        workers/tasks/execution.py), not by every call that ranks it, which held it back from all
        other calls for a cool-down even when the call that took it never ran it."""
        return {key for key, state in breakers.items() if state == "open"}

    def _promoted(self, namespace: str, request: CallRequest, promotions: dict[str, Promotion | None]) -> ToolManifest | None:
        """The version this call is served first: the promoted one, or while it is on trial, it for
        a share of the calls (always for the retry of a call that evolved it) and its parent for
        the rest (evolution/served_version.py)."""
        promotion = promotions.get(namespace)
        version = served_version(promotion, request.call_id, request.after_evolution, self.settings.trial_share)
        if version is None:
            original = self.rt.registry.original(namespace)
            recorded = served_original(promotion, self.rt.registry, namespace)
            if recorded is None or (original is not None and recorded == original.version):
                return None  # the registry's original, served as such
            version = recorded
        return self.index.ensure_version(namespace, version)

    def _similarities(self, request: CallRequest, vector: list[float]) -> dict[str, float]:
        """Best cosine per tool version over its description and examples."""
        self.variants.snapshot()  # embeds description variants added since the last look, before searching
        must = [Match(key="tags", any_of=[t]) for t in request.tags]
        if request.namespace and request.version:
            must.append(Match(key="tool", any_of=[tool_key(request.namespace, request.version)]))
        must_not = [RETIRED]
        if request.exclude:
            must_not.append(Match(key="tool", any_of=list(request.exclude)))
        limit = max(self.settings.max_candidates, request.max_attempts) * SEARCH_DEPTH
        hits = self._search(
            TOOLS, vector, limit=limit, filter=VectorFilter(must=must, must_not=must_not), fields=TOOL_FIELDS
        )
        if request.namespace and not request.version:
            hits += self._search(
                TOOLS,
                vector,
                limit=limit,
                filter=VectorFilter(must=[*must, Match(key="name", any_of=[request.namespace])], must_not=must_not),
                fields=TOOL_FIELDS,
            )
        hits = self.variants.filter_hits(hits, request)
        floor = self.similarity_floor(request)
        best: dict[str, float] = {}
        for hit in hits:
            named = request.namespace is not None and split_key(hit.payload["tool"])[0] == request.namespace
            if hit.score < floor and not named:
                continue  # a fallback that has nothing to do with the job is no fallback
            # The named tool's versions are candidates whatever their match; kept, their cosine is
            # what `explain` shows and what scores them (below the floor it was taken for 0).
            key = hit.payload["tool"]
            best[key] = max(best.get(key, 0.0), hit.score)
        return best

    def _failure_similarities(self, keys: list[str], vector: list[float]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """The similarities of each version's failures nearby, and of those among them that were outages."""
        def search(among: list[str]) -> list[VectorHit]:
            return self._search(FAILURES, vector, limit=FAILURE_LIMIT,
                                filter=VectorFilter(must=[Match(key="tool", any_of=among)], must_not=[FORGIVEN]),
                                score_threshold=self.settings.failure_similarity, fields=FAILURE_FIELDS)

        hits = with_the_crowded_out(search(list(keys)), FAILURE_LIMIT, keys, search)
        out: dict[str, list[float]] = defaultdict(list)
        outages: dict[str, list[float]] = defaultdict(list)
        for hit in hits:
            out[hit.payload["tool"]].append(hit.score)
            if hit.payload.get("error_class") in OUTAGE_CLASSES:
                outages[hit.payload["tool"]].append(hit.score)
        return out, outages

    # ----------------------------------------------------------------- what outcomes taught
    def similarity_floor(self, request: CallRequest) -> float:
        """How similar to the scenario a tool's description, or a success of it, must be for the tool
        to be a candidate: FITTEST_MIN_SIMILARITY, or the call's own `min_similarity` when higher."""
        floor = self.settings.min_similarity
        return floor if request.min_similarity is None else max(floor, request.min_similarity)

    def _search(self, collection: str, vector: list[float], limit: int = 10, filter: VectorFilter | None = None,
                score_threshold: float | None = None, fields: tuple[str, ...] | None = None) -> list[VectorHit]:
        """`memory.search`, through the selection cache."""
        key = (collection, hash(tuple(vector)), limit, filter.model_dump_json() if filter else "", score_threshold, fields)
        return self._cached(key, lambda: self.rt.memory.search(collection, vector, limit=limit, filter=filter,
                                                                score_threshold=score_threshold, fields=fields))

    def _cached(self, key: tuple[Any, ...], read: Callable[[], list[VectorHit]]) -> list[VectorHit]:
        """What `read` finds in the vector memory, answered from the selection cache for the same
        `key` at the same state version (set by `plan` for its thread; outside a plan nothing is
        cached). Every change selection must see at once moves the state version on."""
        versions = getattr(self._local, "versions", None)
        if versions is None:
            return read()
        key = (*key, versions.epoch, versions.state)
        cached = self.cache.get(key)
        if cached is not None:
            made_at, data = cached
            self._local.cached_at = min(made_at, self._local.cached_at or made_at)
            return [VectorHit(*hit) for hit in marshal.loads(data)]
        hits = read()
        # Kept as marshalled bytes, which the garbage collector never looks at: as objects, the
        # thousands of cached hits (and their payload dicts) were walked by every young and older
        # collection, which then took 7-200 ms in `fittest bench scale`.
        self.cache.put(key, (time.monotonic(), marshal.dumps([tuple(hit) for hit in hits])))
        return hits

    def _successes(self, request: CallRequest, vector: list[float], similarity: dict[str, float]) -> list[VectorHit]:
        """The successful past scenarios nearest to this one (EXECUTIONS). The tool versions that
        succeeded on one at least FITTEST_MIN_SIMILARITY similar join the candidates of a
        scenario-only call, with their description's similarity: what worked for similar jobs is
        worth trying even when its description does not say so."""
        def search(among: list[str] | None) -> list[VectorHit]:
            where = SUCCESSES if among is None else SUCCESSES.model_copy(
                update={"must": [*SUCCESSES.must, Match(key="tool", any_of=among)]})
            return self._search(EXECUTIONS, vector, limit=SUCCESS_NEIGHBOURS, filter=where, fields=EXECUTION_FIELDS)

        hits = with_the_crowded_out(search(None), SUCCESS_NEIGHBOURS, list(similarity), search)
        hits = with_the_doers_crowded_out(hits, SUCCESS_NEIGHBOURS, list(similarity), search)
        if request.namespace or request.version:
            return hits
        # The 32 nearest successes of a young system include jobs with nothing in common (QA: sorting
        # tools ran, and failed, for "reindent this javascript program", 0.09 similar to "sort these
        # numbers"): as for a description, a success less similar than FITTEST_MIN_SIMILARITY brings
        # nothing in. (At 0.5 the selection bench lost 2 points of resolved_within_5: the successes
        # 0.2-0.5 similar bring in the right tool where its description does not.)
        # Under a call's own floor, only a success that says the tool does such jobs brings it in: an
        # unconfirmed one is the weak match the floor keeps out (QA recheck N2: one call without it,
        # served by a 0.44 tool, let that tool past it from then on), and so is one of a call that
        # named the tool (QA live F4: one `--namespace` call of a 0.25 tool did the same).
        floor = self.similarity_floor(request)
        near = {h.payload["tool"] for h in hits if h.score >= floor
                and not (request.min_similarity is not None and (h.payload.get("unconfirmed") or h.payload.get("named")))}
        new = sorted(near - set(similarity) - set(request.exclude))
        if new:
            found = self._search(TOOLS, vector, limit=len(new) * SEARCH_DEPTH,
                                 filter=VectorFilter(must=[Match(key="tool", any_of=new)], must_not=[RETIRED]),
                                 fields=TOOL_FIELDS)
            for hit in self.variants.filter_hits(found, request):
                similarity[hit.payload["tool"]] = max(similarity.get(hit.payload["tool"], -1.0), hit.score)
        return hits

    def promotions(self, namespaces: list[str]) -> dict[str, Promotion | None]:
        """The namespaces' promotions, asked of Redis only for those not read at this promotions
        version: every change of a promotion moves it (promote.lua, promote_if.lua), while the
        quality changes of every outcome do not, so most calls find their candidates' promotions
        read by an earlier call."""
        known = self._promotions.get(self._version("promotions"), dict)
        missing = [ns for ns in dict.fromkeys(namespaces) if ns not in known]
        if missing:
            known.update(self.rt.state.promotions(missing))
        return {ns: known[ns] for ns in namespaces}

    def withdrawn(self, promotions: dict[str, Promotion | None]) -> dict[str, frozenset[str]]:
        """The versions of each promoted namespace that its promotions rolled back and none serves
        since (evolution/served_version.py `withdrawn_versions`), its history read again only when the
        promotions version moved, as `promotions` reads them."""
        known = self._withdrawn.get(self._version("promotions"), dict)
        for name, current in promotions.items():
            if current is not None and name not in known:
                known[name] = frozenset(withdrawn_versions(self.rt.state.promotion_history(name), current))
        return {name: known[name] for name, current in promotions.items() if current is not None}

    def newcomers(self) -> frozenset[str]:
        """The namespaces added to the running system (selection/serving.py `newcomer_to_try`),
        read again only when the promotions version moved, which marking one does."""
        return self._newcomers.get(self._version("promotions"), lambda: frozenset(self.rt.state.newcomers()))

    def weights(self) -> SelectionWeights:
        """The learner's current SPARC weights, read again only when their version moved."""
        return self._weights.get(self._version("weights"), self.rt.state.weights)

    def classifier(self) -> ToolClassifier | None:
        """The tool classifier the current weights name (None: off, or never fitted), read again only
        when they name another."""
        if not self.settings.tool_classifier:
            return None
        revision = self.weights().classifier
        return self._classifier.get(revision or "", lambda: stored_classifier(self.rt) if revision else None)

    def _version(self, of: Literal["promotions", "weights"]) -> tuple[str, int] | None:
        """The (epoch, version) of the promotions or the weights this call's plan read (`plan`), or
        None outside a plan: what a value read from the state store is kept by (VersionedValue)."""
        versions = getattr(self._local, "versions", None)
        return None if versions is None else (versions.epoch, getattr(versions, of))

    def _with_outcomes(self, evidence: list[CandidateEvidence], successes: list[VectorHit],
                       vector: list[float] | None, features: dict[str, Any]) -> list[CandidateEvidence]:
        """Add what outcomes taught about each candidate: successes of it and of its namespace
        nearby, its feedback score, and its SPARC score with breakdown and rationale."""
        if not evidence:
            return evidence
        nearby = self._feedback_nearby([e.key for e in evidence], vector) if vector is not None else []
        feedback = points_by_tool(nearby, self.settings.feedback_half_life_days * 86400.0)
        judged = judged_outputs(nearby)
        context = ContextFeatures.model_validate(features) if features else ContextFeatures()
        weights = self.weights().weights
        by_tool: dict[str, list[float]] = defaultdict(list)
        by_name: dict[str, list[float]] = defaultdict(list)
        doing: dict[str, list[float]] = defaultdict(list)
        doing_calls: dict[str, set[str]] = defaultdict(set)
        for h in successes:
            by_tool[h.payload.get("tool", "")].append(h.score)
            by_name[h.payload.get("name", "")].append(h.score)
            if not h.payload.get("unconfirmed"):
                doing[h.payload.get("tool", "")].append(h.score)
                doing_calls[h.payload.get("tool", "")].add(str(h.payload.get("call_id", "")))
        for e in evidence:
            key = e.key
            e.success_similarities = by_tool.get(key, [])
            # a confirmed success a person also judged right is one call that did the job, not two
            e.doing_similarities = doing.get(key, []) + [j.similarity for j in judged.get(key, [])
                                                         if not j.wrong and j.call_id not in doing_calls[key]]
            e.namespace_success_similarities = by_name.get(e.manifest.name, [])
            e.feedback_points = round(feedback.get(key, 0.0), 3)
            if key in judged:  # an output a person judged wrong is a failure there, as the learner counts it
                e.judged_outputs = judged[key]
                e.failure_similarities = e.failure_similarities + [j.similarity for j in judged[key] if j.wrong]
            sparc = sparc_score(
                e.manifest, context, weights,
                successes=sum(similarity_weight(s) for s in e.success_similarities),
                failures=sum(similarity_weight(s) for s in e.failure_similarities),
            )
            e.sparc, e.sparc_components, e.sparc_rationale = sparc.score, sparc.components, sparc.rationale
        return evidence

    def feedback_points(self, keys: list[str], vector: list[float]) -> dict[str, float]:
        """Feedback points (-50..50) per tool version from its stored feedback (FEEDBACK) near the
        scenario of `vector`; a version without any is left out."""
        return points_by_tool(self._feedback_nearby(keys, vector), self.settings.feedback_half_life_days * 86400.0)

    def _feedback_nearby(self, keys: list[str], vector: list[float]) -> list[VectorHit]:
        """The stored feedback of `keys` nearest the scenario of `vector`: FEEDBACK_LIMIT of the
        calls' outcomes in force, and FEEDBACK_LIMIT of people's judgements apart. In one search a
        job sent again and again filled the nearest with its repeats, in no order of time, and
        people's judgements lost their places to outcomes, and to the outcomes they replaced
        (QA X: past ~64 entries of one scenario, ten positive judgements left a score at -29.6,
        and negatives stopped counting). The state store counts judgements: until the first, one
        search of both does (the second cost ~0.5 ms of a selection's 9)."""
        def search(among: list[str], source: Literal["any", "outcome", "people"]) -> list[VectorHit]:
            tools = Match(key="tool", any_of=among)
            where = (VectorFilter(must=[tools], must_not=[FORGIVEN]) if source == "any"  # without judgements nothing was replaced
                     else VectorFilter(must=[tools], must_not=[OUTCOMES]) if source == "people"
                     else VectorFilter(must=[tools, OUTCOMES], must_not=[REPLACED, FORGIVEN]))
            return self._search(FEEDBACK, vector, limit=FEEDBACK_LIMIT, score_threshold=MIN_SIMILARITY, filter=where,
                                fields=FEEDBACK_FIELDS)

        def nearest(source: Literal["any", "outcome", "people"]) -> list[VectorHit]:
            return with_the_crowded_out(search(keys, source), FEEDBACK_LIMIT, keys, lambda among: search(among, source))

        versions = getattr(self._local, "versions", None)
        if versions is not None and versions.judgements == 0:  # nobody judged anything: one search does
            return nearest("any")
        return [*nearest("outcome"), *self._with_the_newest_judgements(nearest("people"), keys, vector)]

    def _with_the_newest_judgements(self, hits: list[VectorHit], keys: list[str], vector: list[float]) -> list[VectorHit]:
        """`hits` (people's judgements nearest the scenario) and, when they fill their page with
        repeats of this scenario, the newest FEEDBACK_LIMIT judgements of `keys` as near as those:
        repeats tie at similarity 1, so the nearest are not the latest, and the judgements people
        made after them never counted (QA Y: past ~64 judgements of a job sent again and again, ten
        positive ones of a fixed tool left its score at -42.6, and its latest judgement unseen)."""
        if len(hits) < FEEDBACK_LIMIT or hits[-1].score < CROWDED_SIMILARITY:
            return hits
        seen = {h.id for h in hits}
        return [*hits, *(h for h in self._newest_judgements(keys, vector) if h.id not in seen)]

    def _newest_judgements(self, keys: list[str], vector: list[float]) -> list[VectorHit]:
        """The newest FEEDBACK_LIMIT judgements of `keys`, those as near `vector` as a crowded page's."""
        def read() -> list[VectorHit]:
            newest = self.rt.memory.scroll(FEEDBACK, filter=VectorFilter(must=[Match(key="tool", any_of=keys)], must_not=[OUTCOMES]),
                                           limit=FEEDBACK_LIMIT, descending_by="timestamp")
            return [VectorHit(p.id, score, {k: p.payload[k] for k in FEEDBACK_FIELDS if k in p.payload})
                    for p, score in zip(newest, cosines(newest, vector)) if score >= CROWDED_SIMILARITY]

        return self._cached(("newest judgements", tuple(keys), hash(tuple(vector))), read)

    # ----------------------------------------------------------------- evolved versions
    def _served(self, request: CallRequest, evidence: list[CandidateEvidence]) -> ServedVersions:
        """The versions promotions serve this call (evolution/served_version.py `served_versions`),
        from the candidates' promotions as this selector has them read."""
        if request.version:
            return ServedVersions()
        names = list(dict.fromkeys(e.manifest.name for e in evidence))
        promotions = self.promotions(names) if request.use_evolved else {}
        return served_versions(request, evidence, promotions, self.withdrawn(promotions), self.rt.registry,
                               self.settings.trial_share)

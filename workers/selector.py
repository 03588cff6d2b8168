"""Gathers what the stores know about the candidates of a call and lets the policy rank them.

This is the only place where selection meets the services: the embedder, the vector memory and
the state store. What it hands the policy is plain evidence (selection/evidence.py).
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from selection.evidence import CandidateEvidence, Source
from selection.manifest import ToolManifest
from selection.models import CallPlan, CallRequest
from selection.policies import get_policy
from selection.ports import FAILURES, TOOLS, Match, VectorFilter, VectorPoint

if TYPE_CHECKING:
    from workers.runtime import Runtime

SEARCH_DEPTH = 4  # tool points searched per candidate kept (descriptions and examples)
EMBED_BATCH = 256


def _text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def tool_texts(manifest: ToolManifest) -> list[tuple[str, str]]:
    """The (point id, text) pairs a tool version is matched by: its description and each example."""
    texts = [(f"{manifest.key}#d", manifest.description)]
    texts += [(f"{manifest.key}#e{i}", ex) for i, ex in enumerate(manifest.examples)]
    return texts


class Selector:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.settings = rt.settings
        self.policy = get_policy(self.settings.policy)
        self.rng = random.Random()

    # ----------------------------------------------------------------- tool index
    def sync_tools(self, manifests: list[ToolManifest] | None = None) -> int:
        """Embed the tool texts that are new or changed since the store last saw them."""
        memory, embedder = self.rt.memory, self.rt.embedder
        manifests = manifests if manifests is not None else self.rt.registry.all()
        known = {p.id: p.payload.get("text_hash") for p in memory.scroll(TOOLS, limit=1_000_000)}
        todo: list[tuple[str, str, ToolManifest]] = [
            (pid, text, m)
            for m in manifests
            for pid, text in tool_texts(m)
            if known.get(pid) != _text_hash(text)
        ]
        for start in range(0, len(todo), EMBED_BATCH):
            chunk = todo[start : start + EMBED_BATCH]
            vectors = embedder.embed([text for _, text, _ in chunk])
            memory.upsert(
                TOOLS,
                [
                    VectorPoint(
                        id=pid,
                        vector=vec,
                        payload={
                            "tool": m.key,
                            "name": m.name,
                            "version": m.version,
                            "tags": m.tags,
                            "deprecated": m.deprecated,
                            "text_hash": _text_hash(text),
                            "text": text[:500],
                        },
                    )
                    for (pid, text, m), vec in zip(chunk, vectors)
                ],
            )
        return len(todo)

    def add_tool(self, manifest: ToolManifest) -> None:
        """Serve a new version (an evolved one) from now on."""
        self.rt.registry.add(manifest)
        self.sync_tools([manifest])

    # ----------------------------------------------------------------- planning
    def plan(self, request: CallRequest, features: dict[str, Any] | None = None) -> CallPlan:
        vector = self.rt.embedder.embed_one(request.scenario)
        evidence = self.gather(request, vector)
        ranked = self.policy.rank(evidence, features or {}, self.rng)
        keep = max(self.settings.max_candidates, request.max_attempts)
        return CallPlan(
            request=request,
            candidates=ranked[:keep],
            features=features or {},
            policy=self.policy.name,
        )

    def gather(self, request: CallRequest, vector: list[float]) -> list[CandidateEvidence]:
        registry = self.rt.registry
        similarity = self._similarities(request, vector)
        sources: dict[str, Source] = {}

        if request.namespace:
            versions = registry.versions(request.namespace)
            if request.version:
                versions = [m for m in versions if m.version == request.version]
                sources.update({m.key: "version" for m in versions})
            else:
                original = registry.original(request.namespace)
                if original is not None:
                    sources[original.key] = "original"
                served = self._promoted(request.namespace) if request.use_evolved else None
                if served is not None:
                    sources[served.key] = "promoted"
                for m in versions:
                    sources.setdefault(m.key, "semantic")
        # Semantic matches (all of a scenario-only call; fallbacks of a namespace call). Within a
        # namespace the promoted version is served in place of the version that matched.
        if not request.version:
            best_by_ns: dict[str, float] = defaultdict(float)
            for key, sim in similarity.items():
                name = key.partition("@")[0]
                best_by_ns[name] = max(best_by_ns[name], sim)
            for key in list(similarity):
                name = key.partition("@")[0]
                served = self._promoted(name) if request.use_evolved else None
                if served is not None and served.key != key and served.key not in request.exclude:
                    similarity[served.key] = max(similarity.get(served.key, 0.0), best_by_ns[name])
                    sources.setdefault(served.key, "semantic")
                sources.setdefault(key, "semantic")

        keys = [
            k
            for k in sources
            if k not in request.exclude and (m := registry.get(k)) is not None and not m.deprecated
        ]
        if request.tags:
            keys = [k for k in keys if set(request.tags) <= set(registry.get(k).tags)]  # type: ignore[union-attr]
        if not keys:
            return []
        open_breakers = {k for k, s in self.rt.state.breaker_states(keys).items() if s == "open"}
        keys = [k for k in keys if k not in open_breakers]
        stats = self.rt.state.stats(keys)
        failures = self._failure_similarities(keys, vector)
        return [
            CandidateEvidence(
                manifest=registry.get(k),  # type: ignore[arg-type]
                source=sources[k],
                similarity=similarity.get(k, 0.0),
                quality=stats[k].quality,
                successes=stats[k].successes,
                failures=stats[k].failures,
                failure_similarities=failures.get(k, []),
            )
            for k in keys
        ]

    def _promoted(self, namespace: str) -> ToolManifest | None:
        promotion = self.rt.state.promotion(namespace)
        if promotion is None or promotion.status == "rolled_back":
            return None
        return self.rt.registry.get(f"{namespace}@{promotion.evolved_version}")

    def _similarities(self, request: CallRequest, vector: list[float]) -> dict[str, float]:
        """Best cosine per tool version over its description and examples."""
        must = [Match(key="tags", any_of=[t]) for t in request.tags]
        if request.namespace and request.version:
            must.append(Match(key="tool", any_of=[f"{request.namespace}@{request.version}"]))
        must_not = [Match(key="deprecated", any_of=[True])]
        if request.exclude:
            must_not.append(Match(key="tool", any_of=list(request.exclude)))
        limit = max(self.settings.max_candidates, request.max_attempts) * SEARCH_DEPTH
        hits = self.rt.memory.search(
            TOOLS, vector, limit=limit, filter=VectorFilter(must=must, must_not=must_not)
        )
        if request.namespace and not request.version:
            hits += self.rt.memory.search(
                TOOLS,
                vector,
                limit=limit,
                filter=VectorFilter(must=[*must, Match(key="name", any_of=[request.namespace])], must_not=must_not),
            )
        best: dict[str, float] = {}
        for hit in hits:
            if hit.score < self.settings.min_similarity:
                continue  # a fallback that has nothing to do with the job is no fallback
            key = hit.payload["tool"]
            best[key] = max(best.get(key, -1.0), hit.score)
        return best

    def _failure_similarities(self, keys: list[str], vector: list[float]) -> dict[str, list[float]]:
        hits = self.rt.memory.search(
            FAILURES,
            vector,
            limit=200,
            filter=VectorFilter(must=[Match(key="tool", any_of=list(keys))]),
            score_threshold=self.settings.failure_similarity,
        )
        out: dict[str, list[float]] = defaultdict(list)
        for hit in hits:
            out[hit.payload["tool"]].append(hit.score)
        return out

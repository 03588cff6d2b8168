"""Description variants at work: which one a call is matched by, and what its outcome teaches.

Each variant of a tool version is embedded as its own point in the tools collection
(`name@version#v<id>`, beside the manifest's description `#d`, which is variant "0"). For a tool
with variants, a call keeps only the hits of the variant it is served (evolution/descriptions.py:
the best active one, or with probability FITTEST_AB_TEST_PROBABILITY a testing one), so the
served description is the one matched, by the embedding and by the word match (the selector's
word index holds each variant as well); examples match as always. A tool without variants is
matched by its manifest's description, as before any variant existed.

The selector reads the variants from Redis at most every REFRESH_S seconds (a snapshot, not a
round trip per call) and embeds a variant the first time it sees it; searches the selection cache
answers see a new variant's point within one FITTEST_SELECTION_CACHE_TTL_S. The outcome of a call credits
the variants it was served: an access for each, and for the tool tried first a trial that counts
its first-attempt success; enough trials promote a testing variant or retire it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from evolution.descriptions import MANIFEST_VARIANT, DescriptionVariant, judge, rate_to_beat, served
from evolution.models import ChangelogEntry
from selection.manifest import split_key
from selection.models import CallRequest, OutcomeRecord
from selection.ports import TOOLS, VectorHit
from workers.store_failures import is_store_failure
from workers.tool_catalog import tool_point

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.selection")

REFRESH_S = 2.0


def variant_point_id(key: str, variant_id: str) -> str:
    return f"{key}#v{variant_id}"


def _hit_variant(hit: VectorHit) -> str | None:
    """The variant a tools-collection hit is a description of; None for an example."""
    part = hit.id.rpartition("#")[2]
    if part == "d":
        return "0"
    if part.startswith("v"):
        return part[1:]
    return None


class VariantBook:
    """The selector's view of description variants (one per memory-side process)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._lock = threading.Lock()
        self._snapshot: dict[str, list[DescriptionVariant]] = {}
        self._read_at = float("-inf")
        self._embedded: set[str] = set()
        # The variants' texts by point id, and a revision that moves when they change, so that the
        # selector's word index is rebuilt when a variant is added, not at every read.
        self.texts: dict[str, str] = {}
        self.revision = 0

    def snapshot(self) -> dict[str, list[DescriptionVariant]]:
        with self._lock:
            if time.monotonic() - self._read_at >= REFRESH_S:
                self._snapshot = self.rt.evolution.all_variants()
                self._read_at = time.monotonic()
                self._embed_new(self._snapshot)
                texts = {variant_point_id(key, v.id): v.text
                         for key, variants in self._snapshot.items() for v in variants if v.id != MANIFEST_VARIANT}
                if texts != self.texts:
                    self.texts, self.revision = texts, self.revision + 1
            return self._snapshot

    def _embed_new(self, snapshot: dict[str, list[DescriptionVariant]]) -> None:
        todo = [
            (key, v)
            for key, variants in snapshot.items()
            for v in variants
            if v.id != "0" and variant_point_id(key, v.id) not in self._embedded and self.rt.registry.get(key) is not None
        ]
        if not todo:
            return
        try:
            vectors = self.rt.embedder.embed([v.text for _, v in todo])
            points = [tool_point(variant_point_id(key, v.id), v.text, self.rt.registry.get(key), vector, variant=v.id)  # type: ignore[arg-type]
                      for (key, v), vector in zip(todo, vectors)]
            self.rt.memory.upsert(TOOLS, points)
        except Exception as exc:
            if not is_store_failure(exc):
                raise
            # Selection goes on without the new variants' points; the next refresh embeds them.
            log.warning("description variants not indexed, the embedder or vector memory failed: %s", exc)
            return
        self._embedded.update(p.id for p in points)

    def _served(self, variants: list[DescriptionVariant], request: CallRequest, key: str) -> str:
        environment = request.context.get("environment")
        return served(variants, request.call_id, key, environment if isinstance(environment, str) else None,
                      self.rt.settings.ab_test_probability)

    def filter_hits(self, hits: list[VectorHit], request: CallRequest) -> list[VectorHit]:
        """Drop the description hits of every variant this call is not served."""
        snapshot = self.snapshot()
        if not snapshot:
            return hits
        chosen: dict[str, str] = {}
        kept = []
        for hit in hits:
            key = hit.payload.get("tool")
            variant = _hit_variant(hit)
            if not isinstance(key, str) or key not in snapshot or variant is None:
                kept.append(hit)
                continue
            if key not in chosen:
                chosen[key] = self._served(snapshot[key], request, key)
            if variant == chosen[key]:
                kept.append(hit)
        return kept

    def served_for(self, request: CallRequest, keys: list[str]) -> dict[str, str]:
        """The variant each of these tool versions was served in this call (those that have variants)."""
        snapshot = self.snapshot()
        return {k: self._served(snapshot[k], request, k) for k in keys if k in snapshot}


def credit_variants(rt: Runtime, record: OutcomeRecord) -> None:
    """Count the call for the variants it was served; judge a testing variant tried enough."""
    if not record.variants:
        return
    first = record.attempts[0] if record.attempts else None
    for key, variant_id in record.variants.items():
        is_first = first is not None and first.key == key
        credited = rt.evolution.record_variant(key, variant_id, record.call_id, is_first, bool(is_first and first and first.success))
        if not (credited and is_first):
            continue
        variants = rt.evolution.variants(key)
        for vid, status in judge(variants, rt.settings.variant_min_trials).items():
            if rt.evolution.set_variant_status(key, vid, "testing", status):
                _log_verdict(rt, key, variants, next(v for v in variants if v.id == vid), status)


def _log_verdict(rt: Runtime, key: str, variants: list[DescriptionVariant], variant: DescriptionVariant, status: str) -> None:
    """A line in the namespace's changelog: which description is served changed, and `fittest show`
    lists the verdicts of its versions there (before, only the variants' statuses said it)."""
    name, version = split_key(key)
    against = rate_to_beat(variants, variant)
    rt.evolution.log(ChangelogEntry(
        namespace=name, event="description_promoted" if status == "active" else "description_retired", version=version,
        mutation=f"description #{variant.id}: {variant.text[:200]}",
        reason=f"{variant.successes}/{variant.trials} first attempts succeeded, against a rate of {against:.2f} "
               f"of the best active description",
    ))

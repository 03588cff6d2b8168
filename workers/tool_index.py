"""The vector memory's points of the tool versions served (TOOLS), kept saying what the registry serves.

Selection searches these points for the versions whose texts match a job; this module writes them:
at start, for a tool added to the tools directory or changed in it, and for an evolved version.
What it changes, selection's caches must forget (`on_change`: workers/selector.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import semver

from evolution.versioning import MANIFEST_FILE, version_stem
from selection.manifest import ManifestError, ToolManifest, load_manifest, tool_key
from selection.ports import TOOLS, Match, VectorFilter, VectorPoint
from workers.tool_catalog import evolved_dir, text_hash, tool_point

if TYPE_CHECKING:
    from pathlib import Path

    from workers.runtime import Runtime

EMBED_BATCH = 256  # texts embedded per call of the embedder


def tool_texts(manifest: ToolManifest) -> list[tuple[str, str]]:
    """The (point id, text) pairs a tool version is matched by: its description and each example."""
    texts = [(f"{manifest.key}#d", manifest.description)]
    texts += [(f"{manifest.key}#e{i}", ex) for i, ex in enumerate(manifest.examples)]
    return texts


def _flagged(points: list[VectorPoint], **flags: Any) -> list[VectorPoint]:
    """The points whose payload differs from `flags`, with those values: same vector, same text."""
    return [p.model_copy(update={"payload": {**p.payload, **flags}})
            for p in points if any(p.payload.get(k) != v for k, v in flags.items())]


class ToolIndex:
    """Registers tool versions and indexes their texts for the selector that owns it: the tools
    watch adds and revises what the tools directory says and the memory worker adds an evolved
    version, one change at a time (a lock), each telling the selector (`on_change`); the runtime
    syncs the whole registry at start and when the vector memory is back after an outage (`sync`,
    which registers nothing: at start nothing is cached, and what was cached before an outage is
    gone within the cache's TTL)."""

    def __init__(self, rt: Runtime, on_change: Callable[[], None]) -> None:
        self.rt = rt
        self._changed = on_change  # what was searched before a change names versions as they were
        self._add_lock = threading.Lock()

    def sync(self, manifests: list[ToolManifest] | None = None) -> int:
        """Make the tools collection say what the manifests say; the number of points written.
        Texts new or changed since the store last saw them are embedded. A version whose tags or
        `deprecated` changed in place has its points rewritten with them, since searches filter on
        both: a stale `deprecated` hid a version from every search after it was taken back. An
        example the version no longer has is marked deprecated, which every search leaves out (the
        port deletes by payload only, and no field of the payload names one text)."""
        if manifests == []:
            return 0
        memory, embedder = self.rt.memory, self.rt.embedder
        # Only the points of the versions given are read: an evolved or a new version is indexed
        # in ~1 ms at 10,000 tools, not in the time it took to read all of their points.
        only = None if manifests is None else VectorFilter(must=[Match(key="tool", any_of=[m.key for m in manifests])])
        manifests = manifests if manifests is not None else self.rt.registry.all()
        stored = {p.id: p for p in memory.scroll(TOOLS, filter=only, limit=1_000_000)}
        texts = {pid: (text, m) for m in manifests for pid, text in tool_texts(m)}
        todo = [(pid, text, m) for pid, (text, m) in texts.items()
                if (p := stored.get(pid)) is None or p.payload.get("text_hash") != text_hash(text)]
        embedded = {pid for pid, _, _ in todo}
        by_key = {m.key: m for m in manifests}
        rewrite = []
        for pid, point in stored.items():
            m = by_key.get(point.payload.get("tool", ""))
            if m is None or pid in embedded:  # a version not given, or a text written afresh below
                continue
            retired = pid not in texts and not pid.rpartition("#")[2].startswith("v")  # a variant's is its own
            rewrite += _flagged([point], tags=m.tags, deprecated=m.deprecated or retired)
        if rewrite:
            memory.upsert(TOOLS, rewrite)
        for start in range(0, len(todo), EMBED_BATCH):
            chunk = todo[start : start + EMBED_BATCH]
            vectors = embedder.embed([text for _, text, _ in chunk])
            memory.upsert(TOOLS, [tool_point(pid, text, m, vec) for (pid, text, m), vec in zip(chunk, vectors)])
        return len(todo) + len(rewrite)

    def _retire(self, keys: list[str]) -> None:
        """Mark deprecated the points of versions no longer served, so that searches leave them out
        rather than fill their slots with hits that plans drop; serving one again rewrites them."""
        if keys:
            stored = self.rt.memory.scroll(TOOLS, filter=VectorFilter(must=[Match(key="tool", any_of=keys)]), limit=1_000_000)
            if stale := _flagged(stored, deprecated=True):
                self.rt.memory.upsert(TOOLS, stale)

    def ensure_version(self, namespace: str, version: str) -> ToolManifest | None:
        """A version of the namespace, loaded from the evolved directory if this process has not
        seen it yet (another worker evolved it a moment ago)."""
        manifest = self.rt.registry.get(tool_key(namespace, version))
        if manifest is not None:
            return manifest
        path = evolved_dir(self.rt.settings) / version_stem(namespace, version) / MANIFEST_FILE
        if not path.is_file() or self.rt.registry.original(namespace) is None:  # a removed tool's, not served
            return None
        try:
            found = load_manifest(path)
        except ManifestError:
            return None
        if found.key != tool_key(namespace, version) or (
                found.parent_version is not None and semver.Version.parse(found.parent_version) >= semver.Version.parse(version)):
            return None  # another version's file, or a chain that would not end (evolved versions grow)
        if found.parent_version is not None and self.ensure_version(namespace, found.parent_version) is None:
            # Evolved from a version no longer served: not served either (selection/registry.py `orphans`;
            # QA 64c: a promotion of one kept loading it, beside the manifest version left in its namespace).
            return None
        return self.ensure_tool(found)

    def ensure_tool(self, manifest: ToolManifest) -> ToolManifest | None:
        """Serve this version (an evolved one) from now on, unless it is served already; None when
        its manifest is refused."""
        self.ensure_tools([(manifest, None)])
        return self.rt.registry.get(manifest.key)

    def ensure_tools(self, found: list[tuple[ToolManifest, Path | None]]) -> list[ToolManifest]:
        """Serve these versions (with the manifest file each came from, if any) from now on, and
        index their texts in one go; what it returns is served and indexed (those refused are
        not). The tools watch adds what appeared in the tools directory since its last look, and
        hands a version whose indexing failed (the vector memory down) in again: it is registered
        first, so that plans serve it degraded meanwhile, and indexing skips texts indexed already."""
        with self._add_lock:
            registered = 0
            for manifest, source in found:
                if manifest.key not in self.rt.registry:
                    try:
                        self.rt.registry.add(manifest, source=source)
                    except ManifestError:
                        continue
                    registered += 1
            served = [manifest for manifest, _ in found if manifest.key in self.rt.registry]
            # A version served and indexed already (a redelivered evolution record) changes nothing.
            if served and (self.sync(served) or registered):
                self._changed()
        return served

    def revise_tools(self, changed: list[tuple[ToolManifest, Path]], removed: list[str]) -> None:
        """Serve what the tools directory now says of versions it defined, as a restart would read
        it: a manifest changed in place (or moved) replaces its version, whose texts are indexed
        again, and the versions in `removed` are no longer served (their points are kept, marked
        deprecated). When the indexing fails the registry has changed already; handing the changed
        versions to `ensure_tools` indexes them."""
        with self._add_lock:
            try:
                for manifest, source in changed:
                    self.rt.registry.replace(manifest, source)
                for key in removed:
                    self.rt.registry.remove(key)
                self.sync([manifest for manifest, _ in changed])
                self._retire(removed)
            finally:
                self._changed()

"""Where tool manifests come from: the tools directory, and evolved versions in the data directory."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from selection.manifest import ManifestError, ToolManifest
from selection.ports import VectorPoint
from selection.registry import ORPHANED, ToolRegistry
from workers.settings import Settings


def evolved_dir(settings: Settings) -> Path:
    return settings.data_dir / "evolved"


def text_hash(text: str) -> str:
    """What a stored tool point was embedded from: the index re-embeds a text whose hash changed."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def tool_point(point_id: str, text: str, manifest: ToolManifest, vector: list[float], **extra: Any) -> VectorPoint:
    """One text of a tool version (description, example, description variant) in the TOOLS collection."""
    return VectorPoint(id=point_id, vector=vector, payload={
        "tool": manifest.key, "name": manifest.name, "version": manifest.version, "tags": manifest.tags,
        "deprecated": manifest.deprecated, "text_hash": text_hash(text), "text": text[:500], **extra,
    })


def load_registry(settings: Settings) -> ToolRegistry:
    """The tools directory and the evolved versions of its tools; an evolved version whose chain
    does not start at a version the tools directory gives is not served (and listed among the
    registry's errors)."""
    dirs = [settings.tools_dir]
    if evolved_dir(settings).is_dir():
        dirs.append(evolved_dir(settings))
    registry = ToolRegistry.load(dirs)
    for key in registry.orphans():
        source = registry.source(key) or key
        registry.remove(key)
        registry.orphaned.append(key)
        registry.errors.append(ManifestError(source, ORPHANED, f"{key} is an evolved version of a tool version the tools directory no longer has; not served"))
    return registry

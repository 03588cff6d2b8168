"""Where tool manifests come from: the tools directory, and evolved versions in the data directory."""

from __future__ import annotations

from pathlib import Path

from selection.registry import ToolRegistry
from workers.settings import Settings


def evolved_dir(settings: Settings) -> Path:
    return settings.data_dir / "evolved"


def load_registry(settings: Settings) -> ToolRegistry:
    dirs = [settings.tools_dir]
    if evolved_dir(settings).is_dir():
        dirs.append(evolved_dir(settings))
    return ToolRegistry.load(dirs)

"""A tool version's files: what evolution copies into a new version, and what tells whether an
evolved version still runs the code of its namespace's original."""

from __future__ import annotations

from pathlib import Path

from selection.manifest import ToolManifest
from selection.registry import MANIFEST_SUFFIXES

MAX_FOLDER_BYTES = 20_000_000  # a tool folder larger than this is not copied into a new version
SKIPPED_DIRS = {"__pycache__", ".git"}


class FolderTooLarge(ValueError):
    pass


def _paths(root: Path) -> list[tuple[str, Path]]:
    """The files of a tool folder that make its code: manifests, caches and hidden files left
    out, and nothing a link leads out of the folder to."""
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.startswith(".") for part in rel.parts):
            continue
        if not path.is_file() or path.suffix in MANIFEST_SUFFIXES or not path.resolve().is_relative_to(root.resolve()):
            continue
        found.append((rel.as_posix(), path))
    return found


def version_files(manifest: ToolManifest) -> dict[str, bytes]:
    """The files of `manifest`'s folder by relative path (none for a version without a folder)."""
    if manifest.tool_dir is None:
        return {}
    files: dict[str, bytes] = {}
    total = 0
    for rel, path in _paths(Path(manifest.tool_dir)):
        total += path.stat().st_size
        if total > MAX_FOLDER_BYTES:
            raise FolderTooLarge(f"the folder of {manifest.key} holds more than {MAX_FOLDER_BYTES} bytes")
        files[rel] = path.read_bytes()
    return files


_same_code: dict[tuple[str, str | None, str, str | None], bool] = {}


def runs_code_of(manifest: ToolManifest, original: ToolManifest) -> bool:
    """Whether `manifest` runs `original`'s code unchanged: the same implementation and the same
    files. An evolved version made by a change of its description or its timeout does; one whose
    code a mutator wrapped or rewrote does not. Read once per process, as the python runner
    loads a version's module once (workers/runners/python.py)."""
    if manifest.implementation != original.implementation:
        return False
    key = (manifest.key, manifest.tool_dir, original.key, original.tool_dir)
    if any(m.tool_dir is not None and not Path(m.tool_dir).is_dir() for m in (manifest, original)):
        # Not compared, nor the answer kept: a folder away now (the tools directory moved) read as
        # no files, and the version ran in a process of its own for the executor's life (QA 57a L3).
        return False
    if key not in _same_code:
        try:
            _same_code[key] = version_files(manifest) == version_files(original)
        except (OSError, FolderTooLarge):
            return False
    return _same_code[key]

"""Version numbers and file names of evolved versions.

Every evolution is a minor bump above the highest version of the namespace with the parent's
major (`1.0.0 → 1.1.0`; evolving 1.0.0 again when 1.1.0 exists gives 1.2.0), so two evolutions
never hand out the same number. Files of a version live in one folder under the evolved
directory, named after the version (`name_v1_1_0/`), and never outside it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import semver

from selection.manifest import ToolManifest, tool_key

MANIFEST_FILE = "tool.yaml"


def next_version(parent: str, existing: Iterable[str]) -> str:
    """The next minor version of `parent`'s major line, above every version that exists."""
    major = semver.Version.parse(parent).major
    minors = [v.minor for v in map(semver.Version.parse, [parent, *existing]) if v.major == major]
    return str(semver.Version(major, max(minors) + 1, 0))


def version_stem(name: str, version: str) -> str:
    """`name_v1_1_0`: the folder and wrapper module name of a version (a valid Python identifier)."""
    return f"{name}_v" + re.sub(r"[^0-9A-Za-z]", "_", version)


def version_dir(evolved_root: Path, name: str, version: str) -> Path:
    """The folder of an evolved version; refuses anything that would land outside `evolved_root`."""
    root = evolved_root.resolve()
    target = (root / version_stem(name, version)).resolve()
    if target.parent != root:
        raise ValueError(f"{tool_key(name, version)} would be written outside {root}")
    return target


def evolved_manifest(parent: ToolManifest, version: str, **changes: object) -> ToolManifest:
    """The parent's manifest as a new version: same capability, new number, parent recorded.

    The tool directory is cleared (the version gets its own folder) and so is `deprecated`. An http
    tool's headers are not copied (a bearer token would be written under the data directory): the
    version calls with its parent's URL and headers as the parent's manifest reads at each run
    (`ToolRegistry.http_root`, handed to the runner; QA 55b M2).
    """
    data = parent.model_dump()
    data.update(version=version, parent_version=parent.version, tool_dir=None, evolved_file=None, deprecated=False)
    if data["implementation"]["kind"] == "http":
        data["implementation"] = {**data["implementation"], "headers": {}}
    data.update(changes)
    return ToolManifest.model_validate(data)

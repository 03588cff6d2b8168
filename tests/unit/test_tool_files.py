"""Whether an evolved version runs its original's code unchanged (workers/tool_files.py)."""

from __future__ import annotations

from pathlib import Path

from selection.manifest import ToolManifest
from workers.tool_files import runs_code_of


def version(folder: Path, version: str, code: str, **extra: object) -> ToolManifest:
    folder.mkdir(parents=True)
    (folder / "tool.py").write_text(code)
    (folder / "tool.yaml").write_text("# read elsewhere: manifests are not the version's code\n")
    return ToolManifest.model_validate({"name": "echo", "version": version, "description": "echo", "tool_dir": str(folder),
                                        "implementation": {"kind": "python", "entrypoint": "tool:run"}, **extra})


def test_a_version_runs_its_originals_code_while_the_files_are_the_same(tmp_path: Path) -> None:
    code = "def run(value):\n    return value\n"
    original = version(tmp_path / "tools" / "echo", "1.0.0", code)
    described = version(tmp_path / "evolved" / "1.1.0", "1.1.0", code, parent_version="1.0.0", description="echoes it")
    rewritten = version(tmp_path / "evolved" / "1.2.0", "1.2.0", code + "# wrapped\n", parent_version="1.0.0")
    assert runs_code_of(described, original) and not runs_code_of(rewritten, original)
    # QA 57a L3: compared while the tools directory was away, the answer stayed "no" for the
    # process's life, and the version ran in a process of its own after the folder came back.
    (tmp_path / "tools").rename(tmp_path / "away")
    fresh = described.model_copy(update={"version": "1.1.1"})  # not compared before, as after an executor's restart
    assert not runs_code_of(fresh, original)
    (tmp_path / "away").rename(tmp_path / "tools")
    assert runs_code_of(fresh, original)

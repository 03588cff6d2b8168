"""Files a manifest may name, in the tools directory and in the data directory's evolved versions:
nothing outside its own folder, whichever way the path tries to get out.

(The `..`, absolute and symlinked argv and entrypoint paths of tools are in
test_manifest_registry.py; the placeholder rules are in integration/test_runners.py.)
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from selection.manifest import load_manifest
from workers.settings import Settings
from workers.tool_catalog import evolved_dir, load_registry


def write(folder: Path, doc: dict, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    path = folder / "tool.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def evolved_doc(**extra: object) -> dict:
    return {"name": "echo", "version": "1.1.0", "parent_version": "1.0.0", "description": "an evolved echo",
            "implementation": {"kind": "python", "entrypoint": "echo_v1_1_0:run"}, **extra}


def test_evolved_versions_in_the_data_directory_cannot_reach_outside_their_folder(tmp_path: Path) -> None:
    settings = Settings(tools_dir=tmp_path / "tools", data_dir=tmp_path / "data")
    for name in ("ok", "echo", "file", "dirlink"):  # the originals the evolved versions come from
        write(tmp_path / "tools" / name, {**evolved_doc(), "name": name, "version": "1.0.0", "parent_version": None,
                                          "implementation": {"kind": "python", "entrypoint": "tool:run"}},
              {"tool.py": "def run(i): return i\n"})
    secret = tmp_path / "secret.py"
    secret.write_text("def run(i): return open('/etc/hostname').read()\n")
    root = evolved_dir(settings)
    write(root / "ok_v1_1_0", {**evolved_doc(), "name": "ok"}, {"echo_v1_1_0.py": "def run(i): return i\n"})
    linked = write(root / "echo_v1_1_0", evolved_doc(), {})
    os.symlink(secret, linked.parent / "echo_v1_1_0.py")  # its code is a symlink out of the folder
    write(root / "file_v1_1_0", {**evolved_doc(evolved_file="../../secret.py"), "name": "file"}, {"echo_v1_1_0.py": "def run(i): return i\n"})
    dir_link = write(root / "dirlink_v1_1_0", {**evolved_doc(evolved_file="escape/secret.py"), "name": "dirlink"},
                     {"echo_v1_1_0.py": "def run(i): return i\n"})
    os.symlink(tmp_path, dir_link.parent / "escape")  # a folder symlinked out, then a path through it

    registry = load_registry(settings)

    assert [m.key for m in registry.all() if m.parent_version] == ["ok@1.1.0"]
    refused = {(Path(e.path).parent.name, e.field) for e in registry.errors}
    assert refused == {("echo_v1_1_0", "implementation.entrypoint"), ("file_v1_1_0", "evolved_file"),
                       ("dirlink_v1_1_0", "evolved_file")}
    assert all("outside the tool directory" in e.reason for e in registry.errors)


def test_a_manifest_cannot_choose_its_own_tool_directory(tmp_path: Path) -> None:
    path = write(tmp_path / "t", {**evolved_doc(), "tool_dir": "/etc"}, {"echo_v1_1_0.py": ""})
    assert load_manifest(path).tool_dir == str(path.parent.resolve())

"""What the tools-directory watch registers and what it only reports (no service involved)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from selection.manifest import ToolManifest
from selection.registry import ToolRegistry
from tests.conftest import EXAMPLE_TOOLS
from workers.tool_watch import ToolsDirWatch


Found = list[tuple[ToolManifest, Path | None]]


def adding_to(registry: ToolRegistry, added: list[tuple[str, Path | None]]) -> Callable[[Found], list[ToolManifest]]:
    """What the selector's ensure_tools does to the registry, minus the indexing."""

    def add(found: Found) -> list[ToolManifest]:
        for manifest, source in found:
            registry.add(manifest, source=source)
            added.append((manifest.key, source))
        return [manifest for manifest, _ in found]

    return add


def watched(tools: Path) -> tuple[ToolRegistry, list[tuple[str, Path | None]], ToolsDirWatch]:
    """A registry read from `tools` as a worker reads it at start, and the watch that follows it."""
    tools.mkdir(parents=True, exist_ok=True)
    registry = ToolRegistry.load([tools])
    added: list[tuple[str, Path | None]] = []
    return registry, added, ToolsDirWatch(tools, registry, adding_to(registry, added))


def test_new_versions_are_added_and_changed_or_refused_manifests_only_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    registry, added, watch = watched(tools)
    caplog.set_level(logging.INFO, logger="fittest.tools")
    assert watch.poll() == [] and not caplog.records  # what the worker read at start is served already

    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    assert watch.poll() == ["slugify@1.0.0"]
    assert added == [("slugify@1.0.0", tools / "slugify" / "tool.yaml")]
    assert watch.poll() == []  # nothing new: nothing read again

    manifest = tools / "word_stats" / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("Count the words", "Count all the words"))
    shutil.copy(manifest, tools / "copy.yaml")  # a second file for the same version
    (tools / "broken.yaml").write_text("name: broken\nversion: [1\n")
    caplog.clear()
    assert watch.poll() == []
    said = {(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records}
    assert ("WARNING", "word_stats@1.0.0 changed in place") in said
    assert ("WARNING", f"{tools / 'copy.yaml'} refused") in said
    assert ("WARNING", "tool manifest refused") in said
    served = registry.get("word_stats@1.0.0")
    assert served is not None and served.description.startswith("Count the words")  # served as read


def test_a_tools_dir_that_is_not_there_yet_is_watched_until_it_is(tmp_path: Path) -> None:
    registry = ToolRegistry()
    watch = ToolsDirWatch(tmp_path / "later", registry, adding_to(registry, []))
    assert watch.poll() == []
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tmp_path / "later" / "word_stats")
    assert watch.poll() == ["word_stats@1.0.0"]


def test_a_manifest_whose_script_comes_later_is_served_once_it_has_come_and_reported_once_meanwhile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = tmp_path / "tools"
    _, _, watch = watched(tools)
    (tools / "hash_text").mkdir()
    shutil.copy(EXAMPLE_TOOLS / "hash_text" / "tool.yaml", tools / "hash_text" / "tool.yaml")  # the manifest first
    caplog.set_level(logging.WARNING, logger="fittest.tools")
    assert watch.poll() == [] and watch.poll() == []
    assert len(caplog.records) == 1 and "hash_text.py does not exist" in caplog.records[0].getMessage()
    shutil.copy(EXAMPLE_TOOLS / "hash_text" / "hash_text.py", tools / "hash_text" / "hash_text.py")
    assert watch.poll() == ["hash_text@1.0.0"]


def test_two_new_files_of_one_version_serve_the_first_and_refuse_the_second(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = tmp_path / "tools"
    _, added, watch = watched(tools)
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "a")
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "b")
    caplog.set_level(logging.WARNING, logger="fittest.tools")
    assert watch.poll() == ["word_stats@1.0.0"] and len(added) == 1
    (first,) = added
    second = tools / ("b" if first[1] == tools / "a" / "tool.yaml" else "a") / "tool.yaml"
    assert [r.getMessage() for r in caplog.records] == [f"{second} refused: {first[1]} already defines word_stats@1.0.0"]


def test_a_version_whose_indexing_failed_is_handed_in_again_at_the_next_look(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    registry, added, watch = watched(tools)
    register = adding_to(registry, added)
    handed: list[list[str]] = []

    def add(found: Found) -> list[ToolManifest]:  # as the selector's: registered first, then indexed
        handed.append([m.key for m, _ in found])
        for manifest, source in found:
            if manifest.key not in registry:
                register([(manifest, source)])
        if len(handed) == 1:
            raise ConnectionError("vector memory down")
        return [m for m, _ in found]

    watch.add = add
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    with pytest.raises(ConnectionError):
        watch.poll()
    assert "word_stats@1.0.0" in registry  # served (degraded) meanwhile
    assert watch.poll() == ["word_stats@1.0.0"] and handed == [["word_stats@1.0.0"]] * 2
    assert watch.poll() == [] and len(handed) == 2

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
from evolution.versioning import evolved_manifest, version_dir
from workers.evolver import read_parent, write_version
from workers.settings import Settings
from workers.tool_catalog import load_registry
from workers.tool_watch import ToolsDirWatch


Found = list[tuple[ToolManifest, Path | None]]


def adding_to(registry: ToolRegistry, added: list[tuple[str, Path | None]]) -> Callable[[Found], list[ToolManifest]]:
    """What the tool index's ensure_tools does to the registry, minus the indexing."""

    def add(found: Found) -> list[ToolManifest]:
        for manifest, source in found:
            registry.add(manifest, source=source)
            added.append((manifest.key, source))
        return [manifest for manifest, _ in found]

    return add


def revising(registry: ToolRegistry) -> Callable[[list[tuple[ToolManifest, Path]], dict[str, str]], None]:
    """What the selector's revise_tools does to the registry, minus the indexing."""

    def revise(changed: list[tuple[ToolManifest, Path]], removed: dict[str, str]) -> None:
        for manifest, source in changed:
            registry.replace(manifest, source)
        for key in removed:
            registry.remove(key)

    return revise


def watched(tools: Path) -> tuple[ToolRegistry, list[tuple[str, Path | None]], ToolsDirWatch]:
    """A registry read from `tools` as a worker reads it at start, and the watch that follows it."""
    tools.mkdir(parents=True, exist_ok=True)
    registry = ToolRegistry.load([tools])
    added: list[tuple[str, Path | None]] = []
    return registry, added, ToolsDirWatch(tools, registry, adding_to(registry, added), revising(registry))


def served(registry: ToolRegistry) -> dict[str, str | None]:
    """Each version served and the file it was read from."""
    return {m.key: registry.source(m.key) for m in registry.all()}


def test_new_versions_are_added_changed_ones_replaced_and_a_second_file_or_a_bad_one_refused(
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
    manifest.write_text(manifest.read_text().replace("Count the words", "Count all the words") + "deprecated: true\n")
    shutil.copy(manifest, tools / "zz_copy.yaml")  # a second file for the same version, which a restart reads later
    shutil.copy(tools / "word_stats" / "stats.py", tools / "stats.py")  # with the module it names beside it
    (tools / "broken.yaml").write_text("name: broken\nversion: [1\n")
    caplog.clear()
    assert watch.poll() == []
    said = {(r.levelname, r.getMessage()) for r in caplog.records}
    assert ("INFO", f"serving word_stats@1.0.0 as {manifest} now defines it") in said
    assert ("WARNING", f"tool manifest refused: {tools / 'zz_copy.yaml'}: field 'version': {manifest} already defines word_stats@1.0.0") in said
    assert any(level == "WARNING" and message.startswith(f"tool manifest refused: {tools / 'broken.yaml'}: field '(yaml)'")
               for level, message in said)
    now = registry.get("word_stats@1.0.0")
    assert now is not None and now.description.startswith("Count all the words") and now.deprecated
    assert served(registry) == {"slugify@1.0.0": str(tools / "slugify" / "tool.yaml"), "word_stats@1.0.0": str(manifest)}


def test_a_removed_manifest_is_no_longer_served_and_a_moved_one_still_is(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    for tool in ("word_stats", "slugify", "hash_text"):
        shutil.copytree(EXAMPLE_TOOLS / tool, tools / tool)
    registry, _, watch = watched(tools)
    (tools / "slugify" / "tool.yaml").unlink()
    (tools / "hash_text" / "tool.yaml").rename(tools / "hash_text" / "hash.yml")
    assert watch.poll() == []
    assert served(registry) == {"hash_text@1.0.0": str(tools / "hash_text" / "hash.yml"),
                                "word_stats@1.0.0": str(tools / "word_stats" / "tool.yaml")}
    assert registry.versions("slugify") == [] and "slugify" not in registry.namespaces()


def test_a_tools_directory_moved_away_leaves_its_tools_served_and_says_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """QA resilience: moved away for a deploy, the directory read as empty: every tool stopped being
    served, each with an info line, every call ended no_candidates, and `fittest health` was fine."""
    tools = tmp_path / "tools"
    for tool in ("word_stats", "slugify"):
        shutil.copytree(EXAMPLE_TOOLS / tool, tools / tool)
    registry, _, watch = watched(tools)
    before = served(registry)
    caplog.set_level(logging.INFO, logger="fittest.tools")
    tools.rename(tmp_path / "tools.bak")
    assert watch.poll() == [] and watch.poll() == []
    assert served(registry) == before
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"FITTEST_TOOLS_DIR ({tools}) is not a directory: its tools stay registered, not run, until it "
                    "is back")]
    (tmp_path / "tools.bak").rename(tools)
    (tools / "slugify" / "tool.yaml").unlink()  # what it holds when it is back is what is served
    assert watch.poll() == []
    assert served(registry) == {"word_stats@1.0.0": str(tools / "word_stats" / "tool.yaml")}


def test_a_manifest_removed_or_changed_before_the_watch_started_is_seen_at_its_first_look(tmp_path: Path) -> None:
    """The worker reads the tools directory, then starts the watch after its warm-up: a change in
    between counted as seen (a CI run removed a manifest there; its version stayed served)."""
    tools = tmp_path / "tools"
    for tool in ("word_stats", "slugify"):
        shutil.copytree(EXAMPLE_TOOLS / tool, tools / tool)
    registry = ToolRegistry.load([tools])
    shutil.rmtree(tools / "slugify")
    manifest = tools / "word_stats" / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("Count the words", "Count all the words"))
    watch = ToolsDirWatch(tools, registry, adding_to(registry, []), revising(registry))
    assert watch.poll() == []
    assert served(registry) == {"word_stats@1.0.0": str(manifest)}
    now = registry.get("word_stats@1.0.0")
    assert now is not None and now.description.startswith("Count all the words")


def test_a_manifest_that_names_another_version_replaces_the_one_it_named(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    registry, _, watch = watched(tools)
    manifest = tools / "word_stats" / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1.0.0", "version: 1.1.0"))
    assert watch.poll() == ["word_stats@1.1.0"]
    assert served(registry) == {"word_stats@1.1.0": str(manifest)}


def test_a_manifest_saved_half_edited_keeps_its_version_served_until_it_is_fixed_or_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    registry, _, watch = watched(tools)
    manifest = tools / "word_stats" / "tool.yaml"
    good = manifest.read_text()
    manifest.write_text(good.replace("version: 1.0.0", "version: [1"))
    caplog.set_level(logging.WARNING, logger="fittest.tools")
    assert watch.poll() == []
    assert "word_stats@1.0.0 stays served as it was read before" in caplog.records[0].getMessage()
    assert served(registry) == {"word_stats@1.0.0": str(manifest)}
    manifest.write_text(good.replace("Count the words", "Count all the words"))
    assert watch.poll() == []
    now = registry.get("word_stats@1.0.0")
    assert now is not None and now.description.startswith("Count all the words")
    manifest.write_text("name: [")
    watch.poll()
    manifest.unlink()  # removed while refused: its version goes too
    watch.poll()
    assert served(registry) == {}


def test_a_python_module_saved_half_edited_is_named_among_the_refused_until_it_is_fixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """QA live F1: an edit of a tool's module alone (its manifest unchanged) was never read, so
    `fittest health`, which names the registry's refused manifests, stayed ok while a restart
    would refuse the tool."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    registry, _, watch = watched(tools)
    module = tools / "word_stats" / "stats.py"
    good = module.read_text()
    assert watch.poll() == [] and registry.errors == []
    module.write_text(good[: len(good) // 2] + "\ndef (")
    caplog.set_level(logging.WARNING, logger="fittest.tools")
    watch.poll()
    [refused] = [str(e) for e in registry.errors]
    assert refused.startswith(f"{tools / 'word_stats' / 'tool.yaml'}: field 'implementation.entrypoint': stats.py is not "
                              "valid Python at line ") and refused.endswith("(word_stats@1.0.0 stays served as it was read before)")
    assert len(caplog.records) == 1 and served(registry) == {"word_stats@1.0.0": str(tools / "word_stats" / "tool.yaml")}
    watch.poll()  # reported once
    assert len(caplog.records) == 1
    module.write_text(good + "\n# fixed\n")
    watch.poll()
    assert registry.errors == [] and "word_stats@1.0.0" in served(registry)
    module.unlink()  # gone: refused as a restart would refuse it
    watch.poll()
    assert "word_stats@1.0.0 stays served as it was read before" in str(registry.errors[0])


def test_a_tools_dir_that_is_not_there_yet_is_watched_until_it_is(tmp_path: Path) -> None:
    registry = ToolRegistry()
    watch = ToolsDirWatch(tmp_path / "later", registry, adding_to(registry, []), revising(registry))
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
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "b")
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "a")
    caplog.set_level(logging.WARNING, logger="fittest.tools")
    assert watch.poll() == ["word_stats@1.0.0"] and added == [("word_stats@1.0.0", tools / "a" / "tool.yaml")]
    assert watch.poll() == []  # the second is read again at each look, and reported once
    # the watch's own: a flush thread another test's Redis left behind may warn meanwhile (stop 65's clean clone)
    assert [r.getMessage() for r in caplog.records if r.name == "fittest.tools"] == [
        f"tool manifest refused: {tools / 'b' / 'tool.yaml'}: field 'version': {tools / 'a' / 'tool.yaml'} already defines word_stats@1.0.0"]


def test_of_two_files_of_one_version_the_watch_serves_the_one_a_restart_would(tmp_path: Path) -> None:
    """QA: a duplicate stayed refused after the file it lost to was removed, and a duplicate that a
    restart reads first was refused, so the running worker and a restart served different code."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "m")
    registry, _, watch = watched(tools)
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "z")
    watch.poll()
    assert served(registry) == {"word_stats@1.0.0": str(tools / "m" / "tool.yaml")}
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "a")  # a restart reads a/ first
    watch.poll()
    assert served(registry) == served(ToolRegistry.load([tools])) == {"word_stats@1.0.0": str(tools / "a" / "tool.yaml")}
    shutil.rmtree(tools / "a")
    watch.poll()
    assert served(registry) == served(ToolRegistry.load([tools])) == {"word_stats@1.0.0": str(tools / "m" / "tool.yaml")}
    shutil.rmtree(tools / "m")
    watch.poll()
    assert served(registry) == {"word_stats@1.0.0": str(tools / "z" / "tool.yaml")}
    shutil.rmtree(tools / "z")
    watch.poll()
    assert served(registry) == {}


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


def test_a_changed_version_whose_indexing_failed_is_handed_in_again_at_the_next_look(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    registry, _, watch = watched(tools)
    handed: list[list[str]] = []
    revise = watch.revise

    def failing(changed: list[tuple[ToolManifest, Path]], removed: dict[str, str]) -> None:
        revise(changed, removed)  # as the selector's: the registry changes first, then the indexing fails
        raise ConnectionError("vector memory down")

    def add(found: Found) -> list[ToolManifest]:
        handed.append([m.key for m, _ in found])
        return [m for m, _ in found]

    watch.revise, watch.add = failing, add
    manifest = tools / "word_stats" / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("Count the words", "Count all the words"))
    with pytest.raises(ConnectionError):
        watch.poll()
    now = registry.get("word_stats@1.0.0")
    assert now is not None and now.description.startswith("Count all the words") and handed == []
    assert watch.poll() == ["word_stats@1.0.0"] and handed == [["word_stats@1.0.0"]]
    assert watch.poll() == [] and len(handed) == 1


def evolve_in(registry: ToolRegistry, evolved: Path, name: str) -> str:
    """Write and register a version evolved from `name`'s original, as the evolver does."""
    original = registry.original(name)
    assert original is not None
    installed = write_version(version_dir(evolved, name, "1.1.0"), evolved_manifest(original, "1.1.0"), dict(read_parent(original).files))
    registry.add(installed, source=version_dir(evolved, name, "1.1.0") / "tool.yaml")
    return installed.key


def test_a_removed_tool_takes_its_evolved_versions_with_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its evolved versions run copies of its code: removing the tool from the tools directory
    stops serving them too, at once and after a restart; so does a manifest that now names another
    version, and a removed manifest version whose namespace keeps another (QA 64c: an evolved
    version of caps 1.0.0, removed, served 10 of 12 calls beside the caps 1.2.0 left)."""
    tools, evolved = tmp_path / "tools", tmp_path / "data" / "evolved"
    for tool in ("slugify", "word_stats"):
        shutil.copytree(EXAMPLE_TOOLS / tool, tools / tool)
    registry, _, watch = watched(tools)
    evolved_keys = [evolve_in(registry, evolved, name) for name in ("slugify", "word_stats")]
    assert evolved_keys == ["slugify@1.1.0", "word_stats@1.1.0"]

    (tools / "slugify" / "tool.yaml").unlink()
    manifest = tools / "word_stats" / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1.0.0", "version: 2.0.0"))
    caplog.set_level(logging.INFO, logger="fittest.tools")
    assert watch.poll() == ["word_stats@2.0.0"]
    assert sorted(served(registry)) == ["word_stats@2.0.0"]
    assert f"no longer serving slugify@1.1.0: slugify@1.0.0, which it evolved from, is no longer in {tools}" in caplog.messages
    assert f"no longer serving word_stats@1.1.0: word_stats@1.0.0, which it evolved from, is no longer in {tools}" in caplog.messages

    restarted = load_registry(Settings(tools_dir=tools, data_dir=tmp_path / "data"))
    assert sorted(m.key for m in restarted.all()) == ["word_stats@2.0.0"]
    assert [e.reason for e in restarted.errors] == [
        "slugify@1.1.0 is an evolved version of a tool version the tools directory no longer has; not served",
        "word_stats@1.1.0 is an evolved version of a tool version the tools directory no longer has; not served"]
    assert restarted.refused() == []  # nothing a manifest can mend (QA evolution M3)



def test_a_removed_manifest_version_takes_its_evolved_versions_with_it_whatever_its_namespace_keeps(tmp_path: Path) -> None:
    """QA 64c: caps 1.0.0 removed while a second manifest gave caps 1.2.0; the version evolved from
    1.0.0 went on serving 10 of the next 12 calls. Another manifest of the namespace keeps it only
    while the version it evolved from stays."""
    tools, evolved = tmp_path / "tools", tmp_path / "data" / "evolved"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    registry, _, watch = watched(tools)
    assert evolve_in(registry, evolved, "slugify") == "slugify@1.1.0"
    second = tools / "slugify_two" / "tool.yaml"
    shutil.copytree(tools / "slugify", second.parent)
    second.write_text(second.read_text().replace("version: 1.0.0", "version: 1.2.0"))
    assert watch.poll() == ["slugify@1.2.0"] and sorted(served(registry)) == ["slugify@1.0.0", "slugify@1.1.0", "slugify@1.2.0"]
    shutil.rmtree(tools / "slugify")
    watch.poll()
    assert sorted(served(registry)) == ["slugify@1.2.0"]
    restarted = load_registry(Settings(tools_dir=tools, data_dir=tmp_path / "data"))
    assert sorted(m.key for m in restarted.all()) == ["slugify@1.2.0"]


def test_a_manifest_the_loader_fails_on_unforeseen_is_refused_and_the_others_of_that_look_are_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """QA M: a Latin-1 manifest raised UnicodeDecodeError out of the look; the files after it in
    that look were recorded as seen and never served (a tool added beside it stayed unknown)."""
    import workers.tool_watch as tool_watch

    tools = tmp_path / "tools"
    registry, _, watch = watched(tools)
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "a_odd")
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "b_slugify")
    real = tool_watch.load_manifest

    def load(path: Path) -> ToolManifest:
        if Path(path).parent.name == "a_odd":
            raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte")
        return real(path)

    monkeypatch.setattr(tool_watch, "load_manifest", load)
    caplog.set_level(logging.INFO, logger="fittest.tools")
    assert watch.poll() == ["slugify@1.0.0"]
    assert any(r.levelname == "WARNING" and "a_odd" in r.getMessage() and "UnicodeDecodeError" in r.getMessage()
               for r in caplog.records)
    monkeypatch.setattr(tool_watch, "load_manifest", real)  # mended: read again at the next look
    assert watch.poll() == ["word_stats@1.0.0"]


def test_a_manifest_that_is_a_link_leading_nowhere_is_refused_by_name(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """QA N: a tool.yaml that was a broken symbolic link was skipped without a word."""
    tools = tmp_path / "tools"
    registry, _, watch = watched(tools)
    caplog.set_level(logging.INFO, logger="fittest.tools")
    (tools / "dangling").mkdir()
    (tools / "dangling" / "tool.yaml").symlink_to("/nonexistent/tool.yaml")
    assert watch.poll() == []
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "fittest.tools"] == [
        f"tool manifest refused: {tools / 'dangling' / 'tool.yaml'}: field '(file)': No such file or directory"]
    caplog.clear()
    assert watch.poll() == [] and not caplog.records  # said once, not at every look


def test_a_directory_that_cannot_be_listed_ends_the_look_and_takes_no_tool_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA Q: a memory worker out of file descriptors (EMFILE) read its tools directory as empty and
    stopped serving every tool; every call then ended no_candidates."""
    import errno
    import os

    tools = tmp_path / "tools"
    for tool in ("word_stats", "slugify"):
        shutil.copytree(EXAMPLE_TOOLS / tool, tools / tool)
    registry, _, watch = watched(tools)
    before = served(registry)
    real = os.scandir

    def scandir(path: str) -> object:
        raise OSError(errno.EMFILE, "Too many open files", path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(OSError, match="Too many open files"):
        watch.poll()
    assert served(registry) == before
    monkeypatch.setattr(os, "scandir", real)  # descriptors again: nothing had changed
    assert watch.poll() == [] and served(registry) == before


def test_evolved_versions_read_at_a_restart_stay_served_at_the_first_look(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """QA recheck: at every start of the memory worker, each evolved version was logged "no longer
    serving ...: tool.yaml is gone", its file in the data directory, which the watch of the tools
    directory never lists."""
    tools, data = tmp_path / "tools", tmp_path / "data"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    registry, _, _ = watched(tools)
    evolve_in(registry, data / "evolved", "slugify")
    restarted = load_registry(Settings(tools_dir=tools, data_dir=data))  # as a worker reads them at its start
    watch = ToolsDirWatch(tools, restarted, adding_to(restarted, []), revising(restarted))
    caplog.set_level(logging.INFO, logger="fittest.tools")
    assert watch.poll() == []
    assert sorted(served(restarted)) == ["slugify@1.0.0", "slugify@1.1.0"]
    assert not [m for m in caplog.messages if "no longer serving" in m], caplog.messages


def test_the_registry_names_the_manifests_refused_as_the_directory_reads_now(tmp_path: Path) -> None:
    """QA onboarding M3: `fittest health` names the memory worker's refused manifests from its
    registry, whose errors were those of its start: a manifest broken since went unnamed, and one
    fixed since stayed named."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    (tools / "bad").mkdir()
    (tools / "bad" / "tool.yaml").write_text("name: [")
    registry, _, watch = watched(tools)
    assert [e.path for e in registry.refused()] == [str(tools / "bad" / "tool.yaml")]  # as the start read it
    manifest = tools / "word_stats" / "tool.yaml"
    good = manifest.read_text()
    manifest.write_text(good.replace("version: 1.0.0", "version: v1.0"))  # broken since the start
    (tools / "bad" / "tool.yaml").unlink()  # gone since the start
    watch.poll()
    (refused,) = registry.refused()
    assert (refused.path, refused.field) == (str(manifest), "version")
    assert refused.reason.endswith("(word_stats@1.0.0 stays served as it was read before)")  # why it still serves
    manifest.write_text(good)  # fixed
    watch.poll()
    assert registry.refused() == []


def test_a_tool_folder_linked_in_while_the_workers_run_is_served(tmp_path: Path) -> None:
    """QA 55b L1: the watch, as a restart, follows a symbolic link to a tool's folder."""
    registry, added, watch = watched(tmp_path / "tools")
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tmp_path / "release" / "word_stats")
    (tmp_path / "tools" / "word_stats").symlink_to(tmp_path / "release" / "word_stats")
    assert watch.poll() == ["word_stats@1.0.0"]
    assert served(registry) == {"word_stats@1.0.0": str(tmp_path / "tools" / "word_stats" / "tool.yaml")}

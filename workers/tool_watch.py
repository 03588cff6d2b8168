"""The tools directory as it is now is what the memory worker serves, without a restart.

The memory worker reads the tools directory as it starts. Afterwards a thread beside it looks
every FITTEST_TOOLS_RESCAN_S for manifest files that are new, changed or gone (by modification
time and size, one stat per file; a python tool's module file counts as part of its manifest),
and serves what a restart would read:
- a new version is registered, its texts embedded there rather than in a call;
- a manifest changed in place replaces the version it defines (texts whose words changed are
  embedded again; a new `deprecated` or new tags reach the searches at once);
- the versions of a removed manifest (or one that now names another version) are no longer served,
  nor the versions evolved from them;
- of two files that define one version, the one a restart reads first is served (the tools
  directory in sorted order); the other is refused, and read again at every look until it wins.
A manifest that cannot be read is reported and its file's version stays served as it was last
read, so a file saved half-edited does not take a tool offline. Outcomes, feedback and quality stay
keyed to the version: an edit that changes what a version does is better given a new version,
which the memory worker then puts on trial against the version its tool serves
(evolution/promotions.py `trial_new_manifests`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from selection.manifest import ManifestError, ToolManifest, load_manifest
from selection.registry import ToolRegistry, check_paths, manifest_entries, python_module_file, with_file_problems

log = logging.getLogger("fittest.tools")

# Modification time (ns) and size of a manifest file, then of the module file of each python tool
# version it serves: an edit of the module alone has the manifest read again, and refused while the
# module does not parse (QA live F1: `fittest health` stayed ok, and a restart lost the tool).
Signature = tuple[int, ...]
UNREAD: Signature = (-1, -1)  # matches no file: read again at the next look
Found = list[tuple[ToolManifest, Path | None]]


class ToolsDirWatch:
    """What has changed under one tools directory since the last look, applied through `add` (the
    tool index's `ensure_tools` (workers/tool_index.py): registers versions and indexes their texts, all in one go) and
    `revise` (its `revise_tools`: replaces changed versions and drops removed ones)."""

    def __init__(self, tools_dir: Path, registry: ToolRegistry, add: Callable[[Found], list[ToolManifest]],
                 revise: Callable[[list[tuple[ToolManifest, Path]], dict[str, str]], None]) -> None:
        self.tools_dir = tools_dir
        self.registry = registry
        self.add = add
        self.revise = revise
        # Every file is read at the first look, those the registry was read from too: one removed or
        # changed between that read and this watch would otherwise count as seen, and stay served
        # as it was (a suite run under load removed a manifest in that gap: its version stayed on
        # trial, and served, with no file). What is unchanged is only read again, never reported.
        # Only the files of the tools directory, which each look lists: an evolved version's, in the
        # data directory, counted as gone at the first look, and was dropped (QA recheck: "no
        # longer serving ...: tool.yaml is gone" for every evolved version at each worker start).
        self._seen: dict[str, Signature] = {path: UNREAD for path in registry.source_files()
                                            if Path(path).resolve().is_relative_to(tools_dir.resolve())}
        self._refused: dict[str, ManifestError] = {}  # file -> why, read again at every look (its script may come later)
        self._unindexed: dict[str, tuple[ToolManifest, Path | None]] = {}  # handed to `add` again at the next look
        self._dir_gone = False  # the tools directory was not there at the last look (`poll`)
        self._modules: tuple[int, dict[str, list[Path]]] = (-1, {})  # the registry's revision it was built at

    def poll(self) -> list[str]:
        """Apply what changed since the last look; the keys of the versions newly served. While the
        tools directory itself is not there, nothing changes: its versions stay registered as last
        read (the executor does not run them meanwhile: workers/tasks/execution.py `code_gone`), and
        a warning says so once (QA resilience: moved away for a deploy, it was read as empty, every
        tool and evolved version stopped being served, each with an info line, and every call ended
        no_candidates)."""
        if not self.tools_dir.is_dir():
            if not self._dir_gone:
                log.warning("FITTEST_TOOLS_DIR (%s) is not a directory: its tools stay registered, not run, until it "
                            "is back", self.tools_dir, extra={"event": "tools_dir_gone", "path": str(self.tools_dir)})
            self._dir_gone = True
            return []
        if self._dir_gone:
            log.warning("FITTEST_TOOLS_DIR (%s) is back: serving what it holds now", self.tools_dir,
                        extra={"event": "tools_dir_back", "path": str(self.tools_dir)})
            self._dir_gone = False
        current = self._signatures()
        changed = [Path(path) for path, signature in current.items() if self._seen.get(path) != signature]
        gone = {path for path in (*self._seen, *self._refused) if path not in current}
        self._seen = current
        self._refused = {path: why for path, why in self._refused.items() if path in current}
        new = dict(self._unindexed)  # by key: two new files may define one version
        revised: dict[str, tuple[ToolManifest, Path]] = {}
        dropped = {key: f"{path} is gone" for path in gone for key in self.registry.defined_by(path)}
        for path in sorted(changed):  # in the order a restart reads them: of two files of one version, the first wins
            try:
                manifest = load_manifest(path)
                check_paths(manifest, path)
            except Exception as exc:  # a ManifestError; anything else the loader did not foresee too (QA M:
                # raised out of the look, it cost the files after it in that look: they counted as seen, never served)
                why = (with_file_problems(exc) if isinstance(exc, ManifestError)
                       else ManifestError(path, "(file)", f"cannot be read: {type(exc).__name__}: {exc}"))
                kept = ", ".join(self.registry.defined_by(path))
                self._refuse(path, why, f" ({kept} stays served as it was read before)" if kept else "")
                continue
            for key in self.registry.defined_by(path):
                if key != manifest.key:
                    dropped[key] = f"{path} now defines {manifest.key}"
            owner = self._owner(manifest.key, new, revised, gone)
            if owner is not None and owner != str(path) and not self._read_before(path, owner):
                self._refuse(path, ManifestError(path, "version", f"{owner} already defines {manifest.key}"))
                continue
            self._refused.pop(str(path), None)
            if owner is not None and owner != str(path):  # a restart reads this file first: the other one waits
                self._refuse(Path(owner), ManifestError(owner, "version", f"{path} already defines {manifest.key}"))
                new.pop(manifest.key, None)
                revised.pop(manifest.key, None)
            served = self.registry.get(manifest.key)
            if served is None:
                new[manifest.key] = (manifest, path)
            else:  # changed in place, moved to this file, or taken over from a file that comes later
                dropped.pop(manifest.key, None)
                if served != manifest or self.registry.source(manifest.key) != str(path):
                    revised[manifest.key] = (manifest, path)
        self._note_refusals()
        coming = [m for m, _ in new.values()] + [m for m, _ in revised.values()]
        for key in self.registry.orphans(leaving=dropped, coming=coming):
            evolved = self.registry.get(key)
            root = None if evolved is None else self.registry.root(evolved)
            started = f"{root.key}, which it evolved from," if root is not None else "the version it evolved from"
            dropped[key] = f"{started} is no longer in {self.tools_dir}"
        retry: dict[str, tuple[ToolManifest, Path | None]] = {}
        failed: Exception | None = None
        if revised or dropped:
            try:
                self.revise(list(revised.values()), dropped)
            except Exception as exc:  # replaced and dropped, but not indexed: handed to `add` at the next look
                retry, failed = dict(revised), exc
            self._report(revised, dropped)
        try:
            added = self.add(list(new.values())) if new else []
        except Exception:
            self._unindexed = {**new, **retry}  # registered perhaps, but not indexed: tried again at the next look
            raise
        self._unindexed = retry
        for manifest in added:
            log.info("serving new tool version %s from %s", manifest.key, self.registry.source(manifest.key),
                     extra={"event": "tool_added", "tool": manifest.key, "path": self.registry.source(manifest.key)})
        if failed is not None:
            raise failed
        return [m.key for m in added]

    def _owner(self, key: str, new: dict[str, tuple[ToolManifest, Path | None]],
               revised: dict[str, tuple[ToolManifest, Path]], gone: set[str]) -> str | None:
        """The file that serves `key` as this look stands so far (None: no file does, or it is gone);
        a source that is not a file (an evolved version's) starts with '<'."""
        if key in revised:
            return str(revised[key][1])
        if key in new:
            pending = new[key][1]
            return str(pending) if pending is not None else "<evolved>"
        source = self.registry.source(key)
        return None if source is None or source in gone else source

    def _read_before(self, path: Path, other: str) -> bool:
        """Whether a restart reads `path` (a file of the tools directory) before `other`, which then
        defines its version in vain: the tools directory in sorted order, then the evolved versions."""
        if other.startswith("<"):  # not read from a file
            return False
        return not Path(other).is_relative_to(self.tools_dir) or path < Path(other)

    def _refuse(self, path: Path, why: ManifestError, note: str = "") -> None:
        """Leave a file unserved and read it again at every look (its script may come later, or the
        file that holds its version may go); each reason is reported once. `note` (the version that
        stays served meanwhile) is kept with the reason, for `fittest health` to say too."""
        if note:
            why = ManifestError(why.path, why.field, why.reason + note, why.fields)
        previous = self._refused.get(str(path))
        if previous is None or str(previous) != str(why):
            log.warning("tool manifest refused: %s", why,
                        extra={"event": "tool_manifest_refused", "path": str(path)})
        self._refused[str(path)] = why
        self._seen.pop(str(path), None)

    def _note_refusals(self) -> None:
        """The registry's errors as this look leaves them: the files of the tools directory refused
        now, and those read from elsewhere at the start (evolved versions). `fittest health` names
        them from there (QA onboarding M3); the errors of the start alone went on naming a manifest
        fixed since, and never one broken since. Replaced in one assignment, as a health probe
        reads them from another thread."""
        elsewhere = [e for e in self.registry.errors if not Path(e.path).is_relative_to(self.tools_dir)]
        self.registry.errors = elsewhere + [self._refused[path] for path in sorted(self._refused)]

    @staticmethod
    def _report(revised: dict[str, tuple[ToolManifest, Path]], dropped: dict[str, str]) -> None:
        for key, (_, path) in revised.items():
            log.info("serving %s as %s now defines it", key, path, extra={"event": "tool_changed", "tool": key, "path": str(path)})
        for key, why in dropped.items():
            log.info("no longer serving %s: %s", key, why, extra={"event": "tool_removed", "tool": key})

    def _signatures(self) -> dict[str, Signature]:
        """Every manifest file below the directory, as the registry reads them (`manifest_entries`):
        0.17 s at 10,000 tools, 0.2 ms for the 7 example tools."""
        found: dict[str, Signature] = {}
        modules = self._modules_by_source()
        for entry in manifest_entries(self.tools_dir):
            try:
                stat = entry.stat()
            except OSError:  # a link that leads nowhere: refused by name, as a restart does (QA N)
                try:
                    stat = entry.stat(follow_symlinks=False)
                except OSError:  # removed while we looked
                    continue
            found[entry.path] = (stat.st_mtime_ns, stat.st_size, *_stats(modules.get(entry.path, ())))
        return found

    def _modules_by_source(self) -> dict[str, list[Path]]:
        """The module file of each python tool version served, by the manifest file it was read from;
        built again only when the registry changed (it doubled a look's time at 3,000 tools)."""
        revision, modules = self._modules
        if revision != self.registry.revision:
            revision, modules = self.registry.revision, {}  # the revision first: a change meanwhile has it built again
            for manifest in self.registry.all():
                source, module = self.registry.source(manifest.key), python_module_file(manifest)
                if source is not None and module is not None:
                    modules.setdefault(source, []).append(module)
            self._modules = revision, modules
        return modules


def _stats(files: Iterable[Path]) -> Signature:
    """Modification time and size of each file, (-1, -1) for one that is not there."""
    signature: list[int] = []
    for file in files:
        try:
            stat = file.stat()
            signature += (stat.st_mtime_ns, stat.st_size)
        except OSError:
            signature += UNREAD
    return tuple(signature)


def watch_in_background(watch: ToolsDirWatch, every_s: float,
                        then: Callable[[list[str]], None] | None = None) -> threading.Event:
    """Poll `watch` every `every_s` seconds in a daemon thread, handing the keys of the versions
    newly served to `then`; set the returned event to stop it."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                served = watch.poll()
                if served and then is not None:
                    then(served)
            except Exception:  # a look that failed (a file system hiccup) is tried again at the next
                log.warning("looking for new tool manifests failed", exc_info=True, extra={"event": "tool_watch_failed"})

    threading.Thread(target=loop, name="fittest-tools-watch", daemon=True).start()
    return stop

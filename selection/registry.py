"""The tool registry: every manifest of the tools directories, indexed the ways selection asks.

Loading never stops at the first bad manifest: each bad file becomes a `ManifestError` in
`registry.errors` (naming the file, the field and the reason) and the others still load, so one
team's typo does not take every tool offline.

A manifest may only refer to files inside its own tool directory. The directory is what an
operator reviews and what evolution copies; a path that leaves it (`..`, an absolute path, a
symlink pointing elsewhere) would let a manifest run code nobody reviewed, so it is refused at
load time rather than discovered at the first call.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import string
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import semver

from selection.manifest import (
    ExecutableImplementation,
    HttpImplementation,
    ManifestError,
    PythonImplementation,
    ToolManifest,
    load_manifest,
    entrypoint_file,
    tool_key,
)

MANIFEST_SUFFIXES = (".yaml", ".yml")
DIRECTORY = "(directory)"  # the `field` of the error that says a tools directory is not there: no manifest's
# The `field` of the error that says an evolved version is not served because the tool it evolved
# from left the tools directory: what a removal is meant to do, and nothing a manifest can mend.
ORPHANED = "(tool removed)"
TOOL_DIR_PLACEHOLDER = "tool_dir"


def manifest_entries(root: Path) -> Iterator[os.DirEntry[str]]:
    """Every manifest file below `root`, in no set order, as a restart and the tools watch both read
    them. A symbolic link to a folder is followed where tool folders sit, as a team deploying a
    tool's folder as a link means it (QA 55b L1: such a tool was left out without a word), but not
    inside a tool's own folder (one holding a manifest), whose links are its code's business and
    may lead anywhere (an evolved version's link out of its folder read the whole tree above it
    again); each real folder is read once, so a link back up is no loop. A link that leads nowhere,
    named as a manifest, is yielded too, to be refused by name (QA N). A folder removed while it is
    read is skipped; another OSError (EMFILE) is raised: read as empty, the directory would stop
    serving every tool (QA Q)."""
    seen: set[tuple[int, int]] = set()
    pending = [str(root)]
    while pending:
        folder = pending.pop()
        try:
            real = os.stat(folder)
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        if (real.st_dev, real.st_ino) in seen:
            continue
        seen.add((real.st_dev, real.st_ino))
        manifests, folders, links = [], [], []
        for entry in entries:
            try:
                # a FIFO or a device so named too: refused by name, not skipped unsaid (QA 64d)
                if entry.name.endswith(MANIFEST_SUFFIXES) and not entry.is_dir(follow_symlinks=False):
                    manifests.append(entry)
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_symlink() and entry.is_dir():
                    links.append(entry.path)
            except OSError:
                continue
        yield from manifests
        pending += folders if manifests else folders + links


def _semver_key(manifest: ToolManifest) -> semver.Version:
    return semver.Version.parse(manifest.version)


def in_listing_order(manifests: Iterable[ToolManifest]) -> list[ToolManifest]:
    """Name, then semantic version: the order every listing of the registry uses."""
    return sorted(manifests, key=lambda m: (m.name, _semver_key(m)))


def _inside(path: Path, root: Path) -> bool:
    """Whether `path`, with every symlink and `..` resolved, is `root` or lies below it."""
    return path.resolve().is_relative_to(root.resolve())


def python_module_file(manifest: ToolManifest) -> Path | None:
    """The file a python entrypoint names inside the tool directory (`a.b:f` → `a/b.py`).

    None when the manifest has no tool directory; the file need not exist (the entrypoint is then
    an importable module).
    """
    impl = manifest.implementation
    if not isinstance(impl, PythonImplementation) or manifest.tool_dir is None:
        return None
    return Path(manifest.tool_dir, entrypoint_file(impl.entrypoint))


def _tool_dir_paths(arg: str) -> Iterable[tuple[str, str]]:
    """For each `{tool_dir}` in one argv entry: (the rest of the entry, the next placeholder or '').

    Everything after `{tool_dir}` up to the end of the argument is taken as the path, so
    `--script={tool_dir}/run.py` yields `/run.py`.
    """
    parts = list(string.Formatter().parse(arg))
    for i, (_, field, _, _) in enumerate(parts):
        if field != TOOL_DIR_PLACEHOLDER:
            continue
        rest = parts[i + 1 :]
        tail = "".join(lit for lit, _, _, _ in rest)
        following = next((f for _, f, _, _ in rest if f is not None), "")
        yield tail, following


def check_paths(manifest: ToolManifest, source: str | Path) -> None:
    """Refuse a manifest whose files lie outside its tool directory (see the module docstring).

    Checked: the python entrypoint's file, every `{tool_dir}/...` path of an executable argv
    (which must exist and must not contain another placeholder, since an input value could then
    choose the file), and `evolved_file`. A path that cannot be resolved (a symbolic link loop)
    refuses the manifest too, rather than stopping the load of every other one (QA M).
    """
    try:
        _check_paths(manifest, source)
    except (RuntimeError, OSError) as exc:
        raise ManifestError(source, "implementation", f"a file it names cannot be resolved: {exc}") from exc


def _check_paths(manifest: ToolManifest, source: str | Path) -> None:
    if manifest.tool_dir is None:
        return
    root = Path(manifest.tool_dir)
    impl = manifest.implementation

    module_file = python_module_file(manifest)
    if module_file is not None and (module_file.exists() or module_file.is_symlink()):
        if not _inside(module_file, root):
            raise ManifestError(source, "implementation.entrypoint", f"{module_file} leads outside the tool directory {root}")
        if isinstance(impl, PythonImplementation) and module_file.is_file():
            if (missing := function_missing(module_file, impl.entrypoint.partition(":")[2])) is not None:
                raise ManifestError(source, "implementation.entrypoint", missing)
    elif module_file is not None and isinstance(impl, PythonImplementation):
        if (nowhere := _module_nowhere(impl, root) or _not_a_tools_module(impl)) is not None:
            raise ManifestError(source, "implementation.entrypoint", nowhere)

    if isinstance(impl, ExecutableImplementation):
        for i, arg in enumerate(impl.argv):  # each one parses: the manifest checked it
            for tail, following in _tool_dir_paths(arg):
                field = f"implementation.argv.{i}"
                if following:
                    raise ManifestError(source, field, f"'{{{following}}}' inside a {{tool_dir}} path would let a value choose the file")
                target = root / tail.lstrip("/")
                if not _inside(target, root):
                    raise ManifestError(source, field, f"'{arg}' leads outside the tool directory {root}")
                if not target.exists():
                    raise ManifestError(source, field, f"'{arg}': {target} does not exist")
                if i == 0 and target.is_file() and not os.access(target, os.X_OK):
                    # Every call failed "Permission denied" until an evolution's copy of the file,
                    # made executable, ran (QA 55b L3: the changelog credited the retry mutator).
                    raise ManifestError(source, field, f"'{arg}': {target} is the program to run and is not executable "
                                                       f"(chmod +x it, or name its interpreter first: [\"{{python}}\", \"{arg}\"])")

    if manifest.evolved_file is not None:
        target = root / manifest.evolved_file  # an absolute evolved_file replaces root here
        if not _inside(target, root):
            raise ManifestError(source, "evolved_file", f"{manifest.evolved_file} leads outside the tool directory {root}")


def with_file_problems(refused: ManifestError) -> ManifestError:
    """A manifest refused for some fields, with what `check_paths` finds wrong with the files its
    valid implementation names: an author mends both at once (QA 55b L9: a manifest with a schema
    error was refused for it alone, and once mended, refused again for its missing program)."""
    if refused.implementation is None:
        return refused
    try:
        check_paths(refused.implementation, refused.path)
    except ManifestError as files:
        return ManifestError(refused.path, refused.field, f"{refused.reason}; field '{files.field}': {files.reason}",
                             [*refused.fields, files.field])
    return refused


# The packages of fittest itself: a function of theirs is the workers' own code, no tool's.
OWN_PACKAGES = frozenset({"workers", "selection", "evolution", "fittest"})


def _not_a_tools_module(impl: PythonImplementation) -> str | None:
    """Why an importable module, not a file of the tool's folder, is no tool's: Python's own
    library or fittest's packages, whose functions would run the caller's input as their arguments
    inside the executor (QA 57c L1: `subprocess:check_output` ran a shell command its input's keys
    spelled; `os:system` and `workers.sandbox:main` loaded too). None for a package installed for
    a tool."""
    module = impl.entrypoint.partition(":")[0]
    top = module.partition(".")[0]
    if top in OWN_PACKAGES:
        return f"module '{module}' is fittest's own code, not a tool: name a function of the tool's folder or of a package installed for it"
    if top in sys.stdlib_module_names:
        return (f"module '{module}' is of Python's standard library, not a tool: name a function of the tool's folder "
                "or of a package installed for it")
    return None


def _module_nowhere(impl: PythonImplementation, root: Path) -> str | None:
    """Why an entrypoint's module, not a file of the tool's folder, cannot be imported either (a
    typo: QA integration M3, `uppercase:run` beside upper.py passed the onboarding check, and each
    call failed as an outage); None when this Python finds it. Only the top-level package is looked
    up: finding it runs nothing, where finding `a.b` would import `a`."""
    module = impl.entrypoint.partition(":")[0]
    top = module.partition(".")[0]
    # A package or a module path of the folder runs only as its file, `a/b.py` (QA recheck M-A: with
    # `shoutpkg/__init__.py`, `shoutpkg:run` passed and failed every call as unavailable, as did the
    # typo `lib.shuot:run` beside lib/shout.py).
    if not ((root / top).exists() or (root / f"{top}.py").exists()) and importlib.util.find_spec(top) is not None:
        return None
    modules = sorted(".".join(p.relative_to(root).with_suffix("").parts) for p in root.rglob("*.py"))
    close = difflib.get_close_matches(module, modules, n=1)
    hint = f" (did you mean {close[0]}:{impl.entrypoint.partition(':')[2]}?)" if close else ""
    return f"module '{module}' is neither {entrypoint_file(impl.entrypoint)} in the tool's folder nor a module Python can import{hint}"


# Calls through which a module may bind any name: reading cannot tell which, so they are let through.
DYNAMIC_BINDING = frozenset({"globals", "vars", "setattr", "exec"})


def function_missing(module_file: Path, function: str) -> str | None:
    """Why the entrypoint's module cannot hold `function`, read without running it (an import runs a
    tool's code); None when it may. A module that binds names in ways reading cannot follow (a star
    import, a module `__getattr__`, `globals()`, `vars()`, `setattr()`, `exec()`) may hold any name."""
    try:
        tree = ast.parse(module_file.read_bytes(), filename=str(module_file))
    except (SyntaxError, ValueError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        return f"{module_file.name} is not valid Python{where}: {exc.msg if isinstance(exc, SyntaxError) else exc}"
    except OSError as exc:
        return f"{module_file.name} cannot be read: {exc}"
    names: set[str] = set()
    defs: list[ast.FunctionDef | ast.AsyncFunctionDef] = []  # the module's own definitions of `function`
    rebound = False
    pending: list[ast.stmt] = list(tree.body)
    while pending:  # the module's own statements, and those of its top-level if / try / with / for / match blocks
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if not isinstance(node, ast.ClassDef) and node.name == function:
                defs.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return None
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    pending.append(child)
                elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    pending.extend(child.body)
            bound = [name for target in _targets(node) for name in _bound(target)]
            rebound = rebound or function in bound  # `run = wrapped(run)`: what is called is not the definition read
            names.update(bound)
    for any_node in ast.walk(tree):  # names bound from anywhere: `global f` in a function, `(f := ...)`, `case f:`
        if isinstance(any_node, ast.Global):
            names.update(any_node.names)
        elif isinstance(any_node, ast.NamedExpr) and isinstance(any_node.target, ast.Name):
            names.add(any_node.target.id)
        elif isinstance(any_node, (ast.MatchAs, ast.MatchStar)) and any_node.name:
            names.add(any_node.name)
        elif isinstance(any_node, ast.Name) and any_node.id in DYNAMIC_BINDING:
            return None
    if function in names or "__getattr__" in names:
        return _signature_unfit(defs[0]) if len(defs) == 1 and not defs[0].decorator_list and not rebound else None
    defined = sorted(n for n in names if not n.startswith("_"))
    return (f"{module_file.name} defines no '{function}'"
            + (f" (it defines {', '.join(defined[:8])}{', ...' if len(defined) > 8 else ''})" if defined else ""))


def _signature_unfit(definition: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """Why a tool's function cannot take the one argument it is called with, the input (a dict), or
    None. QA 64c: `def run(text, sep)` was accepted, and each call failed as a refusal of the input,
    "the caller's mistake", pointing at the runner's own line."""
    a = definition.args
    positional = [*a.posonlyargs, *a.args]
    required = len(positional) - len(a.defaults)
    keywords = [k.arg for k, default in zip(a.kwonlyargs, a.kw_defaults) if default is None]
    if (positional or a.vararg) and required <= 1 and not keywords:
        return None
    said = ", ".join([p.arg for p in positional] + ([f"*{a.vararg.arg}"] if a.vararg else []) + keywords)
    return (f"{definition.name}({said}) cannot take what it is called with: one argument, the call's input (a dict), "
            f"as in def {definition.name}(input)")


def _targets(node: ast.stmt) -> list[ast.expr]:
    """What an assignment-like statement assigns to."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        return [node.target]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def _bound(target: ast.expr) -> list[str]:
    """The names an assignment target binds (`a`, `a, *b`); `x[k] = ...` and `x.k = ...` bind none."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound(element)]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return []


class ToolRegistry:
    """Tool versions by key (`name@version`), with the indexes selection filters on.

    Deprecated versions stay in every listing and index (they can still be called by exact
    version); skipping them when ranking is selection's decision.
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolManifest] = {}
        self._sources: dict[str, str] = {}
        self._by_name: dict[str, set[str]] = defaultdict(set)  # namespace -> its version keys
        self.errors: list[ManifestError] = []
        self.orphaned: list[str] = []  # evolved versions read and not served: their chain starts at no version served
        self.revision = 0  # moves at every change, for what is built from the whole registry

    @classmethod
    def load(cls, dirs: Sequence[Path]) -> ToolRegistry:
        """Read every `*.yaml` / `*.yml` below `dirs` (recursively, in a stable order)."""
        registry = cls()
        for root in dirs:
            root = Path(root)
            if not root.is_dir():
                registry.errors.append(ManifestError(root, DIRECTORY, "not a directory"))
                continue
            files = sorted(Path(entry.path) for entry in manifest_entries(root))
            for path in files:
                try:
                    registry.add(load_manifest(path), source=path)
                except ManifestError as exc:
                    registry.errors.append(with_file_problems(exc))
        return registry

    def refused(self) -> list[ManifestError]:
        """The manifest files refused (file, field, reason), without the error of a tools directory
        that is not there, which names no manifest and is reported as such, nor the evolved
        versions of a removed tool, left out as its removal meant (QA evolution M3: they kept
        `fittest tools --refused` failing for good, and `show` said they were served)."""
        return [e for e in self.errors if e.field not in (DIRECTORY, ORPHANED)]

    def add(self, manifest: ToolManifest, source: str | Path | None = None) -> None:
        """Register one tool version; raises ManifestError on a duplicate key or a path escape."""
        origin = str(source) if source is not None else f"<{manifest.key}>"
        check_paths(manifest, origin)
        previous = self._sources.get(manifest.key)
        if previous is not None:
            raise ManifestError(origin, "version", f"{manifest.key} is already defined by {previous}")
        self._tools[manifest.key] = manifest
        self._sources[manifest.key] = origin
        self._by_name[manifest.name].add(manifest.key)
        self.revision += 1

    def replace(self, manifest: ToolManifest, source: str | Path) -> None:
        """Serve a manifest file's new content for a version it (or a file it moved from) defined,
        as a restart would read it; raises ManifestError for a version this registry does not hold."""
        if manifest.key not in self._tools:
            raise ManifestError(source, "version", f"{manifest.key} is not served, so there is nothing to replace")
        check_paths(manifest, source)
        self._tools[manifest.key] = manifest
        self._sources[manifest.key] = str(source)
        self.revision += 1

    def remove(self, key: str) -> ToolManifest | None:
        """Stop serving a version (its manifest file is gone); what it was, or None."""
        manifest = self._tools.pop(key, None)
        if manifest is not None:
            del self._sources[key]
            self._by_name[manifest.name].discard(key)
            if not self._by_name[manifest.name]:
                del self._by_name[manifest.name]
            self.revision += 1
        return manifest

    def source(self, key: str) -> str | None:
        """Where a tool version came from (its manifest file), for messages and `fittest show`."""
        return self._sources.get(key)

    def source_files(self) -> set[str]:
        """The manifest files the versions were read from."""
        return {source for source in list(self._sources.values()) if not source.startswith("<")}

    def defined_by(self, source: str | Path) -> list[str]:
        """The keys of the versions read from one manifest file."""
        return [key for key, origin in list(self._sources.items()) if origin == str(source)]

    def get(self, key: str) -> ToolManifest | None:
        return self._tools.get(key)

    def http_root(self, manifest: ToolManifest) -> HttpImplementation | None:
        """The URL and headers an evolved version of an http tool calls with: those of the manifest
        its evolution chain starts at, as this registry reads it now. An http tool has no code to
        copy: its evolved versions ran with the URL and the headers (a bearer token) it had when
        they evolved, written into their files, and a manifest edited in place (a moved service, a
        rotated token) never reached them (QA 55b M2). None: not evolved, a chain this registry
        cannot follow, or one that starts at another kind of tool."""
        if manifest.parent_version is None:
            return None
        root = self.root(manifest)
        implementation = None if root is None else root.implementation
        return implementation if isinstance(implementation, HttpImplementation) else None

    def __contains__(self, key: object) -> bool:
        return key in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def all(self) -> list[ToolManifest]:
        return in_listing_order(list(self._tools.values()))  # copied at once: the tools watch changes it meanwhile

    def namespaces(self) -> list[str]:
        return sorted(self._by_name)

    def versions(self, name: str) -> list[ToolManifest]:
        """Every version of a namespace, lowest semantic version first."""
        keys = tuple(self._by_name.get(name, ()))  # copied at once: a version may be added meanwhile (tool_watch)
        return in_listing_order(m for k in keys if (m := self._tools.get(k)) is not None)  # or removed

    def orphans(self, leaving: Iterable[str] = (), coming: Iterable[ToolManifest] = ()) -> list[str]:
        """The evolved versions whose evolution chain no longer starts at a version the tools
        directory serves, once the versions `leaving` are gone and those `coming` are served: a
        tool's manifest version removed from the tools directory, or edited to name another version,
        takes the versions evolved from it with it, as a user removing it expects (they run copies
        of its code, or its URL), whatever other versions its namespace keeps (QA 64c: an evolved
        version of a removed caps 1.0.0 went on serving 10 of 12 calls beside the caps 1.2.0 left;
        one of an http tool edited to 1.0.1 stayed served first, calling the old URL)."""
        gone = set(leaving)
        known = {key: m for key, m in list(self._tools.items()) if key not in gone}
        known.update((m.key, m) for m in coming)
        return sorted(key for key in known if key in self._tools and self._root(known[key], known) is None)

    def root(self, manifest: ToolManifest) -> ToolManifest | None:
        """The version the evolution chain of `manifest` starts at (itself when it is no evolved
        version), or None when this registry cannot follow the chain to one."""
        return self._root(manifest, self._tools)

    @staticmethod
    def _root(manifest: ToolManifest, known: Mapping[str, ToolManifest]) -> ToolManifest | None:
        seen: set[str] = set()
        while manifest.parent_version is not None:
            if manifest.key in seen:
                return None
            seen.add(manifest.key)
            parent = known.get(tool_key(manifest.name, manifest.parent_version))
            if parent is None:
                return None
            manifest = parent
        return manifest

    def did_you_mean(self, name: str) -> str:
        """A hint naming the served tool whose name is close to `name` ("did you mean temp_convert?"),
        or "": a typo of a tool's name otherwise reads as a tool nobody has (QA 64c: `--namespace
        tmp_convert` was served by another team's slugify, `feedback add slugfy` named nothing)."""
        base, at, version = name.partition("@")
        names = {n.casefold(): n for n in self.namespaces()}  # QA 64d: `SLUGIFY`, `slugfy@1.0.0` got no hint
        close = difflib.get_close_matches(base.casefold(), list(names), n=1, cutoff=0.8)
        return f"did you mean {names[close[0]]}{at}{version}?" if close and names[close[0]] != base else ""

    def no_tool_named(self, name: str, meant: str | None = None) -> str:
        """"no tool named 'NAME'", with `did_you_mean`'s hint of `meant` (NAME by default; NAME@VERSION
        to suggest that version of the close name): the one wording of a name no tool has."""
        hint = self.did_you_mean(meant or name)
        return f"no tool named '{name}'" + (f" ({hint})" if hint else "")

    def has_side_effects(self, name: str) -> bool:
        """Whether a version of the namespace says it changes something outside itself
        (`side_effects: true`): a call that names it is served by its versions alone (workers/selector.py)."""
        return any(m.side_effects for m in self.versions(name))

    def original(self, name: str) -> ToolManifest | None:
        """The namespace's first registered implementation: the lowest version with no parent."""
        return next((m for m in self.versions(name) if m.parent_version is None), None)

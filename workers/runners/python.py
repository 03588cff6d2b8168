"""The `python` runner: call `function(input)` of a module, in this process.

The module is the file `<tool_dir>/<module path>.py` when it exists (loaded under a module name
unique to the tool version, so two versions of one tool never share module state), else an
importable module of that name. Loaded modules are cached per process, since importing on every
call would cost more than most tools take to run; a module file whose modification time or size
changed is loaded again at its next call, so a tool's file edited in place runs as it now reads in
every worker process, as an executable tool's does (QA M: pool processes that had loaded the file
before an edit went on running the old code, so one version gave two outputs). Only the file the
entrypoint names is watched; a module it imports stays as first imported until the worker restarts.
A file that does not parse or lacks the function (saved half-edited or empty, which the registry
refuses too), or that is gone, leaves the module as last loaded running; a process that never loaded it fails the
attempt as `unavailable`, an outage the breaker's probe ends once the file serves again, not a crash
of the tool's code.

The call runs in a daemon thread so the attempt can have a hard timeout. Python cannot kill a
thread, but it can raise an exception in one: on timeout the thread is sent `ToolStopped`, which
the interpreter raises at the thread's next Python instruction, so a tool that spins in Python
code stops there instead of holding a core of the worker for good. A thread blocked in C (a
socket read without a timeout, a sleep) sees it only when that call returns: it is abandoned
meanwhile, its result discarded. An in-process tool also shares the worker's memory and has no
resource limits, so a tool that can hang, loop or eat memory belongs in an `executable` manifest,
whose process is limited and killed. An evolved version runs here only when it runs its original's
code unchanged; code fittest wrote runs in a limited subprocess (workers/runners/isolated.py).

Exceptions map to failure classes by convention (see `examples/tools/README.md`):
ValueError / TypeError / KeyError → bad_input; connection errors → unavailable; anything else →
crash.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import importlib.util
import logging
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from selection.manifest import PythonImplementation, ToolManifest
from selection.models import FailureClass
from selection.registry import function_missing, python_module_file
from workers.runners.base import Deadline, RunLimits, RunOutcome, judge_output
from workers.runners.python_host import classify, describe
from workers.runners.tool_prints import Printed, kept_apart

log = logging.getLogger("fittest.runners")

JOIN_SLICE_S = 0.25  # how long the runner waits for the tool's thread between looks at its deadline

ToolFunction = Callable[[dict[str, Any]], Any]

# By tool version and module file (or name): the module, and the file's (mtime_ns, size) when loaded.
_modules: dict[tuple[str, str], tuple[ModuleType, tuple[int, int] | None]] = {}
_load_locks: dict[tuple[str, str], threading.Lock] = {}
# The stamp of a module file that could not serve its version when called, and why (it did not parse,
# or lacked the function): read once per edit, and logged once (QA ops M1: a tool's file saved
# half-edited, which the registry refuses, was run and charged a crash).
_unservable: dict[tuple[str, str], tuple[tuple[int, int], str]] = {}
_locks_lock = threading.Lock()


# How long a timed-out call's thread is given to end once told to stop: a thread running Python
# code stops within a switch interval (5 ms), so this only bounds the wait for one that does not.
STOP_GRACE_S = 0.1


class ToolStopped(BaseException):
    """Raised in a python tool's thread when its attempt timed out. A BaseException, like
    SystemExit, so that the tool's own `except Exception` does not swallow it."""


def stop_thread(thread: threading.Thread) -> bool:
    """Raise ToolStopped in `thread` at its next Python instruction; True when it ended within
    STOP_GRACE_S (False: it is blocked in C, and runs on until that call returns)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(ToolStopped))
    thread.join(STOP_GRACE_S)
    return not thread.is_alive()


class ToolLoadError(Exception):
    """The tool's code could not be loaded; carries the failure class to report."""

    def __init__(self, error_class: FailureClass, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


def _module_name(manifest: ToolManifest, path: Path) -> str:
    """A module name no other tool version (or real package) uses, stable for one file."""
    digest = hashlib.sha1(f"{manifest.key}\0{path}".encode()).hexdigest()[:12]
    return f"fittest_tool_{manifest.name}_{digest}"


@contextmanager
def _own_imports(tool_dir: Path) -> Iterator[None]:
    """The tool's directory importable while its module loads, so that its entry file can import the
    files beside it (`import helper`, `from lib.helper import f`), as its evolved copies and an
    executable tool can (QA evolution: "module 'main' not found: No module named 'helper'", taken
    for an outage and "fixed" with retries). What it imported from there leaves `sys.modules`
    afterwards: another tool's `helper.py` must not be handed this one's. An import the tool makes
    later, inside its function, finds only what the worker finds."""
    where = str(tool_dir)
    before = set(sys.modules)
    sys.path.insert(0, where)
    try:
        yield
    finally:
        if where in sys.path:  # a tool's module may have taken it off itself
            sys.path.remove(where)
        for name in set(sys.modules) - before:
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if origin and Path(origin).resolve().is_relative_to(tool_dir.resolve()):
                del sys.modules[name]


def _load_file(manifest: ToolManifest, path: Path) -> ModuleType:
    name = _module_name(manifest, path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ToolLoadError(FailureClass.crash, f"cannot load {path} as a python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing so that dataclasses, pickling and typing can find the module.
    sys.modules[name] = module
    try:
        with _own_imports(Path(manifest.tool_dir or path.parent)):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _file_stamp(path: Path | None) -> tuple[int, int] | None:
    """What tells an edited module file: its modification time and size (None: no such file)."""
    try:
        found = path.stat() if path is not None else None
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size) if found is not None and stat.S_ISREG(found.st_mode) else None


def load_function(manifest: ToolManifest) -> ToolFunction:
    """The tool's function, from its module loaded once per process; raises ToolLoadError. The
    function is looked up at each call, so a manifest changed in place to name another function
    of the same module (the tools watch serves it) runs that one."""
    impl = manifest.implementation
    assert isinstance(impl, PythonImplementation)
    module_name, _, func_name = impl.entrypoint.partition(":")
    path = python_module_file(manifest)
    cache_key = (manifest.key, str(path) if path is not None else module_name)
    with _locks_lock:
        lock = _load_locks.setdefault(cache_key, threading.Lock())
    # One import per tool version even when threads call it at once; a lock per version, so an
    # import that hangs holds up only its own tool.
    with lock:
        stamp = _file_stamp(path)
        module, loaded = _modules.get(cache_key, (None, None))
        if module is None or stamp != loaded:
            if path is not None and stamp is None and loaded is not None:
                # Loaded from its file, which is gone (a deploy that removes and copies again): the
                # watch refuses it and says the version stays served (QA recheck 47: every call of
                # it failed as an outage meanwhile), so it runs as last loaded, as a half-edited one.
                return _as_last_loaded(manifest, cache_key, loaded, f"its module file {path} is gone", module_name, func_name)
            if path is not None and stamp is not None:
                # Read before it runs, as the registry reads it: a file saved half-edited, empty or
                # with NUL bytes (QA ops M1, QA recheck N1) leaves the version as last loaded, and is
                # read once per edit (review: re-run on every call while it stayed so).
                known = _unservable.get(cache_key)
                why = known[1] if known is not None and known[0] == stamp else function_missing(path, func_name)
                if why is not None:
                    return _as_last_loaded(manifest, cache_key, stamp, why, module_name, func_name)
            try:
                if stamp is not None and path is not None:
                    module = _load_file(manifest, path)
                else:
                    module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if stamp is None and exc.name is not None and f"{module_name}.".startswith(f"{exc.name}."):  # no such module
                    raise ToolLoadError(FailureClass.unavailable, f"module '{module_name}' not found: {exc}") from exc
                # Found, but its own import of another module failed: the tool's code, not an outage.
                raise ToolLoadError(FailureClass.crash, f"importing '{module_name}' failed: {describe(exc)}") from exc
            except Exception as exc:  # the tool's own code failed while importing (a module it imports that does not parse too)
                raise ToolLoadError(FailureClass.crash, f"importing '{module_name}' failed: {describe(exc)}") from exc
            _modules[cache_key] = (module, stamp)
            _unservable.pop(cache_key, None)
    return _function(module, module_name, func_name)


def _as_last_loaded(manifest: ToolManifest, cache_key: tuple[str, str], stamp: tuple[int, int], why: str,
                    module_name: str, func_name: str) -> ToolFunction:
    """The function of a tool version whose module file, edited since it was served, cannot serve it
    now (`why`: it does not parse, or lacks the function), as the module was last loaded in this
    process: a file saved half-edited leaves the version served as it was. In a process that never
    loaded it, an outage of the tool (a deploy under way), not a crash of its code: once the file
    serves again, its breaker's probe succeeds and forgives the outage's failures."""
    old = _modules.get(cache_key, (None, None))[0]
    if _unservable.get(cache_key) != (stamp, why):
        _unservable[cache_key] = (stamp, why)
        log.warning("%s: %s: %s", manifest.key, why,
                    "the module as last loaded runs" if old is not None else "not run until it serves again",
                    extra={"event": "tool_module_unparsed", "tool": manifest.key})
    if old is not None:
        return _function(old, module_name, func_name)
    raise ToolLoadError(FailureClass.unavailable, f"{why}: it runs again once it serves (a file being saved, or "
                                                  "broken)")


def _function(module: ModuleType, module_name: str, func_name: str) -> ToolFunction:
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ToolLoadError(FailureClass.crash, f"'{module_name}' has no function '{func_name}'")
    return func


def classify_exception(exc: BaseException) -> FailureClass:
    """The failure class of an exception a tool raised (the convention in the module docstring),
    the same in this process as in an isolated one (workers/runners/python_host.py)."""
    return FailureClass(classify(exc))


# The process timers a tool may set; each ends the process when it fires (SIGALRM, SIGVTALRM, SIGPROF).
TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


def cancel_timers(manifest: ToolManifest) -> None:
    """Cancel the timers a tool left in the process it ran in: one that fires later killed that pool
    process during another tool's attempt, and the death was charged to that tool (QA resilience:
    `signal.alarm(1)` in a tool that returned at once)."""
    left = [which for which in TIMERS if signal.setitimer(which, 0)[0] > 0]
    if left:
        log.warning("%s left a process timer set (signal.alarm or setitimer): cancelled", manifest.key,
                    extra={"event": "tool_timer_cancelled", "tool": manifest.key})


def run_python(manifest: ToolManifest, input: dict[str, Any], *, timeout_s: float, limits: RunLimits) -> RunOutcome:
    """Run a python tool; every failure is an outcome, never an exception.

    Loading happens in the timed thread too: module code that hangs at import is a timeout.
    """
    box: dict[str, Any] = {}
    printed = Printed()

    def call() -> None:
        try:
            with kept_apart(printed):  # not a WARNING line per print in the worker's log (QA 51c)
                box["value"] = load_function(manifest)(input)
        except ToolLoadError as exc:
            box["load_error"] = exc
        except BaseException as exc:  # a tool's SystemExit must not end the thread unreported
            box["error"] = exc

    thread = threading.Thread(target=call, name=f"tool:{manifest.key}", daemon=True)
    deadline = Deadline(timeout_s)
    thread.start()
    while thread.is_alive() and (remaining := deadline.remaining()) > 0:
        thread.join(min(JOIN_SLICE_S, remaining))  # in slices, so that a stop of this process is seen (`Deadline`)
    cancel_timers(manifest)
    outcome = _outcome(thread, box, timeout_s, limits)
    printed.ended = True  # what a thread left running writes from now on passes on
    if printed.chars:
        more = f" (the first {len(printed.head)} shown)" if printed.chars > len(printed.head) else ""
        log.info("%s printed %d characters%s: %s", manifest.key, printed.chars, more, printed.head.rstrip(),
                 extra={"event": "tool_printed", "tool": manifest.key, "chars": printed.chars})
    outcome.stalled_s = deadline.settle()
    return outcome


def _outcome(thread: threading.Thread, box: dict[str, Any], timeout_s: float, limits: RunLimits) -> RunOutcome:
    """What the tool's call in `thread` came to, stopping it if it is still running."""
    if thread.is_alive():
        how = ("the call's thread was stopped" if stop_thread(thread) else
               "the call's thread did not stop: it is blocked outside Python, or it catches ToolStopped (a bare except); "
               "abandoned, it runs on in the worker until it returns or the executor restarts")
        return RunOutcome.fail(FailureClass.timeout, f"no result within {timeout_s:.3g}s ({how})")
    if "load_error" in box:
        return RunOutcome.fail(box["load_error"].error_class, str(box["load_error"]))
    if "error" in box:
        exc = box["error"]
        return RunOutcome.fail(classify_exception(exc), describe(exc))
    return judge_output(box.get("value"), limits.output_limit_bytes)

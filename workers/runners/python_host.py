"""Run one python tool function in a process of its own (`workers/runners/isolated.py` starts it):

    python -I python_host.py <tool dir or ''> <module.path> <function>

JSON input on stdin, the function's return value as JSON on stdout. The process is started by the
executable runner, so it has an executable's sandbox: resource limits, a fresh working directory,
an allow-listed environment, its process group killed at the timeout.

Standard library only and no import of fittest, so a call pays for Python's start and the tool's
own imports, nothing else; `classify` is also what the in-process python runner uses, so a tool
fails the same way wherever it runs. Exit status, as for any executable tool: 0 with the output;
65 (EX_DATAERR) when the tool refused its input; 69 (EX_UNAVAILABLE) when something it depends on
could not be reached; 1 for any other failure. The error is written to stderr. Whatever the tool
prints goes to stderr too, so it cannot corrupt the JSON on stdout.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import sys
import sysconfig
import traceback
import urllib.error
from pathlib import Path
from typing import Any

EXIT_BY_CLASS = {"bad_input": os.EX_DATAERR, "unavailable": os.EX_UNAVAILABLE, "crash": 1}


def classify(exc: BaseException) -> str:
    """The failure class of an exception a tool raised: ValueError / TypeError / KeyError are
    bad_input; connection errors are unavailable; anything else is a crash."""
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return "bad_input"
    if isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror)):
        return "unavailable"
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return "unavailable"  # urllib wraps refused / unresolvable connections
    # httpx's transport errors, recognised without importing httpx into every tool process
    if any(c.__name__ == "TransportError" and c.__module__.partition(".")[0] == "httpx" for c in type(exc).__mro__):
        return "unavailable"
    return "crash"


# Where the interpreter's and the installed packages' modules live: a frame there is not the tool's.
_LIBRARY_DIRS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def describe(exc: BaseException) -> str:
    """`Type: message` and the innermost frame of the tool's own code: the innermost frame below
    the caller's (the first) outside the standard library and installed packages, else the
    innermost. QA M: a tool's `sys.exit(0)` was placed in billiard's pool.py, which wraps
    `sys.exit` in a pool process, and an error inside `json.loads` in json's decoder."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames[1:] if not f.filename.startswith(_LIBRARY_DIRS)]
    frame = own[-1] if own else frames[-1] if frames else None
    where = f" (at {Path(frame.filename).name}:{frame.lineno})" if frame is not None else ""
    return f"{type(exc).__name__}: {exc}{where}"


def load(tool_dir: str, module: str, function: str) -> Any:
    """The function from `<tool_dir>/<module path>.py` when that file exists, else from an importable module."""
    if tool_dir:
        sys.path.insert(0, tool_dir)  # the tool's own sibling modules
        path = Path(tool_dir, *module.split(".")).with_suffix(".py")
        if path.is_file():
            spec = importlib.util.spec_from_file_location(module, path)
            assert spec is not None and spec.loader is not None
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[module] = loaded
            spec.loader.exec_module(loaded)
            return getattr(loaded, function)
    return getattr(importlib.import_module(module), function)


def main(argv: list[str]) -> int:
    tool_dir, module, function = argv[1:4]
    stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        value = load(tool_dir, module, function)(json.loads(sys.stdin.buffer.read() or b"{}"))
    except BaseException as exc:  # a tool's SystemExit is a failure like any other
        sys.stderr.write(describe(exc) + "\n")
        return EXIT_BY_CLASS[classify(exc)]
    finally:
        sys.stdout = stdout
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        text = f"<the tool returned a value that is not JSON: {type(exc).__name__}: {exc}>"
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

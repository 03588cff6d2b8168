"""Tool runners: run one tool version on one input, within a timeout and limits.

`run_tool` is the only entry point the execution task needs. It never raises for anything the
tool does: every failure comes back as a `RunOutcome` with a failure class and a message, and
every outcome carries the attempt's wall-clock time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from selection.manifest import HttpImplementation, PythonImplementation, ToolManifest
from selection.models import FailureClass
from workers.runners.base import RunLimits, RunOutcome, encode_input
from workers.runners.executable import run_executable
from workers.runners.http import run_http
from workers.runners.isolated import is_isolated, run_python_isolated
from workers.runners.python import run_python

Runner = Callable[..., RunOutcome]

RUNNERS: dict[str, Runner] = {
    "python": run_python,
    "executable": run_executable,
    "http": run_http,
}

__all__ = ["RUNNERS", "RunLimits", "RunOutcome", "run_tool"]


def run_tool(manifest: ToolManifest, input: dict[str, Any], *, timeout_s: float, limits: RunLimits,
             original: ToolManifest | None = None, isolated: bool = False,
             parent_http: HttpImplementation | None = None) -> RunOutcome:
    """Run `manifest`'s implementation on `input`.

    The tool gets its own copy of the input (a python tool that mutates it cannot change what
    the call replays to the next candidate); an input that is not JSON is bad_input before any
    tool runs. An evolved python version runs in a limited subprocess (workers/runners/isolated.py),
    unless it runs the code of `original`, its namespace's original, unchanged; so does any python
    tool with `isolated` (an attempt whose worker process died while it ran). `parent_http`: the
    URL and headers a version evolved from an http tool calls with (`Candidate.parent_http`): an
    evolved http version's own, or what its generated wrapper reads in its subprocess.
    """
    started = time.perf_counter()
    try:
        own_input = json.loads(encode_input(input))
    except (TypeError, ValueError) as exc:
        outcome = RunOutcome.fail(FailureClass.bad_input, f"input is not JSON-serialisable: {exc}")
    else:
        if parent_http is not None and isinstance(manifest.implementation, HttpImplementation):
            manifest = manifest.model_copy(update={"implementation": parent_http})
        in_subprocess = is_isolated(manifest, original) or (isolated and isinstance(manifest.implementation, PythonImplementation))
        runner = partial(run_python_isolated, parent_http=parent_http) if in_subprocess else RUNNERS[manifest.implementation.kind]
        try:
            outcome = runner(manifest, own_input, timeout_s=timeout_s, limits=limits)
        except Exception as exc:  # a runner's own slip on what a manifest says: the attempt fails, the call falls back
            # (QA M: an http header the client could not encode raised out of every attempt, with no fallback and no record)
            outcome = RunOutcome.fail(FailureClass.crash, f"the {manifest.implementation.kind} runner could not run "
                                                          f"{manifest.key}: {type(exc).__name__}: {exc}")
    outcome.elapsed_ms = max(0.0, time.perf_counter() - started - outcome.stalled_s) * 1000.0
    return outcome

"""Evolved python tools run in a subprocess, with the limits of an executable tool.

An original python tool was written and reviewed by a team and runs in the worker's process (fast,
see workers/runners/python.py). An evolved version is code fittest made itself (a wrapper, or a
new implementation from the code mutator): it must not be able to take the worker down, read its
memory or its environment, or outlive its timeout. An evolved version that runs its original's
code unchanged (a new description or timeout) runs in the process as the original does: a
process of its own cost it ~100 times the original's run time (QA: 2.9 -> 275 ms a call). So it runs as `python -I python_host.py ...`
through the executable runner: a new session and process group, resource limits (CPU, address
space, file size, open files, processes), a fresh temporary working directory, an allow-listed
environment, and the whole group killed at the timeout and after the run, with whatever left
the group. The host maps the tool's exceptions to the same failure classes as in-process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evolution.wrapper import PARENT_HTTP_ENV
from selection.manifest import ExecutableImplementation, HttpImplementation, PythonImplementation, ToolManifest
from workers.runners.base import RunLimits, RunOutcome
from workers.runners.executable import run_executable
from workers.tool_files import runs_code_of

HOST = Path(__file__).with_name("python_host.py")


def is_isolated(manifest: ToolManifest, original: ToolManifest | None = None) -> bool:
    """Whether this python tool runs in a subprocess: every evolved version does, unless it runs
    the code of `original` (its namespace's original, which runs in the process) unchanged."""
    if not isinstance(manifest.implementation, PythonImplementation) or manifest.parent_version is None:
        return False
    return original is None or original.parent_version is not None or not runs_code_of(manifest, original)


def _literal(text: str) -> str:
    """An argv template entry that stands for exactly `text`."""
    return text.replace("{", "{{").replace("}", "}}")


def run_python_isolated(manifest: ToolManifest, input: dict[str, Any], *, timeout_s: float, limits: RunLimits,
                        parent_http: HttpImplementation | None = None) -> RunOutcome:
    """Run a python tool's function in a sandboxed subprocess; every failure is an outcome.
    `parent_http`: the URL and headers an evolved version of an http tool calls its parent with
    (`ToolRegistry.http_root`), handed to it in PARENT_HTTP_ENV, not written into its files."""
    impl = manifest.implementation
    assert isinstance(impl, PythonImplementation)
    module, _, function = impl.entrypoint.partition(":")
    argv = ["{python}", "-I", _literal(str(HOST)), "{tool_dir}" if manifest.tool_dir else "", module, function]
    host = manifest.model_copy(update={"implementation": ExecutableImplementation(kind="executable", argv=argv)})
    env = {PARENT_HTTP_ENV: parent_http.model_dump_json(include={"url", "headers"})} if parent_http else None
    return run_executable(host, input, timeout_s=timeout_s, limits=limits, env=env)

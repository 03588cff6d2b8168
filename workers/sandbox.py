"""The verification sandbox: each stage of the cascade in its own subprocess, killed at its deadline.

`SubprocessSandbox` (the evolution/verification.py `Sandbox`) starts `python -m workers.sandbox`
through the executable runner, so a stage gets what every executable tool gets: a fresh working
directory, an allow-listed environment, resource limits, and its whole process group killed at
the stage's hard timeout. Inside, the candidate runs through the ordinary runners (`run_tool`), each
run within the candidate's own timeout, cut to what is left of the stage's time: the runners kill
a run's own process group (an evolved python version runs in one, workers/runners/isolated.py), so
the stage ends on its own before its deadline. The hard kill at the deadline is the last resort,
for a candidate that hangs inside this subprocess (at import, in the static stage); nothing runs
in the evolution worker, so no candidate can hang it. A candidate's processes, in sessions of
their own, outlive that kill only until the evolution worker's runner sweeps them as orphans of
the stage's run (workers/runners/reaper.py).

The subprocess reads one JSON request on stdin and writes one JSON answer on stdout: a
`StaticRequest` answered by a `StaticAnswer`, or a `RunRequest` by a `RunAnswer`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from evolution.models import StageResult
from evolution.verification import StageRun
from selection.manifest import HttpImplementation, ManifestError, PythonImplementation, ToolManifest, parse_manifest
from selection.models import FailureClass
from selection.registry import check_paths
from workers.runners import RunLimits, RunOutcome, run_tool

SANDBOX = ToolManifest(
    name="fittest_sandbox",
    description="the verification sandbox of evolution",
    implementation={"kind": "executable", "argv": ["{python}", "-m", "workers.sandbox"]},
    timeout_s=600,
)
# How a stage whose subprocess could not even start says so (FITTEST_TOOL_USER unable to run the
# interpreter, a Python gone): the candidate was never tried, so its failure is no mutation's.
SANDBOX_NOT_STARTED = "the verification sandbox did not start"
ANSWER_LIMIT_BYTES = 64_000_000
START_ALLOWANCE_S = 3.0  # of a stage's time, for this subprocess to start and answer
LAST_RUN_MIN_S = 0.2  # less time than this left for a run: it is not started


class StaticRequest(BaseModel):
    """Check a candidate without running it: its manifest and paths, its python files compile, a
    python tool imports."""

    mode: Literal["static"] = "static"
    manifest: dict[str, Any]  # the candidate's manifest as JSON (its tool_dir apart)
    tool_dir: str


class RunRequest(BaseModel):
    """Run a candidate on each input, within its own timeout and all within `budget_s`."""

    mode: Literal["run"] = "run"
    manifest: dict[str, Any]
    tool_dir: str
    inputs: list[dict[str, Any]]
    limits: RunLimits
    budget_s: float = Field(ge=0)
    parent_http: HttpImplementation | None = None  # an evolved http tool's parent settings (`ToolRegistry.http_root`)


SandboxRequest = Annotated[StaticRequest | RunRequest, Field(discriminator="mode")]
REQUEST = TypeAdapter(SandboxRequest)


class StaticAnswer(BaseModel):
    problems: list[str]


class RunAnswer(BaseModel):
    outcomes: list[RunOutcome]  # one per input, in order


class SubprocessSandbox:
    """Runs verification stages as subprocesses with the runner's limits."""

    def __init__(self, limits: RunLimits,
                 http_root: Callable[[ToolManifest], HttpImplementation | None] = lambda manifest: None) -> None:
        self.limits = limits
        self.http_root = http_root  # where a candidate wrapping an http tool gets its parent's URL and headers

    def _launch(self, request: StaticRequest | RunRequest, timeout_s: float) -> tuple[RunOutcome, float]:
        started = time.perf_counter()
        limits = self.limits.model_copy(update={"output_limit_bytes": ANSWER_LIMIT_BYTES})
        outcome = run_tool(SANDBOX, request.model_dump(mode="json"), timeout_s=timeout_s, limits=limits)
        return outcome, (time.perf_counter() - started) * 1000.0

    @staticmethod
    def _died(outcome: RunOutcome, timeout_s: float) -> str:
        if outcome.error_class is FailureClass.timeout:
            return f"the stage did not finish within {timeout_s:.3g}s; its process group was killed"
        if outcome.error_class is FailureClass.unavailable:  # it could not start: nothing of the candidate ran
            return f"{SANDBOX_NOT_STARTED}: {outcome.error_message}"
        return f"the stage's subprocess failed: {outcome.error_class.value if outcome.error_class else 'error'}: {outcome.error_message}"

    def static(self, manifest: ToolManifest, timeout_s: float) -> StageResult:
        outcome, ms = self._launch(StaticRequest(manifest=_manifest_doc(manifest), tool_dir=_tool_dir(manifest)), timeout_s)
        if not outcome.success:
            return StageResult(stage="static", passed=False, problems=[self._died(outcome, timeout_s)], elapsed_ms=ms)
        problems = StaticAnswer.model_validate(outcome.output).problems
        return StageResult(stage="static", passed=not problems, checked=1, problems=problems, elapsed_ms=ms)

    def run(self, manifest: ToolManifest, inputs: list[dict[str, Any]], timeout_s: float) -> StageRun:
        request = RunRequest(manifest=_manifest_doc(manifest), tool_dir=_tool_dir(manifest), inputs=inputs,
                             limits=self.limits, budget_s=max(0.0, timeout_s - START_ALLOWANCE_S),
                             parent_http=self.http_root(manifest))
        outcome, ms = self._launch(request, timeout_s)
        if not outcome.success:
            return StageRun(died=self._died(outcome, timeout_s), elapsed_ms=ms)
        return StageRun(results=RunAnswer.model_validate(outcome.output).outcomes, elapsed_ms=ms)


def _manifest_doc(manifest: ToolManifest) -> dict[str, Any]:
    return manifest.model_dump(mode="json", exclude={"tool_dir"})


def _tool_dir(manifest: ToolManifest) -> str:
    if manifest.tool_dir is None:  # a candidate is always installed in a staging folder first
        raise ValueError(f"{manifest.key} has no folder to verify it in")
    return manifest.tool_dir


# ----------------------------------------------------------------------------- inside the subprocess


def _static(doc: dict[str, Any], tool_dir: str) -> list[str]:
    """Validate the manifest and its paths, compile every python file, import a python tool."""
    from workers.runners.python import ToolLoadError, load_function

    source = Path(tool_dir) / "tool.yaml"
    try:
        manifest = parse_manifest(doc, source, tool_dir=tool_dir)
        check_paths(manifest, source)
    except ManifestError as exc:
        return [str(exc)]
    problems = []
    for path in sorted(Path(tool_dir).rglob("*.py")):
        try:
            compile(path.read_bytes(), str(path), "exec")
        except (SyntaxError, ValueError) as exc:
            problems.append(f"{path.relative_to(tool_dir)} does not compile: {exc}")
    if not problems and isinstance(manifest.implementation, PythonImplementation):
        try:
            load_function(manifest)
        except ToolLoadError as exc:
            problems.append(str(exc))
    return problems


def _runs(request: RunRequest) -> list[RunOutcome]:
    """Each input within the candidate's timeout, cut to the stage's time that is left."""
    manifest = parse_manifest(request.manifest, Path(request.tool_dir) / "tool.yaml", tool_dir=request.tool_dir)
    deadline = time.monotonic() + request.budget_s
    outcomes = []
    for value in request.inputs:
        left = deadline - time.monotonic()
        if left < LAST_RUN_MIN_S:
            outcomes.append(RunOutcome.fail(FailureClass.timeout, "not run: the stage's time ran out"))
        else:
            outcomes.append(run_tool(manifest, value, timeout_s=min(manifest.timeout_s, left), limits=request.limits,
                                     parent_http=request.parent_http))
    return outcomes


def main() -> None:
    try:
        request = REQUEST.validate_json(sys.stdin.buffer.read())
    except ValidationError as exc:  # named field by field: this process is ours, its caller's bug is said plainly
        sys.stderr.write(f"workers.sandbox: the request is refused: {exc}\n")
        sys.exit(2)
    answer: StaticAnswer | RunAnswer = (StaticAnswer(problems=_static(request.manifest, request.tool_dir))
                                        if isinstance(request, StaticRequest) else RunAnswer(outcomes=_runs(request)))
    sys.stdout.write(answer.model_dump_json())
    sys.stdout.flush()
    # A candidate's abandoned thread (a python run that timed out) must not keep this process up.
    os._exit(0)


if __name__ == "__main__":
    main()

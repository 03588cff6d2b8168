"""The verification cascade: nothing is served before it passes all three stages.

1. static: the manifest validates, its files stay in its folder, every python file compiles, a
   python tool imports and has its function;
2. tests: the tool's own test cases (`TestCase.check`);
3. replay (not for a tool whose manifest says `side_effects: true`: it would apply the real
   calls' effects again): the failing inputs that started the evolution must now succeed, and up to N recent
   successful inputs of the parent must still succeed with an output of the same shape (the same
   JSON type, and for an object the same keys); where the parent answers such an input the same
   way twice (`reproduce_successes`, before the candidates), with the same answer. One exception:
   a failing input that failed for another reason (a timeout, an unavailable upstream, a crash)
   and that the candidate now refuses as bad input, while other inputs succeed. The mutation fixed what failed; what is left is an
   input the tool refuses on its merits, as it would any caller's. This happens when a
   scenario-only call tried the tool first on another tool's job: a retry wrapper for a flaky
   currency service cannot make it convert a roman numeral, and must not be refused for that.

Each stage runs in its own subprocess with a hard timeout and the runner's limits (the `Sandbox`,
implemented by workers/sandbox.py); a candidate that hangs is killed there and fails its stage. The
first failed stage ends the cascade, and every stage's result is kept with the candidate.

A replay that only failing inputs failed names them (`StageResult.failed_inputs`): such a failure
holds while they fail, and the same mutation may be tried again once the version succeeds on them
(`FailedMutation.still_applies`). A replay whose subprocess died names every failing
input it replayed, since any of them may have killed it.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel, Field

from evolution.models import Evidence, Stage, StageResult, SuccessfulRun, input_key, shape_of
from selection.manifest import ToolManifest
from selection.models import FailureClass

STARTUP_S = 10.0  # a stage's subprocess start-up (interpreter and imports), on a busy machine
PER_RUN_SLACK = 1.5  # each run may take its timeout and a half before the stage is killed


class StageRun(BaseModel):
    """What a stage's subprocess returned: one result per input, or why the subprocess died."""

    results: list[Any] = Field(default_factory=list)  # one run's outcome per input, in input order (workers.runners.RunOutcome)
    died: str | None = None
    elapsed_ms: float = 0.0


class Sandbox(Protocol):
    def static(self, manifest: ToolManifest, timeout_s: float) -> StageResult:
        """Stage 1 in a subprocess: validate, compile, import."""
        ...

    def run(self, manifest: ToolManifest, inputs: list[dict[str, Any]], timeout_s: float) -> StageRun:
        """Run the candidate on each input (each within its own timeout_s) in one subprocess,
        killed after `timeout_s` of the whole stage."""
        ...


class VerifyConfig(BaseModel):
    static_timeout_s: float = 30.0
    stage_timeout_s: float = 120.0  # the most any stage that runs the candidate may take
    replay_successes: int = 5  # N


def stage_timeout(manifest: ToolManifest, runs: int, cap_s: float) -> float:
    """The hard timeout of a stage of `runs` runs: enough for each to use its own timeout, no more."""
    return min(cap_s, STARTUP_S + runs * manifest.timeout_s * PER_RUN_SLACK)


def _error(result: Any) -> str:
    cls = result.error_class.value if result.error_class else "error"
    return f"{cls}: {(result.error_message or '')[:300]}"


def _dedupe(inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for value in inputs:
        key = input_key(value)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out


def _replayed_successes(evidence: Evidence, config: VerifyConfig) -> list[SuccessfulRun]:
    return [s for s in evidence.successes if s.input is not None][: config.replay_successes]


def reproduce_successes(parent: ToolManifest, evidence: Evidence, sandbox: Sandbox, config: VerifyConfig) -> Evidence:
    """The evidence with each replayed success marked `reproducible` when the parent, run on its
    input again, gives the output it gave then. Run once per evolution, before its candidates: an
    answer given twice is the tool's answer, and a candidate must keep it. A parent that fails
    now, or answers otherwise, leaves the success to the shape check."""
    kept = [s for s in _replayed_successes(evidence, config) if s.output_kept]
    if not kept or parent.side_effects:
        return evidence
    run = sandbox.run(parent, [s.input for s in kept if s.input is not None], stage_timeout(parent, len(kept), config.stage_timeout_s))
    if run.died is not None or len(run.results) != len(kept):
        return evidence
    again = {id(s) for s, r in zip(kept, run.results) if r.success and r.output == s.output}
    successes = [s.model_copy(update={"reproducible": True}) if id(s) in again else s for s in evidence.successes]
    return evidence.model_copy(update={"successes": successes})


def _run_stage(stage: Stage, sandbox: Sandbox, manifest: ToolManifest, inputs: list[dict[str, Any]], cap_s: float) -> tuple[StageRun, StageResult | None]:
    """Run the inputs; a dead stage is returned as its failed result."""
    run = sandbox.run(manifest, inputs, stage_timeout(manifest, len(inputs), cap_s))
    if run.died is not None:
        return run, StageResult(stage=stage, passed=False, checked=0, problems=[run.died], elapsed_ms=run.elapsed_ms)
    if len(run.results) != len(inputs):
        problem = f"the sandbox returned {len(run.results)} results for {len(inputs)} inputs"
        return run, StageResult(stage=stage, passed=False, problems=[problem], elapsed_ms=run.elapsed_ms)
    return run, None


class CasesRun(NamedTuple):
    """The tests stage's result; whether the version served any of its test cases (a refusal is
    then the input's fault, not the code's); and of the problems, those of the cases it gave no
    output on (a timeout, a crash; or every case, when the run died), which no `expect` can be the
    cause of (QA onboarding L2: a hanging tool's correct test case was called a wrong expect)."""

    stage: StageResult
    served: bool
    failed: list[str]


def run_test_cases(manifest: ToolManifest, sandbox: Sandbox, config: VerifyConfig) -> CasesRun:
    """The tests stage: the manifest's own test cases run on its code. Also run on a parent whose
    candidates all failed here, to tell its author when the parent fails them too."""
    cases = manifest.test_cases
    if not cases:
        return CasesRun(StageResult(stage="tests", passed=True, checked=0, problems=["the tool has no test cases"]), False, [])
    run, dead = _run_stage("tests", sandbox, manifest, [c.input for c in cases], config.stage_timeout_s)
    if dead is not None:
        return CasesRun(dead, False, dead.problems)
    problems, failed = [], []
    for i, (case, result) in enumerate(zip(cases, run.results)):
        why = case.check(result.success, result.output, result.error_class.value if result.error_class else None)
        if why is not None:
            detail = f"; {_error(result)}" if not result.success else ""
            problems.append(f"test case {i + 1} {json.dumps(case.input, default=str)[:120]}: {why}{detail}")
            if not result.success:  # no output: no `expect` is the cause
                failed.append(problems[-1])
    return CasesRun(StageResult(stage="tests", passed=not problems, checked=len(cases), problems=problems,
                                    elapsed_ms=run.elapsed_ms), any(r.success for r in run.results), failed)


def verify(
    manifest: ToolManifest,
    evidence: Evidence,
    sandbox: Sandbox,
    config: VerifyConfig,
    *,
    changes_behaviour: bool = True,
) -> list[StageResult]:
    """Run the cascade on a candidate whose files are in `manifest.tool_dir`; stop at the first failure."""
    results = [sandbox.static(manifest, config.static_timeout_s)]
    if not results[-1].passed:
        return results

    tests, worked, _ = run_test_cases(manifest, sandbox, config)
    results.append(tests)
    if not tests.passed:
        return results

    if manifest.side_effects:  # QA Q: a slow run of a tool that appends to a ledger wrote 5 real calls' events twice more
        verified_by = "its test cases are what verified it, and its trial decides" if tests.checked else "its trial decides"
        results.append(StageResult(stage="replay", passed=True, checked=0, problems=[
            f"not replayed: the tool has side effects (side_effects: true), so no real call's input is run again; {verified_by}"]))
        return results
    failing = _dedupe([f.input for f in evidence.failures]) if changes_behaviour else []
    refused_before = {input_key(f.input) for f in evidence.failures if f.error_class is FailureClass.bad_input}
    kept = _replayed_successes(evidence, config)
    inputs = failing + [s.input for s in kept if s.input is not None]
    if not inputs:
        results.append(StageResult(stage="replay", passed=True, checked=0, problems=["nothing to replay"]))
        return results
    run, dead = _run_stage("replay", sandbox, manifest, inputs, config.stage_timeout_s)
    if dead is not None:
        return [*results, dead.model_copy(update={"failed_inputs": [input_key(v) for v in failing]})]
    problems = []
    notes = []
    still_failing = []
    worked = worked or any(r.success for r in run.results)
    for value, result in zip(failing, run.results):
        if result.success:
            continue
        text = json.dumps(value, default=str)[:120]
        if worked and result.error_class is FailureClass.bad_input and input_key(value) not in refused_before:
            notes.append(f"failing input {text} no longer fails as it did; the tool refuses it as bad input: {_error(result)}")
        else:
            problems.append(f"failing input {text} still fails: {_error(result)}")
            still_failing.append(input_key(value))
    regressions = []
    for success, result in zip(kept, run.results[len(failing):]):
        if not result.success:
            regressions.append(f"successful input {json.dumps(success.input, default=str)[:120]} now fails: {_error(result)}")
        elif success.shape and shape_of(result.output) != success.shape:
            regressions.append(f"successful input {json.dumps(success.input, default=str)[:120]}: output shape {shape_of(result.output)} instead of {success.shape}")
        elif success.reproducible and result.output != success.output:
            regressions.append(f"successful input {json.dumps(success.input, default=str)[:120]}: output "
                               f"{json.dumps(result.output, default=str)[:120]} instead of the parent's {json.dumps(success.output, default=str)[:120]}")
    problems += regressions
    results.append(StageResult(stage="replay", passed=not problems, checked=len(inputs), problems=problems + notes, elapsed_ms=run.elapsed_ms,
                               failed_inputs=[] if regressions else still_failing))
    return results


def verified_reason(stages: list[StageResult]) -> str:
    """What a candidate that passed every stage was checked on, as its changelog entry says it: a
    stage that checked nothing says why (QA 63a: "passed static, tests and replay" of a tool with
    side effects and no test cases, of which nothing had run)."""
    said = []
    for s in stages:
        if s.stage == "static":
            said.append("static")
        elif s.checked:
            said.append(f"{s.stage} ({s.checked} {'test case' if s.stage == 'tests' else 'input'}{'s' if s.checked != 1 else ''})")
        else:
            said.append(f"{s.stage}: {s.problems[0] if s.problems else 'nothing checked'}")
    return "passed " + "; ".join(said)

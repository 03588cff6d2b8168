"""What evolution works on and what it leaves behind: the job, the evidence, candidates, the stage
results kept with each candidate, the report, and the changelog entry.

The job is a Celery payload: everything the evolution worker needs from the vector memory is in it
(the worker never opens the embedder or the embedded store), and what evolution learns goes back
to the memory side as an `EvolutionRecord`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from selection.manifest import ToolManifest, tool_key
from selection.models import CallPlan, FailureClass, canonical_digest, new_id

Trigger = Literal["call", "quality", "manual"]
Stage = Literal["static", "tests", "replay"]
KEPT_INPUT_BYTES = 16_384  # inputs larger than this are not kept for replay
KEPT_OUTPUT_BYTES = 4_096  # outputs larger than this are judged by their shape alone


def _small_enough(value: Any, limit: int) -> bool:
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return len(text.encode("utf-8")) <= limit


def bounded_input(value: dict[str, Any], limit: int = KEPT_INPUT_BYTES) -> dict[str, Any] | None:
    """The input when its JSON is small enough to keep and replay, else None."""
    return value if _small_enough(value, limit) else None


def kept_output(value: Any, limit: int = KEPT_OUTPUT_BYTES) -> tuple[bool, Any]:
    """(kept, the output): an output is kept when its JSON is small enough, so that a replay can
    ask a candidate for the same answer (an output of None is a real answer, hence the flag)."""
    return (True, value) if _small_enough(value, limit) else (False, None)


def input_key(value: dict[str, Any]) -> str:
    """An input's identity: a digest of its canonical JSON. Equal inputs have equal keys whatever
    their key order; a failed mutation keeps the keys of the inputs it failed on, not the inputs."""
    return canonical_digest(value)


def tests_digest(manifest: ToolManifest) -> str:
    """The identity of the test cases a candidate is judged by: a digest of their canonical JSON."""
    cases = [c.model_dump(mode="json") for c in manifest.test_cases]
    return canonical_digest(cases)[:16]


def shape_of(value: Any) -> str:
    """The shape an output must keep under a new version: its JSON type, and an object's keys."""
    if isinstance(value, dict):
        return "object:" + ",".join(sorted(str(k) for k in value))
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "null"


class FailedRun(BaseModel):
    """A failure a candidate must fix: its input is replayed in stage 3 and must succeed."""

    version: str
    input: dict[str, Any]
    error_class: FailureClass
    error_message: str = ""
    scenario: str = ""


class PastFailure(BaseModel):
    """A failure of this namespace remembered in the vector memory, similar to the current one."""

    version: str
    scenario: str
    error_class: FailureClass
    message: str = ""
    similarity: float = 0.0


class FailedMutation(BaseModel):
    """A mutation that failed before (its verification, or on trial), for a reason similar to the
    current failure.

    `identity` says which mutation it was (see `CandidateVersion.identity`). `failed_on` holds the
    keys (`input_key`) of the failing inputs that alone failed it; it is empty when it failed for
    a reason of its own (static checks, test cases, a successful input that then failed, a rollback)
    and for records written before inputs were kept.
    """

    mutator: str
    mutation: str
    identity: str
    reason: str = ""
    failed_on: list[str] = Field(default_factory=list)
    similarity: float = 0.0
    # It failed the tool's test cases: the `tests_digest` of those it failed (empty otherwise)
    failed_tests: str = ""

    def still_applies(self, failing: set[str], succeeded: set[str]) -> bool:
        """Whether the reason it failed for holds now: `failing` are the keys of the inputs failing
        now, `succeeded` those of the inputs the version has succeeded on of late.

        A failure on failing inputs predicts another while one of those inputs still fails: the
        mutation would fail its replay on it again. An input it failed on counts as failing until
        the version succeeds on it, not only while a call brings it again: a job carries the inputs
        of its own call, so a tool that fails on every input (one that hangs) had the same mutation
        made and verified again for each new input, while the one that failed it was never asked
        again (QA onboarding M2). A success on it counts whenever it was (successes keep no time):
        an input the version both answers and fails is no deterministic failure, and a mutation's
        failure on it predicts little. A failure of its own holds whatever fails now.
        """
        return not self.failed_on or any(k in failing or k not in succeeded for k in self.failed_on)


class SuccessfulRun(BaseModel):
    """A recent success of the parent: a scenario for the description, an input for replay.

    A replayed success must keep its output's shape. When the parent, run again before the
    candidates are verified, gives the output it gave then (`reproducible`), it answers that input
    deterministically, and a candidate must give the same answer: a rewrite that returns the right
    keys with wrong values is not a fix. A tool whose answers vary (a quote, a clock) keeps the
    shape check alone.
    """

    scenario: str
    input: dict[str, Any] | None = None  # None when it was too large to keep
    shape: str = ""  # shape_of(the parent's output)
    output_kept: bool = False  # whether `output` holds the parent's output (kept_output)
    output: Any = None
    reproducible: bool = False  # the parent gave `output` again on this input before verification
    call_id: str = ""  # the call it answered, by which a person's judgement of its output is found

    @classmethod
    def of(cls, scenario: str, input: dict[str, Any], output: Any, call_id: str = "") -> SuccessfulRun:
        """A success as a call's attempt gave it: what is small enough kept, its shape always."""
        kept, value = kept_output(output)
        return cls(scenario=scenario[:1000], input=bounded_input(input), shape=shape_of(output), output_kept=kept, output=value,
                   call_id=call_id)


class Evidence(BaseModel):
    failures: list[FailedRun] = Field(default_factory=list)
    # Failures remembered without their input (larger than KEPT_INPUT_BYTES): none can be replayed,
    # but they are failures to fix all the same (QA README M2: a tool that timed out on a 600 KB
    # list, its documented failure, was re-described by `fittest evolve`, the same code on trial).
    unkept_failures: int = 0
    similar_failures: list[PastFailure] = Field(default_factory=list)
    failed_mutations: list[FailedMutation] = Field(default_factory=list)
    successes: list[SuccessfulRun] = Field(default_factory=list)

    def classes(self) -> list[FailureClass]:
        """The failure classes seen, most frequent first (the current failures count double)."""
        counts: Counter[FailureClass] = Counter()
        for f in self.failures:
            counts[f.error_class] += 2
        for p in self.similar_failures:
            counts[p.error_class] += 1
        return [c for c, _ in counts.most_common()]

    def failed_before(self, mutator: str, identity: str, threshold: float, tests: str = "") -> FailedMutation | None:
        """The earlier failure of this same mutation that predicts it fails again, if any.

        It predicts so when its failure pattern was at least `threshold` similar to the current one
        and the reason it failed for still applies (`FailedMutation.still_applies`: an input it
        failed on fails now, or has not succeeded since, by the recent `successes`). A failure of
        the tool's test cases applies only while they are the same (`tests`, their digest): a wrong
        `expect` failed every candidate, and once the author fixed it the mutation the tool needed
        was still skipped, after a version bump too (QA evolution F2).
        """
        failing = {input_key(f.input) for f in self.failures}
        succeeded = {input_key(s.input) for s in self.successes if s.input is not None}
        return next(
            (m for m in self.failed_mutations
             if m.mutator == mutator and m.identity == identity and m.similarity >= threshold
             and m.still_applies(failing, succeeded)
             and not (m.failed_tests and tests and m.failed_tests != tests)),
            None,
        )


class EvolutionJob(BaseModel):
    """Payload of `fittest.evolve`: which version to improve, why, and what memory knows about it."""

    job_id: str = Field(default_factory=new_id)
    namespace: str
    parent_version: str
    served_version: str | None = None  # served when the job was prepared (a later change means someone else evolved it)
    trigger: Trigger
    reason: str = ""
    pattern: str = ""  # the failure in words: what the evolution pattern vector is made of
    evidence: Evidence = Field(default_factory=Evidence)
    plan: CallPlan | None = None  # the call to retry after a successful evolution
    created_at: float = Field(default_factory=time.time)

    @property
    def parent_key(self) -> str:
        return tool_key(self.namespace, self.parent_version)


class CandidateVersion(BaseModel):
    """A proposed version: its manifest (without a tool directory yet) and every file of its folder."""

    mutator: str
    mutation: str  # one line: what changed, for people
    manifest: ToolManifest
    files: dict[str, bytes]
    changes_behaviour: bool = True  # False: same code (a description); failing inputs are not replayed
    # What makes two candidates the same mutation, to know it failed before. By default the mutation
    # text, which says all a rule-based mutator changes; the code mutator's text is the model's prose,
    # so its identity is a digest of its files.
    identity: str = ""

    @model_validator(mode="after")
    def _identity_defaults_to_the_mutation(self) -> CandidateVersion:
        self.identity = self.identity or self.mutation
        return self


class StageResult(BaseModel):
    stage: Stage
    passed: bool
    checked: int = 0
    problems: list[str] = Field(default_factory=list)
    elapsed_ms: float = 0.0
    # replay: the keys (input_key) of the failing inputs that alone failed the stage; empty when it
    # passed or when it failed for a reason of its own (a successful input failed or changed shape)
    failed_inputs: list[str] = Field(default_factory=list)


class CandidateReport(BaseModel):
    mutator: str
    mutation: str
    identity: str = ""  # CandidateVersion.identity
    outcome: Literal["verified", "failed", "skipped"]
    reason: str = ""
    stages: list[StageResult] = Field(default_factory=list)
    failed_tests: str = ""  # failed the test cases of this digest (`tests_digest`): remembered with them

    @property
    def failed_on(self) -> list[str]:
        """The failing inputs (keys) its failure depends on: empty for a failure of its own."""
        return next((s.failed_inputs for s in self.stages if not s.passed), [])


# pinned: a call pinned to a version its namespace no longer serves; neither evolved nor retried
EvolutionStatus = Literal["evolved", "no_fix", "locked", "reused", "pinned", "disabled"]


class EvolutionReport(BaseModel):
    """What one evolution did; it travels in the call's result (`evolution`) and in the changelog."""

    job_id: str
    namespace: str
    trigger: Trigger
    status: EvolutionStatus
    parent: str  # key of the version evolved from
    version: str | None = None  # the version now on trial (or served, when reused)
    mutation: str | None = None
    candidates: list[CandidateReport] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # mutators that proposed nothing, and why
    message: str = ""
    elapsed_s: float = 0.0


ChangelogEvent = Literal[
    "verified", "failed", "skipped", "promoted", "activated", "rolled_back", "no_fix", "locked",
    "description_promoted", "description_retired", "removed", "added",
]


class ChangelogEntry(BaseModel):
    """One line of a namespace's history: a candidate's verdict, a promotion, a rollback, a version
    no longer served (`removed`: its manifest gone from the tools directory, or naming another
    version), or one the tools directory gave while the workers ran (`added`)."""

    namespace: str
    event: ChangelogEvent
    version: str | None = None
    parent: str | None = None
    mutator: str = ""
    mutation: str = ""
    reason: str = ""
    stages: list[StageResult] = Field(default_factory=list)
    trigger: str = ""
    job_id: str = ""
    by: Literal["fittest", "operator"] = "fittest"
    elapsed_s: float | None = None
    time: float = Field(default_factory=time.time)


def made_by(changelog: list[ChangelogEntry], version: str) -> ChangelogEntry | None:
    """The verdict that made `version` of the namespace: its last `verified` line (None for a
    version no evolution made, such as one of the tools directory)."""
    return next((e for e in reversed(changelog) if e.event == "verified" and e.version == version), None)


def last_removal(changelog: list[ChangelogEntry]) -> ChangelogEntry | None:
    """The removal from the tools directory the changelog ends with, of the namespace's comings and
    goings: None when a version came back since, or none was removed."""
    last = next((e for e in reversed(changelog) if e.event in ("added", "removed")), None)
    return last if last is not None and last.event == "removed" else None


def removal_told(changelog: list[ChangelogEntry], name: str, now: float | None = None) -> str:
    """What a call naming a tool none of whose versions is served should know, from its changelog:
    when its last version was removed from the tools directory and why, and where its history is
    ("" when `last_removal` is None). QA 51d: "no tool named" of a tool the changelog says was removed."""
    last = last_removal(changelog)
    if last is None:
        return ""
    seconds = max(0.0, (time.time() if now is None else now) - last.time)
    ago = next(f"{seconds / size:.0f} {unit}" for size, unit in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))
               if seconds >= size or unit == "s")
    return (f"{name}@{last.version} was removed from the tools directory {ago} ago ({last.reason}); "
            f"`fittest show {name}` shows its history")


class EvolutionRecord(BaseModel):
    """Payload of `fittest.record_evolution`: what the memory side stores after an evolution."""

    job_id: str
    namespace: str
    pattern: str
    candidates: list[CandidateReport]
    promoted_version: str | None = None
    manifest_path: str | None = None  # the new version's manifest, relative to the evolved directory

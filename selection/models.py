"""The payloads that cross every boundary: task arguments, plans, attempts and call results.

They are pydantic models so that a foreign service needs only the JSON schema
(`fittest schema`) to send a job, and so that a bad payload is refused with the field named.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Mapping
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, StrictBool, StrictFloat,
                      StrictInt, ValidationError, ValidationInfo, field_validator, model_serializer)

from selection.context import check_context, context_json_schema
from selection.json_values import check_json_value
from selection.manifest import NAME_PATTERN, HttpImplementation, ToolManifest, VersionKeyed, check_semver, split_key

MAX_SCENARIO_CHARS = 4000
MAX_TAG_CHARS = 200  # a tag, or a NAME@VERSION of `exclude` (a name is at most 64 characters)
CALL_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
# A semantic version, as semver.org gives its expression (what `fittest schema` publishes; the
# workers check versions with the semver package)
SEMVER = (r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
          r"(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")


class FailureClass(str, Enum):
    timeout = "timeout"
    crash = "crash"
    bad_input = "bad_input"
    bad_output = "bad_output"
    unavailable = "unavailable"


class Severity(str, Enum):
    low = "low"
    medium = "medium"
    high = "high"


# How hard a failure of each class counts against a tool version's quality. A crash says the
# most about the tool; bad input and an unavailable upstream say more about the call or the world.
SEVERITY_BY_CLASS: dict[FailureClass, Severity] = {
    FailureClass.crash: Severity.high,
    FailureClass.bad_output: Severity.medium,
    FailureClass.timeout: Severity.medium,
    FailureClass.bad_input: Severity.low,
    FailureClass.unavailable: Severity.low,
}


def new_id() -> str:
    return uuid.uuid4().hex


def canonical_digest(value: Any) -> str:
    """A digest of `value`'s canonical JSON: equal values, whatever their keys' order, have equal
    digests (an input's identity, a job's, a set of test cases')."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _not_blank(v: str | None) -> str | None:
    """A scenario of spaces names no job, and is refused as one (QA F7: `--scenario "   "` was
    stored as a judgement's job); an empty one is left to the field (refused, or meaning none)."""
    if v and not v.strip():
        raise ValueError("it is blank (spaces only): say what you need done")
    return v


NOT_BLANK = AfterValidator(_not_blank)


class CallRequest(BaseModel):
    """What a service asks for: a job described in words, its input, and limits on the search."""

    model_config = ConfigDict(extra="forbid")

    # The schema says what the workers check besides the types (QA 59a M2): a foreign service
    # builds its payload from `fittest schema` alone.
    scenario: Annotated[str, NOT_BLANK] = Field(min_length=1, max_length=MAX_SCENARIO_CHARS,
                                                json_schema_extra={"pattern": r"\S"})
    input: dict[str, Any] = Field(default_factory=dict, description=(
        "The tool's input: JSON values only (no NaN), nested at most 32 levels, at most FITTEST_INPUT_LIMIT_BYTES "
        "(1,000,000 by default) as JSON, as is `context`"))
    # Each item bounded too: 32 tags of a megabyte each passed, and the `no_such_tag` message kept all
    # 32 MB in the result backend for a day (QA 64a; exclude likewise, 51 MB, a plain call stalled 13 s).
    # A bounded string is checked for text that is not Unicode too (a lone surrogate, which raised in
    # the vector search's filter: the call ended with an error, not `invalid`).
    tags: list[Annotated[str, Field(max_length=MAX_TAG_CHARS)]] = Field(default_factory=list, max_length=32)
    namespace: str | None = Field(None, pattern=NAME_PATTERN)  # a name no tool can have finds nothing: refused
    version: str | None = Field(None, description="A version of `namespace` (MAJOR.MINOR.PATCH)",
                                json_schema_extra={"anyOf": [{"type": "string", "pattern": f"^{SEMVER}$"}, {"type": "null"}]})
    # The numbers and flags are strict, as `fittest schema` publishes them: pydantic's lax mode took
    # `max_attempts: true` for one attempt and `use_evolved: "no"` for false without a word (QA 55b M4).
    use_evolved: StrictBool = True
    max_attempts: StrictInt = Field(5, ge=1, le=20)
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="What selection reads besides the scenario: phase, languages (or language), complexity (0..1), "
                    "task_type, testing, files (paths, or paths to contents), environment (of a description "
                    "variant); other keys are the caller's own, but one close to a key it reads is named in the result's notes as a likely typo",
        json_schema_extra=context_json_schema())
    exclude: list[Annotated[str, Field(max_length=MAX_TAG_CHARS)]] = Field(
        default_factory=list, max_length=256, description="Tool versions not to try, as NAME@VERSION",
        json_schema_extra={"items": {"type": "string", "pattern": "^[^@]+@.+$", "maxLength": MAX_TAG_CHARS}})  # as the workers take it
    # QA ops L4: a fallback that matches the job weakly answers it with status success; a script that
    # would rather have no answer than such a tool's had no say but tags and a namespace.
    min_similarity: StrictFloat | None = Field(
        None, ge=0.0, le=1.0,
        description="Try only the tools whose description (or a past success of theirs that says they do such jobs, not "
                    "a weak match's unconfirmed one) is at least this similar to the scenario (cosine, 0..1; "
                    "FITTEST_MIN_SIMILARITY still applies when higher); the versions of a namespace the call names are "
                    "tried whatever their match. A job no tool matches so clearly ends no_candidates rather than served "
                    "by a weak match")
    call_id: str = Field(default_factory=new_id, pattern=CALL_ID_PATTERN, description=(
        "The call's id, chosen by the caller or made here: one job per id. A copy of the call sent under it is not run "
        "again only when its task id is the call id too (`send_task(..., task_id=call_id)`, as fittest's client sends "
        "it); a copy under another task id runs the tools again, its effects on fittest's counts applied once"))
    after_evolution: StrictBool = Field(False, description="Set by fittest on a call's retry after its evolution, which "
                                                      "evolves nothing again; a caller that sets it turns evolution off for its call")

    @model_serializer(mode="wrap")
    def _without_unset_floor(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without `min_similarity` when the call sets none: a worker of the release before it forbids
        the key, and would refuse every plan and retry a newer worker hands it (review: they carried
        `min_similarity: null`)."""
        data: dict[str, Any] = handler(self)
        if data.get("min_similarity") is None:
            data.pop("min_similarity", None)
        return data

    @field_validator("exclude")
    @classmethod
    def _exclude_versions(cls, v: list[str]) -> list[str]:
        """Tool versions, as NAME@VERSION: a bare name matched nothing and excluded nothing (QA)."""
        bare = [key for key in v if not split_key(key)[1]]
        if bare:
            raise ValueError(f"exclude takes tool versions as NAME@VERSION; {', '.join(map(repr, bare[:5]))} "
                             "names no version")
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        if any(not t.strip() for t in v):  # QA AA: `--tag ''` (an unset variable) was dropped, and no tag asked for
            raise ValueError("a tag is blank: leave it out to ask for none")
        return sorted({t.strip().lower() for t in v})

    @field_validator("version")
    @classmethod
    def _version(cls, v: str | None, info: ValidationInfo) -> str | None:
        # QA: a version alone ended no_candidates, "no tool matches this scenario, namespace and tags".
        # A namespace that failed its own check is not in `info.data`: only a missing one is None.
        if v is not None and "namespace" in info.data and info.data["namespace"] is None:
            raise ValueError(f"version {v} is given without namespace: name the tool it is a version of")
        return check_semver(v)

    @field_validator("input", "context", mode="before")
    @classmethod
    def _json(cls, v: Any) -> Any:
        # Before the type's own check, so that a key that is not text reads the same at the top
        # level as deeper down (QA: pydantic's "input.1.[key] Input should be a valid string").
        if isinstance(v, Mapping):  # any mapping the type's check would take (QA recheck N3: a mappingproxy)
            check_json_value(dict(v))
        return v

    @field_validator("context")
    @classmethod
    def _context_values(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_context(v)  # explicit phase, languages, complexity, task type, testing (selection/context.py)
        return v


class FieldError(BaseModel):
    """A field of a payload that is refused, and why: what every refusal (a call's result, a
    judgement's reply, a report's) names, in one shape."""

    field: str  # its dotted path in the payload; "(payload)" for the payload as a whole
    message: str
    type: str = ""  # pydantic's error type, or ours: too_large, another_job


# The rules of the patterns a payload's fields match, in words (QA 48: "String should match pattern
# '^[a-z][a-z0-9_]{0,63}$'" told a user of `--namespace 'Bad Name'` a regular expression).
PATTERN_WORDS = {
    NAME_PATTERN: "a tool's name: lowercase letters, digits and _, starting with a letter, at most 64",
    CALL_ID_PATTERN: "letters, digits and _ . : - only, 1 to 128 of them",
}


def field_errors(exc: ValidationError) -> list[FieldError]:
    """A validation error as the fields it names and what is wrong with each, in words: pydantic's
    "Value error, " before a validator's own message is dropped, and a pattern's rule said."""
    return [FieldError(field=".".join(str(p) for p in e["loc"]) or "(payload)", message=_in_words(e), type=e["type"])
            for e in exc.errors(include_url=False, include_input=True)]


def _in_words(error: Any) -> str:
    ctx = error.get("ctx") or {}
    if error["type"] == "string_pattern_mismatch" and (words := PATTERN_WORDS.get(str(ctx.get("pattern")))):
        given = error.get("input")
        lower = given.lower() if isinstance(given, str) else ""
        # QA 65a: `--namespace Slugify` was told the rule, and not the name it likely meant
        meant = f" (did you mean {lower!r}?)" if ctx.get("pattern") == NAME_PATTERN and re.fullmatch(NAME_PATTERN, lower) else ""
        return f"should be {words}{meant}"
    if error["type"] == "string_too_short" and ctx.get("min_length") == 1:
        return "is empty"
    return str(error["msg"]).removeprefix("Value error, ")


def joined_errors(errors: list[FieldError]) -> str:
    """Field errors (`field_errors`, `size_errors`, or a worker's answer) on one line, as the client
    raises them and the CLI prints them."""
    return "; ".join(f"{e.field}: {e.message}" for e in errors)


def invalid_payload_message(errors: list[FieldError]) -> str:
    """What a refused payload's answer says of it: the fields it names."""
    return f"invalid payload: {', '.join(sorted({e.field for e in errors}))}"


def size_errors(request: CallRequest, limit_bytes: int) -> list[FieldError]:
    """The input and context of a call that are larger than FITTEST_INPUT_LIMIT_BYTES as UTF-8 JSON
    (what a tool would receive), as `field_errors` names fields; none when both fit."""
    errors = []
    for field in ("input", "context"):
        size = len(json.dumps(getattr(request, field), ensure_ascii=False).encode("utf-8"))
        if size > limit_bytes:
            errors.append(FieldError(field=field, type="too_large",
                                     message=f"{field} is {size:,} bytes of JSON; the limit is {limit_bytes:,} (FITTEST_INPUT_LIMIT_BYTES)"))
    return errors


# Why a version is a candidate: the served one, the namespace's original, a look-alike, or asked for.
Source = Literal["promoted", "original", "semantic", "version"]

# A person's judgement of an output, or of a tool for a job (feedback).
Sentiment = Literal["positive", "negative"]


class ScoreBreakdown(BaseModel):
    """Why a candidate got its score: every factor, so a person can check the arithmetic."""

    base: float = 0.0  # promoted 1.0, original 0.9, semantic 0.8 x similarity
    source: Source = "semantic"
    similarity: float = 0.0
    quality: float = 1.0
    failure_penalty: float = 1.0  # what failures nearby multiply it by (seed: 0.7 ** similar_failures; learned: success rate)
    similar_failures: int = 0
    feedback: float = 0.0  # -50..50 points
    sparc: float = 0.5
    sparc_components: dict[str, float] = Field(default_factory=dict)
    extra: dict[str, float] = Field(default_factory=dict)  # policy-specific terms
    rationale: str = ""


class Candidate(BaseModel):
    """A tool version the plan may run, with the manifest it runs by and why it ranks where it does."""

    key: str
    manifest: ToolManifest
    score: float
    probability: float = 1.0  # with which the policy put it in this place
    # With which the policy put a version of its tool in this place (its own probability and its
    # other versions'): what a promotion or a trial, which choose the version, leave of the draw.
    # None: a policy that draws nothing (seed), or a plan from before it was kept.
    namespace_probability: float | None = None
    breakdown: ScoreBreakdown = Field(default_factory=ScoreBreakdown)
    # The attempt's hard timeout (selection/timeouts.py), from the version's recent run times as
    # they stood at selection; None: the executor works it out itself.
    timeout_s: float | None = None
    # It did jobs like this one (selection/job_record.py `does_the_job`): its refusal of the input
    # makes the input suspect. Decided at selection; False in a plan from before it was.
    does_the_job: bool = False
    # A version of its namespace did such a job once (`namespace_did_the_job`): it may still be
    # tried with a suspect input, and is charged for its crash (`does_such_jobs`).
    namespace_did_the_job: bool = False
    # Its description is the job's clear best match (selection/serving.py `best_matches`): its
    # refusal of the input makes the input suspect too, before it has done such jobs.
    matches_best: bool = False
    # It refused REFUSED_IN_A_ROW inputs since its last success (selection/job_record.py
    # `refuses_everything`): it may be broken, and its refusals count again.
    refuses_everything: bool = False
    # Its record anywhere stands for the job (selection/job_record.py `proven`): a refusal of it that is
    # the caller's mistake evolves nothing, as one by a version that does the job.
    proven: bool = False
    # An evolved version of an http tool: the URL and headers it calls with, its chain's http manifest's
    # as selection's registry reads it (`ToolRegistry.http_root`); its files hold no headers.
    parent_http: HttpImplementation | None = None

    def callers_mistake(self, error_class: FailureClass | None) -> bool:
        """Whether its attempt failing with `error_class` is the caller's mistake: it refused the
        input (bad_input) of a job it does, or whose clear best match it is, and does not refuse
        every input of late. (The clear best match that has not done such jobs yet may be wrong
        itself: the call still evolves it, unless it is `proven`, selection/call_endings.py
        `refused_by_a_doer`.)"""
        return self.refused_its_job(error_class) and not self.refuses_everything

    def refused_its_job(self, error_class: FailureClass | None) -> bool:
        """Whether its attempt failing with `error_class` refused the input of a job it does, or
        whose clear best match it is, or that the call named it for with its record (`proven`): the
        input is suspect, whoever is wrong, and goes on only to tools that do such jobs too."""
        return error_class is FailureClass.bad_input and (self.does_the_job or self.matches_best or self.proven)


class ToolExecutionResult(VersionKeyed, BaseModel):
    """One attempt's outcome; every attempt yields exactly one."""

    attempt_id: str
    call_id: str
    tool: str
    version: str
    success: bool
    result: Any = None
    error_class: FailureClass | None = None
    error_message: str | None = None
    execution_time_ms: float = 0.0
    timestamp: float = Field(default_factory=time.time)
    complexity: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    # A success by a version that matches the job weakly and has no record of doing it
    # (selection/call_endings.py `serves_unconfirmed`): it counts, and ranks the version for such jobs,
    # but says nothing of whether it does them (`does_the_job`): its output may not be what was asked.
    unconfirmed: bool = False
    # A refusal of the input (bad_input) by a version that does the job (`Candidate.does_the_job`),
    # or is its clear best match (`Candidate.matches_best`): the input is suspect, and only tools
    # that do such jobs too, or clearly match them, are tried with it after it.
    refused_its_job: bool = False
    # Such a refusal taken for the caller's mistake (`Candidate.callers_mistake`), or any refusal
    # after one in the same call, or a refusal of an input the version's test cases say it must
    # refuse (`refused_as_declared`): counted apart, and set aside as evidence.
    callers_mistake: bool = False
    # A refusal (bad_input) of an input a test case of the version expects an error on
    # (`ToolManifest.declares_refused`): the tool doing its job, which no run of such refusals makes
    # "maybe broken" (QA 65b: six `{"n": -5}` calls to prime_count, whose own test case expects an
    # error there, counted in its trial, said it might be broken, and started an evolution).
    refused_as_declared: bool = False
    # A success on an input that a tool doing the job by its record refused (`refused_its_job`), by
    # a version that has not done such jobs itself: its output may not be what was asked for, and its success
    # is set aside (QA recheck: a tool that takes any input, 0.50 similar, took seven such inputs
    # of a title-case job, and served the correct calls after them with lower-cased text).
    took_a_refused_input: bool = False


class CallPlan(BaseModel):
    """A call on its way through the queues: the request, the ranked candidates, what happened."""

    request: CallRequest
    candidates: list[Candidate]
    attempts: list[ToolExecutionResult] = Field(default_factory=list)
    features: dict[str, Any] = Field(default_factory=dict)  # context analysis of the call
    policy: str = "seed"
    weights_version: int = 0  # the SPARC weights the ranking read (`fittest weights`; 0: the defaults)
    degraded: list[str] = Field(default_factory=list)  # parts of selection that were unavailable
    evolved: bool = False
    evolution_report: CallEvolution | None = None
    variants: dict[str, str] = Field(default_factory=dict)  # tool key -> description variant that matched
    started_at: float = Field(default_factory=time.time)
    # Versions that matched but were not tried because their circuit breaker was open: left out by
    # selection, or passed over at their turn when it opened after the call was planned.
    held_back: list[str] = Field(default_factory=list)
    # The best description match among the versions held back when the call was planned: a job
    # meant for one of them is not the job of a fallback that ran first in its place.
    held_back_match: float = 0.0
    # Versions not tried with an input that a tool doing the job refused as the caller's mistake
    # (selection/job_record.py `does_such_jobs`): like those held back, they use up no attempt.
    passed_over: list[str] = Field(default_factory=list)
    # Versions not run because their code is not there: in FITTEST_TOOLS_DIR while it is away, or in a
    # tool folder that is gone (workers/tasks/execution.py `code_gone`): they use up no attempt either,
    # and the call names them apart from those passed over after a refused input, whose wording does
    # not fit them.
    code_missing: list[str] = Field(default_factory=list)
    # What the caller should know that did not stop the call (a namespace no tool has).
    notes: list[str] = Field(default_factory=list)
    # The age of the oldest search the ranking took from the selection cache (None: none): outcomes
    # newer than that are not in it yet (QA AD: `fittest explain` counted 1 success nearby where the
    # tool had just served 8, with nothing to say why).
    evidence_age_s: float | None = None
    # The half-open version selection placed first for its breaker's probe, if any: it uses up no
    # attempt of the call's `max_attempts` (selection/serving.py `breaker_probe`).
    probe: str | None = None
    # The half-open versions whose probe this call took where it came to them in its order (a call
    # naming a namespace, or a version ranked after others): no attempt either (QA README M1: such
    # a probe used up the call's one attempt, and its attempt did not say it was a probe).
    probed: list[str] = Field(default_factory=list)
    # The namespace the call named is no tool's: it was ranked by its scenario alone, and it ends as
    # a call that named none (QA 49: its failures evolved "no tool named 'nosuchns'").
    named_unknown: bool = False

    @property
    def namespace(self) -> str | None:
        """The namespace the call named, when a tool has it."""
        return None if self.named_unknown else self.request.namespace

    def is_probe(self, key: str) -> bool:
        """Whether `key` runs in this call as its breaker's probe, which costs the call no attempt."""
        return key == self.probe or key in self.probed

    def attempt_id(self, index: int) -> str:
        """The id of the attempt of candidate `index`: stable across redeliveries of the same
        attempt, so its effects apply once; the retry of a call after its evolution numbers its
        attempts apart (`e0`, `e1`, ...)."""
        round_ = "e" if self.request.after_evolution else ""
        return f"{self.request.call_id}:{round_}{index}"

    @property
    def failed_attempts(self) -> list[ToolExecutionResult]:
        """The attempts that ran and failed (a success has no error class), in the order tried."""
        return [a for a in self.attempts if not a.success and a.error_class is not None]

    def no_candidates_message(self) -> str:
        """Why a plan has no candidate, as a caller or an operator needs to read it: a tool that
        matched but is held back by its circuit breaker is not "no tool matches"."""
        if self.held_back:
            return (f"every version that matches is held back by its circuit breaker ({', '.join(self.held_back)}): open, "
                    "or half-open with another call probing it; one call at a time probes it once "
                    "FITTEST_BREAKER_COOLDOWN_S has passed")
        excluded = f" (the call excludes {', '.join(self.request.exclude)})" if self.request.exclude else ""
        floor = f" at least {self.request.min_similarity:g}" if self.request.min_similarity is not None else ""
        return f"no tool matches this scenario, namespace and tags{floor}{excluded}"


CallStatus = Literal["success", "failed", "invalid", "no_candidates"]


def call_of_attempt(attempt_id: str) -> str:
    """The call id of an attempt id (`CallPlan.attempt_id`): what a judgement of the call's output
    is filed under, which its attempts' counts read."""
    return attempt_id.rpartition(":")[0]


class AttemptSummary(BaseModel):
    tool: str
    version: str
    outcome: Literal["success", "failure"]
    error_class: FailureClass | None = None
    error_message: str | None = None
    execution_time_ms: float = 0.0
    probe: bool = Field(False, description="Its circuit breaker's probe (the version was half-open): it uses up no "
                                           "attempt of max_attempts, and its outcome closes the breaker or opens it again")
    callers_mistake: bool = Field(False, description="It refused the input (bad_input) of a job it does (3 or more "
                                                     "like it succeeded), or of one a tool that does it refused before it "
                                                     "in the call, or one a test case of its manifest expects an error on: "
                                                     "check the input. Counted apart; it lowers no quality")
    took_a_refused_input: bool = Field(False, description="It succeeded on an input a tool that does the job refused, "
                                                          "and has done no such job itself: check its output. Its "
                                                          "success is set aside")
    isolated: bool = Field(False, description="Its python tool ran in a process of its own: a worker process running "
                                              "an earlier delivery of this attempt died, or it probed a version that "
                                              "killed the processes running it")


class CallEvolution(BaseModel):
    """The report of a call's evolution, as the call's retry after it carries it (the
    `evolution_report` argument of fittest.resilient_tool_call) and its result shows it
    (`evolution`). It arrives in a task payload, so what the retry reads is checked here; the rest
    of the evolution's report (evolution/models.py EvolutionReport) passes through as it is."""

    model_config = ConfigDict(extra="allow")

    status: str
    message: str = ""
    parent: str = ""  # the key of the version evolved from
    version: str | None = None  # the version on trial, or, when reused, the version the call was retried with
    elapsed_s: float = 0.0
    failed_attempts: list[AttemptSummary] = Field(default_factory=list, description=(
        "The call's attempts before the evolution, which all failed; the result's `attempts` are those after it"))
    call_started_at: float | None = Field(None, gt=0, allow_inf_nan=False)  # the retry is timed from it


class RankedSummary(BaseModel):
    key: str
    score: float
    probability: float
    breakdown: ScoreBreakdown


class CallResult(BaseModel):
    """What the caller's AsyncResult resolves to, wherever the work went."""

    call_id: str = Field(description="The call's id: the caller's `call_id`, or the one made for it (the task id of its first step)")
    status: CallStatus
    scenario: str = ""  # what the call was for ("" when a refused payload gave none a call could run)
    output: Any = None
    tool: str | None = None
    version: str | None = None
    attempts: list[AttemptSummary] = Field(default_factory=list, description=(
        "The attempts of the call's last round, in the order tried: of a call retried after an evolution, those after "
        "it; the round before it, which all failed, is `evolution.failed_attempts`"))
    ranking: list[RankedSummary] = Field(default_factory=list)
    errors: list[FieldError] = Field(default_factory=list)  # validation errors when invalid
    message: str = ""
    degraded: list[str] = Field(default_factory=list)
    held_back: list[str] = Field(default_factory=list)  # not tried: their circuit breaker was open
    notes: list[str] = Field(default_factory=list)  # what did not stop the call, e.g. a namespace no tool has
    evolution: CallEvolution | None = None
    # What ranked the call: the policy, and the version of the SPARC weights it read (`fittest
    # weights` lists them; 0: the defaults), so that a choice can be traced to the weights behind it.
    policy: str | None = None  # None: the call was refused before anything ranked it
    weights_version: int | None = None
    elapsed_ms: float = 0.0  # from the call's start to its result, an evolution and its retry included
    # Why nothing was ranked (status no_candidates), as `message` says it: `no_such_tool` (a
    # `call_tool` of a name no tool has), `no_such_version` and `no_such_tag` (a version or tag no
    # tool has) are the caller's to mend (the CLI refuses them, exit code 2), the others are answers.
    no_candidates_reason: Literal["no_match", "no_such_tool", "no_such_version", "no_such_tag", "held_back"] | None = None

    @classmethod
    def from_plan(cls, plan: CallPlan, status: CallStatus, message: str = "") -> CallResult:
        last = plan.attempts[-1] if plan.attempts else None
        won = last if status == "success" and last is not None and last.success else None
        return cls(
            call_id=plan.request.call_id,
            status=status,
            scenario=plan.request.scenario,
            output=won.result if won else None,
            tool=won.tool if won else None,
            version=won.version if won else None,
            attempts=[
                AttemptSummary(
                    tool=a.tool,
                    version=a.version,
                    outcome="success" if a.success else "failure",
                    error_class=a.error_class,
                    error_message=a.error_message,
                    execution_time_ms=a.execution_time_ms,
                    probe=plan.is_probe(a.key),
                    callers_mistake=a.callers_mistake,
                    took_a_refused_input=a.took_a_refused_input,
                    isolated=bool(a.metadata.get("isolated")),
                )
                for a in plan.attempts
            ],
            ranking=[
                RankedSummary(key=c.key, score=c.score, probability=c.probability, breakdown=c.breakdown)
                for c in plan.candidates
            ],
            message=message,
            degraded=plan.degraded,
            held_back=plan.held_back,
            notes=plan.notes,
            evolution=plan.evolution_report,
            policy=plan.policy,
            weights_version=plan.weights_version,
            elapsed_ms=(time.time() - plan.started_at) * 1000.0,
        )


class Promotion(BaseModel):
    """Which version of a namespace is served; `on_trial` shares traffic until it proves itself."""

    namespace: str
    evolved_version: str
    original_version: str
    parent_version: str | None = None  # what a rollback serves again (None: the original)
    reason: str = ""
    mutation: str = ""
    promoted_at: float = Field(default_factory=time.time)
    status: Literal["on_trial", "active", "rolled_back"] = "on_trial"
    by: Literal["fittest", "operator"] = "fittest"  # operator: `fittest promote` or `rollback`
    # what a by-hand promotion replaced, which its rollback restores: the trial it interrupted (a trial
    # is decided only while its promotion is on trial: QA U saw one serve every call, never decided,
    # after a rollback), or an earlier by-hand promotion (evolution/promotions.py `replaced_promotion`);
    # for a version evolved from the version on trial, that trial, which goes on if it rolls back
    resumes: Promotion | None = None


class FailureCount(str, Enum):
    """How one failed attempt counts in its version's stats (`StateStore.mark_failure`)."""

    failure = "failure"  # failures += 1, and its quality falls by its severity's penalty
    refused_input = "refused_input"  # the caller's mistake: refused_inputs and refused_in_a_row += 1
    not_its_job = "not_its_job"  # a fallback's refusal of (or crash on) another tool's job: refused_inputs += 1
    declared_refusal = "declared_refusal"  # a refusal its test cases expect (`refused_as_declared`): refused_inputs += 1


class FailureMark(VersionKeyed, BaseModel):
    """Payload of `fittest.mark_failure`: one failed attempt to apply once."""

    attempt_id: str
    call_id: str
    tool: str
    version: str
    scenario: str
    error_class: FailureClass
    error_message: str = ""
    severity: Severity | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    features: dict[str, Any] = Field(default_factory=dict)
    timestamp: float = Field(default_factory=time.time)
    # The call was meant for this tool: it asked for its namespace, or (by scenario) tried it first.
    # False for a fallback on another tool's job, whose input evolution must not try to "fix".
    targeted: bool = True
    # The version does such jobs, by its record or clearly by its description (selection/job_record.py
    # `does_such_jobs`): a fallback that does is charged for its crash; one that does not is not.
    does_such_jobs: bool = True
    callers_mistake: bool = False  # the attempt's (`ToolExecutionResult.callers_mistake`): counted, not demoted
    refused_as_declared: bool = False  # the attempt's (`ToolExecutionResult.refused_as_declared`): not "in a row" either

    def effective_severity(self) -> Severity:
        return self.severity or SEVERITY_BY_CLASS[self.error_class]

    def counts_as(self) -> FailureCount:
        """The caller's mistake demotes nothing (QA AE: 11 of them took a tool that does the job from
        1.00 to 0.43), nor does a fallback's refusal of an input made for another tool's job (QA
        new user: ~20 calls of a job whose tool was held back took two unrelated tools from 1.00 to
        0.21 and 0.34, and an evolution then made one of them take the input), nor the crash of a
        fallback that does no such jobs on such an input: an executable that reads a key the other
        tool's input lacks exits with a traceback, and was charged a high-severity crash on each of
        its versions tried (QA evolution: two versions 0.80 -> 0.70 on a job never meant for them).
        A fallback that does such jobs crashing on one is charged. Each is still remembered near its
        scenario, where the fallback's ranks it down for such jobs, and a crash still counts toward
        its circuit breaker."""
        if self.refused_as_declared:
            return FailureCount.declared_refusal
        if self.callers_mistake:
            return FailureCount.refused_input
        if not self.targeted and (self.error_class is FailureClass.bad_input
                                  or (self.error_class is FailureClass.crash and not self.does_such_jobs)):
            return FailureCount.not_its_job
        return FailureCount.failure


class OutcomeRecord(BaseModel):
    """Payload of `fittest.record_outcome`: a finished call's attempts, to learn from once."""

    call_id: str
    scenario: str
    features: dict[str, Any] = Field(default_factory=dict)
    attempts: list[ToolExecutionResult]
    policy: str = "seed"
    probabilities: dict[str, float] = Field(default_factory=dict)
    input: dict[str, Any] = Field(default_factory=dict)  # replayed when an evolved version is verified
    variants: dict[str, str] = Field(default_factory=dict)  # tool key -> description variant served
    namespace: str | None = None  # the namespace the call asked for (a trial counts that traffic)
    # The version the call asked for: the caller chose it, no trial's draw did, so it is no trial
    # traffic (QA 65b: 3 of a version's "5/5" trial successes were calls pinned to it).
    version: str | None = None
    components: dict[str, dict[str, float]] = Field(default_factory=dict)  # tool key -> SPARC components ranked with
    # The retry of a call after its evolution: it runs the new version on the input its verification
    # replayed already, so its outcome is no trial traffic (workers/trials.py `account_trials`).
    after_evolution: bool = Field(False, description="Set by fittest on a call's retry after its evolution, which "
                                                      "evolves nothing again; a caller that sets it turns evolution off for its call")
    # The attempts whose failure counts as a fallback's refusal of another tool's job
    # (`FailureMark.counts_as`): among their versions' refused inputs, not their failures.
    not_its_job: list[str] = Field(default_factory=list)

    def set_aside(self) -> set[str]:
        """The attempt ids whose outcome says nothing of their tool: the refusals that were the
        caller's mistake (`ToolExecutionResult.callers_mistake`), and a success on such an input by
        a version that has not done such jobs (`took_a_refused_input`). A refusal is counted in its
        version's `refused_inputs`, a success in nothing; both are left out of what selection, the
        trials and evolution read (their feedback and execution records are stored `forgiven`).
        The success of a version that does such jobs counts."""
        return {a.attempt_id for a in self.attempts if a.callers_mistake or a.took_a_refused_input}

    @classmethod
    def from_plan(cls, plan: CallPlan) -> OutcomeRecord:
        """What a finished call hands the feedback queue (the workers and the selection bench alike)."""
        return cls(
            call_id=plan.request.call_id,
            scenario=plan.request.scenario,
            features=plan.features,
            attempts=plan.attempts,
            policy=plan.policy,
            probabilities={c.key: c.probability for c in plan.candidates},
            input=plan.request.input,
            variants=plan.variants,
            namespace=plan.request.namespace,
            version=plan.request.version,
            components={c.key: c.breakdown.sparc_components for c in plan.candidates},
            after_evolution=plan.request.after_evolution,
        )

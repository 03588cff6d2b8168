"""The payloads of the tasks a service sends by name, and the answers it gets, beside the call's own
(`CallRequest`, `CallResult`): what the client checks before sending, the workers check on arrival,
and `fittest schema` prints."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, TypeAdapter, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from evolution.trial import JudgedTrial
from selection.feedback import FeedbackRecord, TrendPeriod
from selection.manifest import NAME_PATTERN, check_semver, tool_reference
from selection.models import (CALL_ID_PATTERN, NOT_BLANK, CallRequest, CallResult, FieldError, Sentiment,
                              field_errors, invalid_payload_message)
from selection.ports import RetrainEvidence, RetrainNote, SelectionWeights


def _name_or_namespace(schema: dict[str, Any]) -> None:
    """The schema a service reads says `name` or `namespace`, either one, is required (QA recheck N3:
    it required `name`, where the workers take `namespace` alone), and lists the fields of a call's
    payload it takes too, and no other (QA live F9: a service typing its payload from it could not
    type `call_id`, `tags`, `context`, `max_attempts` or `min_similarity`, and read other keys as fine),
    and that `name` may be NAME@VERSION."""
    required = [r for r in schema.pop("required", []) if r != "name"]
    if required:
        schema["required"] = required
    # NAME@VERSION names that version, as the workers read it (QA 55b L6: the schema refused it)
    schema["properties"]["name"]["pattern"] = NAME_PATTERN.removesuffix("$") + r"(@[0-9A-Za-z.+-]+)?$"
    schema["anyOf"] = [{"required": ["name"]}, {"required": ["namespace"]}]
    call = CallRequest.model_json_schema()
    schema["properties"] = {**schema["properties"],
                            **{k: v for k, v in call["properties"].items() if k not in schema["properties"]}}
    schema.setdefault("$defs", {}).update(call.get("$defs", {}))
    if not schema["$defs"]:
        del schema["$defs"]
    schema["additionalProperties"] = False


def _version_named(data: dict[str, Any], field: str) -> dict[str, Any]:
    """`data` with its `field` given as NAME@VERSION read as NAME, and VERSION as its `version`; a
    `version` given besides that names another is refused."""
    name, version = tool_reference(data[field])
    given = data.get("version")
    if given is not None and given != version:
        raise ValueError(f"{field} {data[field]!r} names version {version}, and version {given!r} another: give one")
    return {**data, field: name, "version": version}


class CallToolPayload(BaseModel):
    """Keyword arguments of `fittest.call_tool` (queue `selection`). The other fields of `resilient_tool_call`'s payload
    (call_id, tags, context, max_attempts, min_similarity) are accepted too and mean the same (its
    schema lists them); `namespace` is `name` (either one names the tool)."""

    model_config = ConfigDict(json_schema_extra=_name_or_namespace)

    name: str = Field(min_length=1, pattern=NAME_PATTERN)  # or NAME@VERSION
    input: dict[str, Any] = {}
    version: str | None = None
    use_evolved: StrictBool = True
    scenario: str | None = None  # what the call is for; default the tool's description
    namespace: str | None = None  # `name` again, if given: another name is refused

    @model_validator(mode="before")
    @classmethod
    def _namespace_names_it(cls, data: Any) -> Any:
        """QA ops L1: the schema said `namespace` is `name`, and a payload naming the tool by
        `namespace` alone was refused for lacking `name`. A name NAME@VERSION names that version,
        as `record_feedback`'s tool does (QA 52a L2: it was sent, and refused by the worker naming
        `namespace`, a field the caller never gave)."""
        if isinstance(data, dict) and "name" not in data and isinstance(data.get("namespace"), str):
            data = {**data, "name": data["namespace"]}
        if isinstance(data, dict) and isinstance(data.get("name"), str) and "@" in data["name"]:
            split = _version_named(data, "name")
            data = {**split, **({"namespace": split["name"]} if data.get("namespace") == data["name"] else {})}
        return data

    @field_validator("version")
    @classmethod
    def _semver(cls, v: str | None) -> str | None:
        return check_semver(v)

    @field_validator("namespace")
    @classmethod
    def _the_name(cls, v: str | None, info: ValidationInfo) -> str | None:
        """QA integration L6: a `namespace` other than `name` was dropped without a word."""
        name = info.data.get("name")
        if v is not None and name is not None and v != name:
            raise ValueError(f"is the tool's name here, given as {v!r} beside name {name!r}: give one")
        return v


class FeedbackRequest(BaseModel):
    """Keyword arguments of `fittest.record_feedback` (queue `feedback`): a judgement of a tool
    version's work, which selection weighs by the similarity of its scenario and by its age."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=64)
    sentiment: Sentiment
    version: str | None = None  # default: the version of it `call_id` ran, else the one it serves
    # Default: `call_id`'s scenario, else the tool in general (empty says so too).
    scenario: Annotated[str | None, NOT_BLANK] = Field(None, max_length=4000)
    reason: str = Field("", max_length=500)
    quality: StrictFloat = Field(1.0, ge=0.0, le=1.0)
    # The call whose output this judges: the judgement takes the place of the feedback that call's
    # outcome gave the version automatically (a success that a person found wrong is not a success).
    # The call must be known (its result stored, or its outcome recorded) and have run the tool.
    call_id: str | None = Field(None, pattern=CALL_ID_PATTERN)

    @model_validator(mode="before")
    @classmethod
    def _tool_at_version(cls, data: Any) -> Any:
        """NAME@VERSION names that version, as the client and the CLI take it (QA 55b L6: the task
        answered "no tool named 'count_vowels@1.0.0'")."""
        if isinstance(data, dict) and isinstance(data.get("tool"), str) and "@" in data["tool"]:
            return _version_named(data, "tool")
        return data

    @field_validator("quality", mode="before")
    @classmethod
    def _a_number(cls, v: Any) -> Any:
        """NaN fails the range check, whose words ("less than or equal to 1") sent QA F8 looking for
        a value too large; it is not a number at all."""
        try:
            nan = math.isnan(float(v))
        except (TypeError, ValueError):
            return v
        if nan:
            raise ValueError(f"{v} is not a number: give one from 0 to 1")
        return v


class JudgementEffects(BaseModel):
    """What a recorded judgement changed, as `FeedbackReply` and `RecordedFeedback` both say it."""

    # The version's feedback score for the judgement's scenario, with it (None: the vector memory
    # cannot be read now; the judgement is kept and written when it is back).
    score_now: float | None = None
    trial: JudgedTrial | None = None  # the trial the judged call counted in, as it stands after it
    # The version a call of the judgement's scenario most likely tries first now, with the chance of that
    # first place (workers/tasks/feedback.py `likeliest_first`; None: a judgement of
    # the tool in general, or the vector memory cannot be read now). A judgement without a call
    # scales a score by at most half, which a tool's successes on the job, or a description that
    # matches it far better than the others', outweigh; this says
    # whether it changed the choice (QA selection F1: seven negatives, and the next call went to
    # the same tool, nothing saying so).
    first_now: str | None = None
    first_probability: float | None = None  # the chance of that first place (the policy explores near-ties)


class FeedbackReply(JudgementEffects):
    """What `fittest.record_feedback` answers. `invalid`: what was given is refused (`errors` name
    the fields); `unavailable`: a store needed to check it is down, and the same judgement sent
    again later is recorded; `recorded`: stored as `feedback`."""

    status: Literal["recorded", "invalid", "unavailable"]
    errors: list[FieldError] = Field(default_factory=list)
    feedback: FeedbackRecord | None = None

    @classmethod
    def refused(cls, field: str, message: str, type: str, status: Literal["invalid", "unavailable"] = "invalid") -> FeedbackReply:
        """`type` as a program branches on it (QA 59a L1: it was blank): no_such_tool, no_such_version,
        no_such_call, not_in_call, unavailable."""
        return cls(status=status, errors=[FieldError(field=field, message=message, type=type)])


class RecordedFeedback(JudgementEffects):
    """A judgement as the feedback worker recorded it: what fittest's client returns (it raises
    for the other answers)."""

    feedback: FeedbackRecord


class FeedbackReportRequest(BaseModel):
    """Keyword arguments of `fittest.feedback_report` (queue `feedback`): a tool's feedback entries
    and their trend per hour, day or week (`fittest feedback show`)."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=64)  # the tool's name: all its versions
    limit: StrictInt = Field(50, ge=1)  # entries listed, newest first
    # the trend's period (a worker of an earlier release refuses the key: sent only when not "day")
    per: TrendPeriod = "day"


class RecommendRequest(BaseModel):
    """Keyword arguments of `fittest.recommend` (queue `learning`): tool versions with low success
    in some context (`fittest recommend`)."""

    model_config = ConfigDict(extra="forbid")

    min_runs: StrictInt = Field(5, ge=1)  # attempts a version needs in a context to be judged there
    max_rate: StrictFloat = Field(0.5, ge=0.0, le=1.0)  # success rate below which it is listed


class ForgetRequest(BaseModel):
    """Keyword arguments of `fittest.forget` (queue `feedback`): remove every record of these calls
    that holds what their callers sent (`fittest forget`, workers/forget.py). `again`: also once
    more a minute later, for records that were still on their way (the second pass sends False)."""

    model_config = ConfigDict(extra="forbid")

    call_ids: list[Annotated[str, Field(pattern=CALL_ID_PATTERN)]] = Field(min_length=1, max_length=1000)
    again: StrictBool = True


class ForgetReport(BaseModel):
    """What `fittest.forget` removed, per store: `feedback`, `executions`, `failures` (vector
    points), `recent_successes`, `learning_window`, `pending_writes` (Redis list entries) and
    `results` (call results). A call still running is left alone (`running`); `store_error` says
    why the vector store's records are kept, for a pass that found it down."""

    call_ids: list[str]
    running: list[str] = Field(default_factory=list)
    removed: dict[str, int] = Field(default_factory=dict)
    store_error: str = ""
    again_in_s: float | None = None  # when the second pass runs; None: none is sent


class EvolveRequest(BaseModel):
    """Keyword arguments of `fittest.prepare_evolution` (queue `selection`) sent by hand, as
    `fittest evolve NAME` does: evolve a namespace's served version, or `version`, off the call
    path. (A failed call sends its plan instead, `plan_data`.) Answered by an `EvolutionReport`."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = Field(min_length=1, max_length=64)
    version: str | None = Field(None, min_length=1)  # None: the version the namespace serves
    reason: str = ""  # written to the changelog with the evolution


class InvalidReply(BaseModel):
    """What a task whose answer is a report (`feedback_report`, `recommend`) answers to a payload
    it refuses: `status`, `errors` and `message` as a refused call's result has them."""

    status: Literal["invalid"] = "invalid"
    errors: list[FieldError] = Field(default_factory=list)
    message: str = ""

    @classmethod
    def of(cls, exc: ValidationError) -> InvalidReply:
        errors = field_errors(exc)
        return cls(errors=errors, message=invalid_payload_message(errors))


class ExplainResult(CallResult):
    """What `fittest.explain` answers: the result a call would get with nothing run (its `ranking`,
    or why there is none), with what the ranking was made from."""

    # the call's context as analysed (selection/context.py: each value and where it came from),
    # which the SPARC component is read against
    context: dict[str, Any] = Field(default_factory=dict)
    evidence_age_s: float | None = None  # how old the cached searches it ranked by are
    cache_ttl_s: float | None = None  # how long selection keeps them (FITTEST_SELECTION_CACHE_TTL_S)
    # Its `policy` (CallResult's) is the memory worker's FITTEST_POLICY, not the asking command's (QA selection F8).


class RetrainResult(BaseModel):
    """What a retrain (`fittest.retrain_weights`, on the beat) did. Unchanged: too few records, no
    component that predicts success clearly enough (`evidence` says which), or another retrain
    running (`reason`); changed: the weights stored as `version`."""

    changed: bool
    reason: str = ""  # why nothing was even tried
    version: int | None = None  # of the weights in force after it
    weights: dict[str, float] = Field(default_factory=dict)
    classifier: str | None = None  # the revision of the tool classifier those weights name
    evidence: RetrainEvidence = Field(default_factory=RetrainEvidence)


NoResult = Literal["pending", "unknown", "revoked", "error", "not_a_call", "expired"]


class CallWithoutResult(BaseModel):
    """What `fittest call --json` and `fittest result --json` print of a call that gave them no
    result (exit code 1): still pending when the wait ended (or was stopped), unknown, revoked,
    ended by an error in its worker, not a call's id, or a request that expired untaken. A script
    reads the id where it reads a result's (QA 60d M2: no schema said these statuses)."""

    call_id: str = Field(description="The call's id, as the command was given it or sent it: `fittest result ID` asks again")
    status: NoResult
    message: str


class CommandError(BaseModel):
    """What a command run with --json prints when it ends with an error (`fail`): one JSON document
    on stdout whichever way it ends (QA 60d M2), the message on stderr too."""

    status: Literal["error"] = "error"
    exit_code: int
    message: str


def every_field_present(schema: dict[str, Any]) -> dict[str, Any]:
    """An answer's schema as the answer is sent: the workers and the CLI dump every field of their
    models, defaults included, so each is required. Read as a payload's schema (fields with defaults
    optional), `{}` passed as a refusal (QA 60e N5)."""
    for node in [schema, *schema.get("$defs", {}).values()]:
        if "properties" in node:
            node["required"] = list(node["properties"])
    return schema


def answer_schema(model: type[BaseModel]) -> dict[str, Any]:
    return every_field_present(model.model_json_schema(mode="serialization"))


def call_output_schema() -> dict[str, Any]:
    """The schema of what `fittest call --json` and `fittest result --json` print: the call's result,
    a call without one, or a payload refused before it was sent (`invalid`, exit code 2)."""
    schema = every_field_present(TypeAdapter(Union[CallResult, CallWithoutResult, InvalidReply, CommandError]).json_schema(mode="serialization"))
    schema["description"] = ("What `fittest call --json` and `fittest result --json` print: the call's result (exit code 0 "
                             "or 1), a call that gave none (exit code 1), a payload refused before it was sent (exit code 2), or the error "
                             "that ended the command before it had one (`status` error, its `exit_code`). "
                             "An answer the CLI cannot read (workers of another release, exit code 3) is printed as it came.")
    return schema


def payload_schemas() -> dict[str, dict[str, Any]]:
    """Each task a foreign service may send by name, and each answer, by the name `fittest schema`
    takes: a task's payload under its name, its answer under NAME_reply."""
    from evolution.models import EvolutionReport
    from selection.recommend import RecommendationReport
    from workers.feedback_store import FeedbackReport

    def sent(model: type[BaseModel], task: str) -> dict[str, Any]:
        """A call's payload schema, its queue said as the other tasks' docstrings say theirs (QA 59a L2)."""
        schema = model.model_json_schema()
        schema["description"] = f"Keyword arguments of `fittest.{task}` (queue `selection`). {schema.get('description', '')}".strip()
        return schema

    return {
        "resilient_tool_call": sent(CallRequest, "resilient_tool_call"),
        "call_tool": CallToolPayload.model_json_schema(),
        "record_feedback": FeedbackRequest.model_json_schema(),
        "record_feedback_reply": answer_schema(FeedbackReply),
        "explain": sent(CallRequest, "explain"),
        "explain_reply": answer_schema(ExplainResult),
        "feedback_report": FeedbackReportRequest.model_json_schema(),
        "feedback_report_reply": answer_schema(FeedbackReport),
        "recommend": RecommendRequest.model_json_schema(),
        "recommend_reply": answer_schema(RecommendationReport),
        "prepare_evolution": EvolveRequest.model_json_schema(),
        "prepare_evolution_reply": answer_schema(EvolutionReport),
        "retrain_weights_reply": answer_schema(RetrainResult),
        "forget": ForgetRequest.model_json_schema(),
        "forget_reply": answer_schema(ForgetReport),
        "invalid_reply": answer_schema(InvalidReply),
        "result": answer_schema(CallResult),
        "call_output": call_output_schema(),
    }


class WeightsShown(BaseModel):
    """`fittest weights --json`: the weights in force, earlier versions newest first, and the latest
    retrain that stored nothing since them (None: none did)."""

    current: SelectionWeights
    history: list[SelectionWeights]
    last_retrain: RetrainNote | None

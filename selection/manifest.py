"""Tool manifests: the YAML a team writes to offer a tool version to fittest.

A manifest is validated by pydantic so that a bad one is refused with the file, the field and
the reason, while the other manifests of the directory still load.
"""

from __future__ import annotations

import json
import os
import stat
import string
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

import semver
import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
HEADER_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")

Phase = Literal["specification", "pseudocode", "architecture", "refinement", "completion"]
TaskType = Literal[
    "code_generation",
    "modification",
    "bug_fix",
    "refactoring",
    "testing",
    "documentation",
    "analysis",
    "deployment",
    "general",
]


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file, the field and the reason."""

    def __init__(self, path: str | Path, field: str, reason: str, fields: list[str] | None = None,
                 implementation: ToolManifest | None = None) -> None:
        self.path = str(path)
        self.field = field
        self.reason = reason
        self.fields = fields or [field]  # every field at fault, the first being `field`
        # A manifest refused for other fields whose implementation is valid: that implementation,
        # in a manifest built unchecked, for the checks of its files (selection/registry.py).
        self.implementation = implementation
        super().__init__(f"{self.path}: field '{field}': {reason}")


class SparcMetadata(BaseModel):
    """Where a tool is meant to be used; absent fields mean 'any' and score neutral."""

    model_config = ConfigDict(extra="forbid")

    phases: list[Phase] = Field(default_factory=list)
    languages: list[str] = Field(default_factory=list)
    task_types: list[TaskType] = Field(default_factory=list)
    complexity_min: float = Field(0.0, ge=0.0, le=1.0)
    complexity_max: float = Field(1.0, ge=0.0, le=1.0)

    @field_validator("languages")
    @classmethod
    def _lower(cls, v: list[str]) -> list[str]:
        return [x.strip().lower() for x in v if x.strip()]

    @model_validator(mode="after")
    def _range(self) -> SparcMetadata:
        if self.complexity_min > self.complexity_max:
            raise ValueError("complexity_min is greater than complexity_max")
        return self


class PythonImplementation(BaseModel):
    """A function `module:function` in a file beside the manifest (or an importable module)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["python"]
    entrypoint: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class ExecutableImplementation(BaseModel):
    """A program run with an argv list (never a shell): JSON on stdin, JSON on stdout."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["executable"]
    argv: list[str] = Field(min_length=1)

    @field_validator("argv")
    @classmethod
    def _plain_placeholders(cls, argv: list[str]) -> list[str]:
        """Refused at load, not at the first call: a template that cannot be filled in whatever the input."""
        for template in argv:
            try:
                parts = list(string.Formatter().parse(template))
            except ValueError as exc:
                raise ValueError(f"bad argv template {template!r}: {exc}") from exc
            for _, name, spec, conversion in parts:
                if name is not None and (not name.isidentifier() or spec or conversion):
                    raise ValueError(f"placeholder {{{name}}} in {template!r}: only plain {{name}} is allowed")
        return argv


class HttpImplementation(BaseModel):
    """A service that takes the input as a JSON POST body and answers JSON."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["http"]
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _url_parses(cls, url: str) -> str:
        """Refused at load, not at each call (QA M: `http://[::1:8819/x` raised out of every attempt)."""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises for a port that is not a number in 0..65535
        except ValueError as exc:
            raise ValueError(f"{url!r} is not a valid URL: {exc}") from exc
        if not parts.hostname or any(c.isspace() for c in url):
            raise ValueError(f"{url!r} is not a valid URL: " + ("it contains white space" if parts.hostname else "it names no host"))
        return url

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        """Names and values HTTP can carry (QA M: a value with an 'É' raised UnicodeEncodeError out of every attempt)."""
        for name, value in headers.items():
            if not name or not set(name) <= HEADER_NAME_CHARS:
                raise ValueError(f"header name {name!r} is not an HTTP token (letters, digits, !#$%&'*+-.^_`|~)")
            if not value.isascii() or any(c in "\r\n\0" for c in value):
                raise ValueError(f"header {name}: value {value!r} must be ASCII text on one line")
        return headers


Implementation = Annotated[
    PythonImplementation | ExecutableImplementation | HttpImplementation,
    Field(discriminator="kind"),
]
_IMPLEMENTATION: TypeAdapter[Implementation] = TypeAdapter(Implementation)


class TestCase(BaseModel):
    """An input and what its output must satisfy; used by verification before any promotion."""

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="forbid")

    input: dict[str, Any]
    expect: Any = None  # exact output, when given
    expect_keys: list[str] = Field(default_factory=list)  # keys the output object must have
    expect_error: bool = False  # the tool must fail on this input

    @model_validator(mode="after")
    def _one_expectation(self) -> TestCase:
        if self.expect_error and (self.expect is not None or self.expect_keys):
            raise ValueError("a case with expect_error: true has no output to check; drop expect and expect_keys")
        return self

    def expectation(self) -> str:
        """What the case asks of the tool's run, in words (`fittest test` shows it beside the outcome)."""
        if self.expect_error:
            return "an error"
        wanted = [f"output {_short(self.expect)}"] if self.expect is not None else []
        wanted += [f"key(s) {', '.join(self.expect_keys)}"] if self.expect_keys else []
        return ", ".join(wanted) or "an output"

    def check(self, success: bool, output: Any, failure: str | None = None) -> str | None:
        """Whether a run of this input satisfies the case: None when it does, else why not.
        `failure`: the failed run's class (workers' FailureClass value), when known.

        The one reading of a test case, shared by verification, `fittest test`, the tests and the
        demo, so a case cannot pass in one place and fail in another. An error expected is one the
        tool gives: a run cut off (timeout) or whose upstream did not answer (unavailable) says
        nothing of the input, and does not pass (QA 65a: a hanging run and a service that was down
        passed such cases). An output is compared as JSON: true is not 1 (QA 65a: both passed).
        """
        if self.expect_error:
            if success:
                return f"expected an error, got output {_short(output)}"
            return f"expected an error of the tool's, the run failed as {failure}" if failure in NOT_THE_TOOLS_ERROR else None
        if not success:
            return "expected an output, the tool failed"
        if self.expect is not None and not same_json(output, self.expect):
            return f"expected {_short(self.expect)}, got {_short(output)}"
        missing = [k for k in self.expect_keys if not isinstance(output, dict) or k not in output]
        if missing:
            return f"output lacks key(s) {', '.join(missing)}: {_short(output)}"
        return None


# Failures of a run that say nothing of its input: it was cut off, or its upstream did not answer.
NOT_THE_TOOLS_ERROR = frozenset({"timeout", "unavailable"})


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same: Python's == takes true for 1 and false for 0; numbers
    compare by value (1 is 1.0, as JSON has one kind of number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _short(value: Any, limit: int = 200) -> str:
    """`value` as JSON, as a manifest's author wrote it, cut at `limit` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


class ToolManifest(BaseModel):
    """One tool version. `name` is the namespace (a capability), `version` one implementation."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    version: str = "1.0.0"
    description: str = Field(min_length=1, max_length=4000)
    examples: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    sparc: SparcMetadata | None = None
    implementation: Implementation
    timeout_s: float = Field(10.0, gt=0, le=600)
    test_cases: list[TestCase] = Field(default_factory=list)
    # The tool changes something outside itself (writes a record, sends a message, charges a card):
    # an evolution's verification then runs it on its test cases only, never on the inputs of real
    # calls, which it would otherwise replay (evolution/verification.py).
    side_effects: bool = False
    parent_version: str | None = None  # set on evolved versions
    deprecated: bool = False
    # Where the manifest was loaded from; runners resolve {tool_dir} and python files against it.
    tool_dir: str | None = None
    evolved_file: str | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _given(cls, v: Any) -> Any:
        if v is None:  # QA 65a: `version:` or `version: null` said "Input should be a valid string"
            raise ValueError("is empty: a version is MAJOR.MINOR.PATCH, as in version: 1.0.0")
        return v

    @field_validator("version", "parent_version")
    @classmethod
    def _semver(cls, v: str | None) -> str | None:
        return check_semver(v)

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        return sorted({t.strip().lower() for t in v if t.strip()})

    def declares_refused(self, value: dict[str, Any]) -> bool:
        """Whether a test case of this version says it must refuse `value` (`expect_error: true`, the
        same JSON input): its refusal of such an input is the tool doing its job."""
        return any(c.expect_error and same_json(c.input, value) for c in self.test_cases)

    @property
    def key(self) -> str:
        """`name@version`: the identity of a tool version everywhere (Redis, Qdrant, results)."""
        return tool_key(self.name, self.version)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What the parser found wrong and where (line and column, from 1), in one line."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    context = getattr(exc, "context", None)
    if problem is None:
        return str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    start = getattr(exc, "context_mark", None)
    if context and start is not None and mark is not None and (start.line, start.column) != (mark.line, mark.column):
        # where the quote, bracket or brace that never closed opened: an unclosed quote is found at the end of the file (QA M)
        context += f" that opened at line {start.line + 1}, column {start.column + 1}"
    return f"{problem}{where}" + (f" ({context})" if context else "")


def check_semver(version: str | None) -> str | None:
    """A version as manifests and calls name it; raises ValueError for anything else."""
    if version is not None and not semver.Version.is_valid(version):
        raise ValueError(f"'{version}' is not a semantic version (MAJOR.MINOR.PATCH)")
    return version


def tool_key(name: str, version: str) -> str:
    return f"{name}@{version}"


class VersionKeyed:
    """A record of one tool version's doing (an attempt, a failure, a judgement, an execution),
    named by its `tool` and `version` fields; `key` is that version's identity, as a manifest's."""

    if TYPE_CHECKING:
        tool: str
        version: str

    @property
    def key(self) -> str:
        return tool_key(self.tool, self.version)


def entrypoint_file(entrypoint: str) -> str:
    """The file of a python entrypoint's module, relative to the tool's folder (`pkg.mod:f` -> `pkg/mod.py`)."""
    return str(PurePosixPath(*entrypoint.partition(":")[0].split("."))) + ".py"


def split_key(key: str) -> tuple[str, str]:
    name, _, version = key.partition("@")
    return name, version


def tool_reference(text: str) -> tuple[str, str | None]:
    """A tool as people and services name one: NAME, or NAME@VERSION for that version. One reading,
    and one wording of what is missing (ValueError), for the CLI's arguments and the client's."""
    name, at, version = text.partition("@")
    if not name.strip():
        raise ValueError(f"{text!r} names no tool: NAME, or NAME@VERSION")
    if at and not version:
        raise ValueError(f"{text!r} names no version: NAME, or NAME@VERSION")
    return name, version or None


def _faults(exc: ValidationError) -> tuple[str, str, list[str]]:
    """The first bad field, what is wrong with it and with each other bad field, and every bad
    field: an author mends them all at once rather than one per load (pydantic's "Value error, "
    left out), and a CI check reads them all (QA 51c: only the first was a field)."""
    errors = [(".".join(str(p) for p in e["loc"]) or "(manifest)", e["msg"].removeprefix("Value error, "))
              for e in exc.errors(include_url=False)]
    (field, reason), others = errors[0], errors[1:]
    return field, reason + "".join(f"; field '{where}': {why}" for where, why in others), list(dict.fromkeys(w for w, _ in errors))


def parse_manifest(data: Any, path: str | Path, tool_dir: str | Path | None = None) -> ToolManifest:
    """Validate one manifest document; raise ManifestError naming the file and field."""
    if not isinstance(data, dict):
        raise ManifestError(path, "(manifest)", "the document is not a mapping")
    if tool_dir is not None:
        data = {**data, "tool_dir": str(tool_dir)}
    try:
        return ToolManifest.model_validate(data)
    except ValidationError as exc:
        field, reason, fields = _faults(exc)
        raise ManifestError(path, field, reason, fields, _valid_implementation(data, fields)) from exc


def _valid_implementation(data: Any, faults: list[str]) -> ToolManifest | None:
    """The implementation of a refused manifest document, when it is valid, in a manifest built
    unchecked; None when it is at fault too."""
    if not isinstance(data, dict) or any(f.partition(".")[0] in ("implementation", "(manifest)") for f in faults):
        return None
    try:
        implementation = _IMPLEMENTATION.validate_python(data.get("implementation"))
    except ValidationError:
        return None
    return ToolManifest.model_construct(name=str(data.get("name", "")), description=str(data.get("description", "")),
                                        implementation=implementation, tool_dir=data.get("tool_dir"), evolved_file=None)


# What a manifest may hold with its YAML aliases expanded: values (scalars, lists, mappings) and
# characters of text. PyYAML reads an alias as a reference, so a 500-byte file of aliases of
# aliases loads at once, and grows to millions of values wherever it is written out: every plan
# carries its candidates' manifests (QA 57c H5: ~180 MB through Redis, and 8 s, for each call that
# ranked such a tool; QA 57d M2: one long text aliased 200 times, 80 MB in 408 KB).
MAX_MANIFEST_VALUES = 100_000
MAX_MANIFEST_CHARS = 2_000_000
MAX_MANIFEST_BYTES = 1_000_000


def load_manifest(path: str | Path) -> ToolManifest:
    """Read and validate a YAML manifest file."""
    path = Path(path)
    try:
        raw = _read_manifest_file(path, MAX_MANIFEST_BYTES)
        text = raw.decode("utf-8")
        data = _read_yaml(text)
    except ManifestError:
        raise
    except yaml.YAMLError as exc:
        raise ManifestError(path, "(yaml)", _yaml_problem(exc)) from exc
    except OSError as exc:
        raise ManifestError(path, "(file)", exc.strerror or str(exc)) from exc
    except UnicodeDecodeError as exc:  # a file saved in Latin-1 or another encoding: refuse it alone (QA M)
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ManifestError(path, "(file)", f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line} "
                                            f"({exc.reason}); save the manifest as UTF-8") from exc
    except RecursionError as exc:  # YAML nested thousands deep
        raise ManifestError(path, "(yaml)", "nested too deeply to read") from exc
    except Exception as exc:  # what PyYAML's constructors raise besides YAMLError: `2026-13-45` is a ValueError
        raise ManifestError(path, "(yaml)", f"cannot be read: {type(exc).__name__}: {exc}") from exc
    if (too_large := _expanded_too_large(data)) is not None:
        raise ManifestError(path, "(yaml)", f"holds more than {too_large} once its aliases are expanded: write them "
                                            "out, or keep large data in the tool's folder")
    return parse_manifest(data, path, tool_dir=path.parent.resolve())


# Versions are text as written: YAML reads an unquoted `1.10` as the number 1.1, `0x1F` as 31,
# `true` and `2026-01-01` as what they look like, and a refusal then quoted what YAML made of them
# (QA 64c: "Input should be a valid string"; QA 64d: "the number 1.1" of a `version: 1.10`).
VERSION_FIELDS = frozenset({"version", "parent_version"})
NOT_TEXT_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "timestamp"))


def _read_yaml(text: str) -> Any:
    """The manifest's YAML document, its top-level version fields kept as written (VERSION_FIELDS)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if (isinstance(key, yaml.ScalarNode) and key.value in VERSION_FIELDS and isinstance(value, yaml.ScalarNode)
                        and value.tag in NOT_TEXT_TAGS):
                    value.tag = "tag:yaml.org,2002:str"
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _read_manifest_file(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Anything else is refused
    before it is read (a ManifestError): a manifest linked to /dev/zero filled the memory worker at
    270 MB/s, and one linked to a FIFO blocked the tools watch in its open until a restart (QA 64a);
    one that grows while it is read stops at the limit."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # follows a link: what would be read
        raise ManifestError(path, "(file)", "is not a regular file (a device, a FIFO or a socket, or a link to one)")
    with open(path, "rb") as f:
        raw = f.read(limit + 1)
        size = max(os.fstat(f.fileno()).st_size, len(raw))
    if len(raw) > limit:
        raise ManifestError(path, "(file)", f"is {size:,} bytes; a manifest is at most {limit:,}: keep large data in "
                                            "the tool's folder")
    return raw


def _expanded_too_large(data: Any) -> str | None:
    """What `data` holds more of than a manifest may, counting each reference again ("100,000
    values", "2,000,000 characters of text"); None when it fits. It stops counting there, so a
    document of exponential size costs no more than the budget."""
    stack, values, chars = [data], 0, 0
    while stack:
        value = stack.pop()
        values += 1
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        if values > MAX_MANIFEST_VALUES:
            return f"{MAX_MANIFEST_VALUES:,} values"
        if chars > MAX_MANIFEST_CHARS:
            return f"{MAX_MANIFEST_CHARS:,} characters of text"
    return None

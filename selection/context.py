"""What a call's context says about the job: SPARC phase, languages, complexity, task type, tests.

Tools may declare where they fit (manifest `sparc:`); the SPARC score (selection/sparc.py) compares
that with these features. Detection is deliberately plain (keywords, file names, extensions,
indentation) so that a person can predict it, and every value the caller states explicitly in the
call's `context` wins over what is detected. `source` records which values were detected and which
were given, so `fittest explain` can show why.

Recognised `context` keys (all optional): `phase`, `language` or `languages`, `complexity` (0..1),
`task_type`, `testing` (none | present | failing | passing), and `files`: a list of paths, or a
mapping of path to content (content makes complexity measurable).

A language has one name wherever it comes from (a file's extension, a code fence, the scenario, the
caller's `context`, a manifest's `languages`): `canonical_language` reads the usual other spellings
(python3, py, node, ts, golang, c++, ...) as the name the extensions give, so that they match; a
string of names separated by commas is a list of them.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator

from selection.manifest import Phase, TaskType

Testing = Literal["none", "present", "failing", "passing"]
PHASES: tuple[str, ...] = get_args(Phase)

# Keywords per phase, strongest signal first; whole words, case-insensitive.
PHASE_KEYWORDS: dict[str, tuple[str, ...]] = {
    "specification": ("specification", "spec", "requirements", "requirement", "user story", "user stories",
                      "acceptance criteria", "scope"),
    "pseudocode": ("pseudocode", "pseudo-code", "algorithm outline", "outline the algorithm", "sketch the logic"),
    "architecture": ("architecture", "architect", "system design", "component diagram", "data model",
                     "interfaces", "module layout", "design the"),
    "refinement": ("refine", "refactor", "optimise", "optimize", "improve", "fix", "debug", "tdd", "iterate",
                   "unit test", "unit tests", "failing test"),
    "completion": ("deploy", "deployment", "release", "ship", "production", "finalise", "finalize", "package",
                   "publish", "ci pipeline"),
}

# Keywords per task type; the type with most hits wins, ties go to the earlier entry.
TASK_KEYWORDS: dict[str, tuple[str, ...]] = {
    "bug_fix": ("bug", "fix", "error", "crash", "crashes", "broken", "exception", "traceback", "regression",
                "fails", "failing"),
    "testing": ("test", "tests", "unit test", "coverage", "pytest", "jest", "assert", "test case"),
    "refactoring": ("refactor", "refactoring", "clean up", "cleanup", "restructure", "simplify", "rename",
                    "extract method", "deduplicate"),
    "documentation": ("document", "documentation", "docs", "readme", "docstring", "docstrings", "comment",
                      "comments", "explain"),
    "deployment": ("deploy", "deployment", "release", "docker", "kubernetes", "helm", "terraform", "ci",
                   "pipeline", "production", "dockerfile", "docker-compose", "jenkinsfile", "procfile", "k8s"),
    "analysis": ("analyse", "analyze", "analysis", "review", "audit", "profile", "measure", "statistics",
                 "count", "summarise", "summarize", "inspect", "compare"),
    "modification": ("change", "modify", "update", "convert", "extend", "adapt", "migrate", "replace",
                     "transform", "translate"),
    "code_generation": ("write", "create", "generate", "implement", "build", "scaffold", "new function",
                        "new class", "boilerplate"),
}

EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".ts": "typescript", ".tsx": "typescript", ".js": "javascript",
    ".jsx": "javascript", ".mjs": "javascript", ".go": "go", ".rs": "rust", ".java": "java", ".kt": "kotlin",
    ".rb": "ruby", ".php": "php", ".cs": "csharp", ".cpp": "cpp", ".cc": "cpp", ".hpp": "cpp", ".c": "c",
    ".h": "c", ".swift": "swift", ".scala": "scala", ".sh": "bash", ".bash": "bash", ".sql": "sql",
    ".r": "r", ".lua": "lua", ".html": "html", ".css": "css",
}
# Other spellings of a language, in fences, contexts and manifests -> the name its extensions give
# (QA: `{"language": "python3"}` scored a python tool 0 on language, worse than saying nothing).
LANGUAGE_ALIASES: dict[str, str] = {
    "py": "python", "py3": "python", "python2": "python", "python3": "python", "cpython": "python",
    "js": "javascript", "node": "javascript", "nodejs": "javascript", "node.js": "javascript",
    "ecmascript": "javascript", "ts": "typescript", "golang": "go", "rs": "rust", "rb": "ruby", "kt": "kotlin",
    "sh": "bash", "shell": "bash", "c++": "cpp", "cxx": "cpp", "cs": "csharp", "c#": "csharp",
}
KNOWN_LANGUAGES: frozenset[str] = frozenset(EXTENSIONS.values()) | frozenset(LANGUAGE_ALIASES.values())
# Languages (and file formats) nothing here detects, which a tool may still declare and a call
# state by name: never a typo of a detected one, though `fsharp` is as close to csharp, `zsh` to
# sh, `scss` to css and `purescript` to typescript as `pyton` is to python (QA integration L1).
UNDETECTED_LANGUAGES: frozenset[str] = frozenset((
    "ada", "assembly", "awk", "clojure", "cmake", "cobol", "coffeescript", "crystal", "cuda", "d", "dart",
    "delphi", "dockerfile", "elixir", "elm", "erlang", "fish", "fortran", "fsharp", "gleam", "graphql",
    "groovy", "hack", "haskell", "haxe", "hcl", "json", "julia", "ksh", "less", "lisp", "make", "markdown",
    "matlab", "mojo", "nim", "nix", "objective-c", "ocaml", "octave", "pascal", "perl", "powershell",
    "prolog", "protobuf", "purescript", "racket", "reason", "rescript", "sass", "scheme", "scss", "sed",
    "solidity", "svelte", "tcl", "terraform", "toml", "vbnet", "verilog", "vhdl", "vue", "wasm", "xml",
    "yaml", "zig", "zsh"))
# A known name with a version after it: "python 3.11", "node18", "c++17", "java-21".
VERSIONED = re.compile(r"(.+?)[\s_-]?v?\d+(?:\.\d+)*")
# Languages recognised when named in the scenario ("... in Rust"); short or common-word names
# (go, c, r) only from files, fences or explicit context.
NAMED_LANGUAGES: tuple[str, ...] = ("python", "typescript", "javascript", "golang", "rust", "java", "kotlin",
                                    "ruby", "php", "csharp", "c#", "c++", "swift", "scala", "bash", "sql")

TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*$|[^/]*_test\.[a-z]+$|[^/]*\.(spec|test)\.[a-z]+$|conftest\.py$)")
DEPLOY_FILE = re.compile(
    r"(^|/)(dockerfile|docker-compose[^/]*\.ya?ml|procfile|\.github/workflows/|\.gitlab-ci\.ya?ml|jenkinsfile|"
    r"k8s/|kubernetes/|helm/|charts/|[^/]*\.tf$|serverless\.ya?ml|fly\.toml|app\.ya?ml|deploy[^/]*\.sh$)",
    re.IGNORECASE,
)
DESIGN_FILE = re.compile(r"(^|/)(architecture|design|adr)[^/]*|\.(puml|plantuml|drawio|mmd)$|openapi[^/]*\.(ya?ml|json)$",
                         re.IGNORECASE)
# (requirements.txt is Python's dependency list, not a specification: review 51)
SPEC_FILE = re.compile(r"(^|/)((spec|specification|user[_-]?stories)[^/]*\.(md|txt|rst)|requirements[^/]*\.(md|rst))$",
                       re.IGNORECASE)
FENCE = re.compile(r"```([A-Za-z0-9_+#-]+)")
# A file's name in a scenario, with its extension: its words are no keywords of what the work is.
FILE_NAME = re.compile(r"[\w./+-]*\w\.[A-Za-z][A-Za-z0-9]{0,4}\b")
# Tests said to fail or pass, with a few words between ("the tests are failing", "fix the failing
# unit tests", "the test suite still fails"; QA 50: only "failing tests" and "tests fail" counted).
_LINKS = "are|is|were|was|still|now|all|the|unit|integration|e2e|suite|keep|keeps|have|has|had|been|our|my"
_BETWEEN = rf"(?: (?:{_LINKS}))*"
FAILING_TESTS = re.compile(rf" (?:failing|broken|red){_BETWEEN} tests? | tests?{_BETWEEN} "
                           r"(?:fail|fails|failed|failing|failures?|broke|broken|red) ")
PASSING_TESTS = re.compile(rf" (?:passing|green){_BETWEEN} tests? | tests?{_BETWEEN} (?:pass|passes|passed|passing|green) "
                           r"| all green ")
# Read before either: "the tests are no longer failing" passes, and "make the failing tests pass"
# fails, where the goal's "pass" came first (review 51).
NO_LONGER_FAILING = re.compile(rf" tests?{_BETWEEN} (?:no longer|not|never) (?:fail|failing|red) ")
# Said of a test file named in the scenario, a few words after it ("test_parser.py keeps failing").
FAILS_AFTER = rf"(?:\W+(?:{_LINKS}))*\W+(?:fail|fails|failed|failing|broken|broke)\b"

# Complexity: log10 of the lines given (10k lines -> 1.0) and nesting depth (8 levels -> 1.0).
LINES_FOR_FULL = 10_000
NESTING_FOR_FULL = 8


class ContextFeatures(BaseModel):
    """The SPARC features of one call; `None`/empty means "unknown" and scores neutral."""

    phase: Phase | None = None
    languages: list[str] = Field(default_factory=list)
    complexity: float = Field(0.0, ge=0.0, le=1.0)
    task_type: TaskType = "general"
    testing: Testing = "none"
    source: dict[str, Literal["explicit", "detected", "default"]] = Field(default_factory=dict)


class ExplicitContext(BaseModel):
    """The values a caller may state in `context`; anything else in `context` is left alone."""

    phase: Phase | None = None
    languages: list[str] | None = None
    complexity: float | None = Field(None, ge=0.0, le=1.0)
    task_type: TaskType | None = None
    testing: Testing | None = None

    @field_validator("languages")
    @classmethod
    def _canonical(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not canonical_languages(v):  # QA AC: a blank one dropped the detected languages unsaid
            raise ValueError("names no language: name one, or leave the key out to have the languages detected")
        return None if v is None else canonical_languages(v)


def canonical_language(name: str) -> str:
    """The name the analyser gives a language however it was spelled; a name it does not know stays
    as written (lower case), so a tool that declares it still matches it."""
    name = " ".join(name.lower().split())
    if name in KNOWN_LANGUAGES:
        return name
    if name in LANGUAGE_ALIASES:
        return LANGUAGE_ALIASES[name]
    versioned = VERSIONED.fullmatch(name)
    base = versioned.group(1) if versioned else ""
    return LANGUAGE_ALIASES.get(base, base) if base in KNOWN_LANGUAGES or base in LANGUAGE_ALIASES else name


def canonical_languages(names: list[str]) -> list[str]:
    """`names` canonical, each entry split at commas (QA: `"python,rust"` was one language)."""
    return sorted({canonical_language(part) for name in names for part in name.split(",") if part.strip()})


def explicit_context(context: Mapping[str, Any]) -> ExplicitContext:
    """The recognised keys of a call's context, validated (a ValidationError names the bad key)."""
    given = {k: context[k] for k in ("phase", "complexity", "task_type", "testing") if k in context}
    languages = context.get("languages", context.get("language"))
    if languages is not None:
        given["languages"] = [languages] if isinstance(languages, str) else languages
    return ExplicitContext.model_validate(given)


# The keys of a call's context that anything reads: the explicit features, the files they are
# detected from, and the environment a description variant is served for (workers/variants.py).
CONTEXT_KEYS = ("phase", "languages", "language", "complexity", "task_type", "testing", "files", "environment")
# How alike an unknown language name must be to a known one to be taken for a typo of it:
# `pyton` is 0.91 like python, `javscript` 0.95 like javascript; `elixir` is like none.
LANGUAGE_TYPO_CUTOFF = 0.8


def context_typos(context: Mapping[str, Any]) -> list[str]:
    """What to tell a caller whose context holds a key nothing reads but one it reads is close to
    (`langauge`, `task-type`), or a language it does not know but one it knows is close to
    (`pyton`): each was dropped without a word, where it meant to say something. A key far from
    every read one is the caller's own, and a language nobody else spells alike may be one a tool
    declares: neither is named. Notes, not refusals."""
    notes = []
    for key in context:
        # Lower-cased first: `TASK_TYPE` was dropped without a word, `Language` was named (QA selection F11)
        if key not in CONTEXT_KEYS and (close := difflib.get_close_matches(key.lower(), CONTEXT_KEYS, n=1)):
            notes.append(f"context key '{key}' is not read by selection: did you mean '{close[0]}'?")
    given = context.get("languages", context.get("language"))
    names = [given] if isinstance(given, str) else given if isinstance(given, list) else []
    for name, meant in language_typos(n for n in names if isinstance(n, str)):
        notes.append(f"context language '{name}' is not one selection knows: did you mean '{meant}'?")
    return notes


def language_typos(names: Iterable[str]) -> list[tuple[str, str]]:
    """Each (name, the known language it likely misspells) among `names` (comma-separated lists
    allowed): a name selection does not know but one it knows is close to. Said to a caller
    (`context_typos`) and to a team whose manifest declares it (`fittest tools`), since a tool
    declaring `pyton` matches no call's language, without a word. A real language nothing detects
    (`fsharp`, `UNDETECTED_LANGUAGES`) is no typo, and a name like none is left alone, as it may be
    a language only the team's tools speak."""
    typos = []
    for name in (part.strip().lower() for n in names for part in n.split(",")):
        if name and canonical_language(name) not in NO_TYPOS and (
                close := difflib.get_close_matches(name, TYPO_TARGETS, n=1, cutoff=LANGUAGE_TYPO_CUTOFF)):
            typos.append((name, close[0]))
    return typos


NO_TYPOS = KNOWN_LANGUAGES | UNDETECTED_LANGUAGES  # language names that are never a typo of another
TYPO_TARGETS = sorted(KNOWN_LANGUAGES | set(LANGUAGE_ALIASES))  # what a typo is taken to mean


def context_json_schema() -> dict[str, Any]:
    """What `fittest schema` publishes of a call's `context`: the keys selection reads, each with
    the values it takes, beside the caller's own keys (QA 59a M2: a payload the schema passed, its
    phase misspelled or its complexity a string, was refused by the workers)."""
    strings = {"type": "array", "items": {"type": "string"}}
    return {
        "properties": {
            **ExplicitContext.model_json_schema()["properties"],
            "language": {"anyOf": [{"type": "string"}, strings], "description": "one of `languages` (give one of the two)"},
            "files": {"anyOf": [strings, {"type": "object", "additionalProperties": {"type": "string"}}],
                      "description": "paths, or paths mapped to their contents"},
            "environment": {"type": "string", "description": "the environment a description variant is served for"},
        },
        "additionalProperties": True,
    }


def check_context(context: Mapping[str, Any]) -> None:
    """Raise ValueError naming every bad recognised key (for CallRequest validation)."""
    errors = []
    if "language" in context and "languages" in context:  # QA U: rust in `language` was dropped for `languages`
        errors.append("context.language and context.languages: give one of them (languages takes a list)")
    try:
        explicit_context(context)
    except ValidationError as exc:
        errors += [_named(err, context) for err in exc.errors(include_url=False)]
    files = context.get("files")
    if files is not None and not _files_readable(files):  # QA 49: `files: 7` was read as no file, unsaid
        errors.append(f"context.files: a list of paths, or paths mapped to their contents (strings), not {_shown(files)}")
    if errors:
        raise ValueError("; ".join(errors))


def _files_readable(files: Any) -> bool:
    if isinstance(files, Mapping):
        return all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    return isinstance(files, (list, tuple)) and all(isinstance(f, str) for f in files)


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _named(err: Any, context: Mapping[str, Any]) -> str:
    """One refused value, under the key the caller wrote: `language` is read as one of `languages`."""
    loc = [str(p) for p in err["loc"]]
    message = err["msg"].removeprefix("Value error, ")
    if loc[0] == "languages":
        loc[0] = "languages" if "languages" in context else "language"
        if len(loc) == 1 and err["type"] != "value_error":  # not a list of names at all
            message = f"a language name or a list of them, not {context[loc[0]]!r}"
    return f"context.{'.'.join(loc)}: {message}"


def _files(context: Mapping[str, Any]) -> dict[str, str]:
    """Paths given in `context["files"]`, with their content when the caller sent it."""
    files = context.get("files")
    if isinstance(files, Mapping):
        return {str(k): v if isinstance(v, str) else "" for k, v in files.items()}
    if isinstance(files, (list, tuple)):
        return {str(f): "" for f in files if isinstance(f, str)}
    return {}  # (a call's are checked: `check_context`)


def named_files(scenario: str) -> list[str]:
    """The files a scenario names ("refactor parser.py", "write a Dockerfile", "fix
    tests/test_csv.py"), read as the paths of `context.files` are (QA 50: only those counted). A
    token is one when it has a source extension as files are written (lower case, after a name of
    two characters or more: not "D.C"), or when it is a deployment, test or specification file's
    path; a bare word only as a deployment file's name (Dockerfile, Jenkinsfile, Procfile)."""
    found = []
    for token in re.findall(r"[\w.+/-]+", scenario):
        # a sentence's full stop is no part of a name, a dotfile's leading dot is (review 51: .gitlab-ci.yml)
        token = token.rstrip("./-+").lstrip("-+").removeprefix("./")
        path = PurePosixPath(token) if token else None
        if path is None or not path.name:
            continue
        if "." not in token and "/" not in token:
            if DEPLOY_FILE.search(token):
                found.append(token)
            continue
        suffix = path.suffix
        source = suffix[1:].islower() and suffix in EXTENSIONS and len(path.stem) >= 2
        if source or any(pattern.search(token) for pattern in (DEPLOY_FILE, TEST_FILE, SPEC_FILE)):
            found.append(token)
    return found


def _words(text: str) -> str:
    """Lower-cased text with single spaces, padded, so whole-word phrases match with ' kw '."""
    return " " + " ".join(re.findall(r"[a-z0-9#+\-]+", text.lower())) + " "


def _hits(words: str, keywords: tuple[str, ...]) -> int:
    return sum(1 for kw in keywords if f" {kw} " in words)


def detect_phase(words: str, paths: list[str]) -> Phase | None:
    """Keywords in the scenario first; then what the files say about how far the work is."""
    best = max(PHASE_KEYWORDS, key=lambda p: _hits(words, PHASE_KEYWORDS[p]))
    if _hits(words, PHASE_KEYWORDS[best]):
        return best  # type: ignore[return-value]
    if any(DEPLOY_FILE.search(p) for p in paths):
        return "completion"
    if any(TEST_FILE.search(p) for p in paths):
        return "refinement"
    if any(PurePosixPath(p).suffix.lower() in EXTENSIONS for p in paths):
        return "refinement"  # code exists: the work is implementing it
    if any(DESIGN_FILE.search(p) for p in paths):
        return "architecture"
    if any(SPEC_FILE.search(p) for p in paths):
        return "specification"
    return None


def detect_languages(scenario: str, words: str, paths: list[str]) -> list[str]:
    found = {EXTENSIONS[s] for p in paths if (s := PurePosixPath(p).suffix.lower()) in EXTENSIONS}
    found.update(canonical_language(fence) for fence in FENCE.findall(scenario))
    found.update(canonical_language(name) for name in NAMED_LANGUAGES if f" {name} " in words)
    return sorted(found)


def detect_task_type(words: str) -> TaskType:
    counts = {t: _hits(words, kws) for t, kws in TASK_KEYWORDS.items()}
    best = max(counts, key=lambda t: counts[t])  # first of the ties: the dict's order
    return best if counts[best] else "general"  # type: ignore[return-value]


def detect_testing(scenario: str, words: str, paths: list[str], named: list[str]) -> Testing:
    """`paths`: every file given or named; `named`: those the scenario names, whose failure it may say."""
    if NO_LONGER_FAILING.search(words):
        return "passing"
    if FAILING_TESTS.search(words):
        return "failing"
    text = scenario.lower()  # a named test file said to fail, before a general "pass" (review 51)
    if any(TEST_FILE.search(n) and re.search(re.escape(n.lower()) + FAILS_AFTER, text) for n in named):
        return "failing"
    if PASSING_TESTS.search(words):
        return "passing"
    return "present" if any(TEST_FILE.search(p) for p in paths) else "none"


def nesting_depth(text: str) -> int:
    """Deepest nesting of a source text: brackets, or indentation steps where there are none."""
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}" and depth:
            depth -= 1
    indents = [len(line) - len(line.lstrip(" \t")) for line in text.splitlines() if line.strip()]
    steps = sorted({i for i in indents if i})
    unit = steps[0] if steps else 0
    by_indent = max(indents) // unit if unit else 0
    return max(deepest, by_indent)


def json_depth(value: Any) -> int:
    if isinstance(value, Mapping):
        return 1 + max((json_depth(v) for v in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max((json_depth(v) for v in value), default=0)
    return 0


def complexity_of(lines: int, depth: int) -> float:
    """0..1 from size (log scale, LINES_FOR_FULL lines = 1) and nesting (NESTING_FOR_FULL = 1), averaged."""
    size = min(1.0, math.log10(1 + max(0, lines)) / math.log10(1 + LINES_FOR_FULL))
    nesting = min(1.0, depth / NESTING_FOR_FULL)
    return round((size + nesting) / 2, 4)


def detect_complexity(files: dict[str, str], input: Mapping[str, Any]) -> float:
    """From the file contents given; without any, from the call's input (its size and nesting)."""
    contents = [c for c in files.values() if c]
    if contents:
        lines = sum(c.count("\n") + 1 for c in contents)
        return complexity_of(lines, max(nesting_depth(c) for c in contents))
    if not input:
        return 0.0
    text = json.dumps(input, default=str)
    return complexity_of(text.count("\n") + len(text) // 80 + 1, json_depth(input))


def analyse(scenario: str, context: Mapping[str, Any] | None = None, input: Mapping[str, Any] | None = None) -> ContextFeatures:
    """The features of one call: explicit `context` values first, detection for the rest."""
    context = context or {}
    explicit = explicit_context(context)
    files = _files(context)
    paths = [p.replace("\\", "/") for p in files]
    named = named_files(scenario)
    # A source file named in the scenario gives its language, but not that code exists ("an app
    # with Node.js"); a deployment, test or specification file named gives the phase as one given does.
    at_phase = paths + [n for n in named if any(pattern.search(n) for pattern in (DEPLOY_FILE, TEST_FILE, SPEC_FILE))]
    paths += named
    words = _words(scenario)
    source: dict[str, Literal["explicit", "detected", "default"]] = {}

    def pick(name: str, given: Any, detect: Any, empty: Any) -> Any:
        if given is not None:
            source[name] = "explicit"
            return given
        value = detect()
        source[name] = "default" if value == empty else "detected"
        return value

    return ContextFeatures(
        # (the phase's keywords not from a file's name: "pin numpy in requirements.txt" is no specification, QA 51d)
        phase=pick("phase", explicit.phase, lambda: detect_phase(_words(FILE_NAME.sub(" ", scenario)), at_phase), None),
        languages=pick("languages", explicit.languages, lambda: detect_languages(scenario, words, paths), []),
        complexity=pick("complexity", explicit.complexity, lambda: detect_complexity(files, input or {}), 0.0),
        task_type=pick("task_type", explicit.task_type, lambda: detect_task_type(words), "general"),
        testing=pick("testing", explicit.testing, lambda: detect_testing(scenario, words, paths, named), "none"),
        source=source,
    )

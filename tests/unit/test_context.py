"""The context analyser: phase, languages, complexity, task type, testing status; explicit wins."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from selection.context import analyse, context_typos
from selection.models import CallRequest


@pytest.mark.parametrize(
    ("scenario", "phase"),
    [
        ("write the requirements and user stories for the billing service", "specification"),
        ("give me pseudocode for the retry loop", "pseudocode"),
        ("propose a system design with a component diagram for ingestion", "architecture"),
        ("refactor the parser and fix the flaky unit tests", "refinement"),
        ("deploy the service to production and publish the release", "completion"),
    ],
)
def test_phase_from_keywords(scenario: str, phase: str) -> None:
    features = analyse(scenario)
    assert features.phase == phase
    assert features.source["phase"] == "detected"


@pytest.mark.parametrize(
    ("files", "phase"),
    [
        (["src/app.py", "tests/test_app.py"], "refinement"),
        (["Dockerfile", "src/app.py"], "completion"),
        ([".github/workflows/ci.yml"], "completion"),
        (["docs/architecture.md"], "architecture"),
        (["SPEC.md"], "specification"),
    ],
)
def test_phase_from_file_patterns(files: list[str], phase: str) -> None:
    assert analyse("look at these", {"files": files}).phase == phase


def test_no_signal_means_unknown_phase() -> None:
    features = analyse("hello there")
    assert features.phase is None
    assert features.source["phase"] == "default"


def test_languages_from_extensions_fences_and_names() -> None:
    assert analyse("check", {"files": ["a.py", "b.ts", "c.go"]}).languages == ["go", "python", "typescript"]
    assert analyse("why does this fail?\n```rust\nfn main() {}\n```").languages == ["rust"]
    assert analyse("port this module to Kotlin").languages == ["kotlin"]
    assert analyse("sort a list").languages == []


@pytest.mark.parametrize(
    ("given", "files"),
    [
        (["python3", "py", "Python2", "python 3.11", "PY"], ["a.py"]),
        (["js", "node", "nodejs", "node18"], ["a.js"]),
        (["ts"], ["a.ts"]),
        (["golang", "go1.22"], ["a.go"]),
        (["c++", "cpp", "C++17", "cxx"], ["a.cpp"]),
        (["c#", "cs"], ["a.cs"]),
    ],
)
def test_a_language_stated_in_another_spelling_is_named_as_its_files_are(given: list[str], files: list[str]) -> None:
    """QA F6: `{"language": "python3"}` stayed "python3", which no manifest's `python` matched."""
    detected = analyse("check", {"files": files}).languages
    for name in given:
        assert analyse("check", {"language": name}).languages == detected, name
        assert analyse("check", {"languages": [name]}).languages == detected, name
    # a fence's alias and a language named in the scenario read the same
    assert analyse(f"why does this fail?\n```{given[0]}\nx\n```").languages == detected


def test_languages_separated_by_commas_are_a_list() -> None:
    """QA F6: `{"languages": "python,rust"}` was analysed as one language, "python,rust"."""
    assert analyse("check", {"languages": "python,rust"}).languages == ["python", "rust"]
    assert analyse("check", {"language": "Py3, golang ,"}).languages == ["go", "python"]
    assert analyse("check", {"languages": ["python, rust", "go"]}).languages == ["go", "python", "rust"]
    assert analyse("check", {"language": "cobol"}).languages == ["cobol"]  # unknown: kept as written


def test_explicit_context_wins_over_detection() -> None:
    features = analyse(
        "deploy the service to production",
        {"phase": "architecture", "language": "Java", "complexity": 0.9, "task_type": "analysis",
         "testing": "failing", "files": ["Dockerfile", "x.py"]},
    )
    assert (features.phase, features.languages, features.complexity, features.task_type, features.testing) == (
        "architecture", ["java"], 0.9, "analysis", "failing")
    assert set(features.source.values()) == {"explicit"}


def test_complexity_grows_with_size_and_nesting() -> None:
    flat = "x = 1\n" * 20
    nested = "def f():\n" + "".join("    " * d + "if x:\n" for d in range(1, 7)) + "    " * 7 + "pass\n"
    big = "x = 1\n" * 5000
    c_flat = analyse("review", {"files": {"a.py": flat}}).complexity
    c_nested = analyse("review", {"files": {"a.py": nested}}).complexity
    c_big = analyse("review", {"files": {"a.py": big}}).complexity
    assert 0.0 < c_flat < c_nested <= 1.0
    assert c_flat < c_big <= 1.0
    # Without files, the input's size and nesting stand in.
    assert analyse("sort", input={"a": {"b": {"c": [1, 2, [3]]}}}).complexity > analyse("sort", input={"a": 1}).complexity
    assert analyse("sort").complexity == 0.0


@pytest.mark.parametrize(
    ("scenario", "task_type"),
    [
        ("fix the crash when the config file is missing", "bug_fix"),
        ("write pytest unit tests with full coverage", "testing"),
        ("refactor and simplify this module", "refactoring"),
        ("add docstrings and a readme", "documentation"),
        ("deploy with docker and kubernetes", "deployment"),
        ("analyse the statistics of these logs", "analysis"),
        ("convert the config from yaml and update the keys", "modification"),
        ("implement a new class that generates invoices", "code_generation"),
        ("hello", "general"),
    ],
)
def test_task_type(scenario: str, task_type: str) -> None:
    assert analyse(scenario).task_type == task_type


def test_testing_status() -> None:
    assert analyse("the failing tests in ci").testing == "failing"
    assert analyse("all tests pass now").testing == "passing"
    assert analyse("look", {"files": ["tests/test_a.py"]}).testing == "present"
    assert analyse("look").testing == "none"
    # QA 50: said with words between, they were not read.
    for said in ("the tests are failing after the upgrade", "fix the failing unit tests in the csv parser",
                 "the test suite still fails", "our integration tests failed"):
        assert analyse(said).testing == "failing", said
    assert analyse("the unit tests passed again").testing == "passing"
    assert analyse("the tests are no longer failing after the upgrade").testing == "passing"  # QA 50c
    assert analyse("test_parser.py keeps failing").testing == "failing"  # said of a test file named
    assert analyse("write tests for failing cases").testing == "none"
    # Review 51: a goal's "pass" after failing tests, a test that keeps failing, and the failure of
    # something else beside a test file.
    for said in ("make the failing tests pass", "fix the failing tests so all tests pass", "the flaky test keeps failing"):
        assert analyse(said).testing == "failing", said
    assert analyse("add tests to tests/test_api.py for the failing login endpoint").testing == "present"
    assert analyse("fix the failing deploy script", {"files": ["tests/test_a.py"]}).testing == "present"
    assert analyse("tests/test_api.py is failing since the merge").testing == "failing"
    # A file's name is no keyword of the phase (QA 51d: Python's dependency list read as a specification),
    # and a deployment script named is a deployment file (review 51).
    assert analyse("update requirements.txt to pin numpy").phase is None
    assert analyse("deploy.sh: design a rollout").phase == "completion"
    # A named test file said to fail, before a general "pass" (review 51).
    assert analyse("the test suite passes but tests/test_a.py fails").testing == "failing"
    assert analyse("write the requirements.md for billing").phase == "specification"


def test_files_named_in_the_scenario_count_as_files_given() -> None:
    """QA 50: "parser.py" gave no python, "a Dockerfile" neither the completion phase nor deployment."""
    assert analyse("refactor parser.py into smaller functions").languages == ["python"]
    docker = analyse("write a Dockerfile for this csv service")
    assert (docker.phase, docker.task_type) == ("completion", "deployment")
    test_file = analyse("look at tests/test_csv.py")
    assert (test_file.phase, test_file.languages, test_file.testing) == ("refinement", ["python"], "present")
    # A source file gives its language, not that code exists; what only looks like a file is none.
    node = analyse("build an app with Node.js")
    assert (node.phase, node.languages) == (None, ["javascript"])
    assert analyse("the weather in Washington D.C. tomorrow, e.g. rain").languages == []
    assert analyse("write an address parser").phase is None
    assert analyse("fill in userstories.md for the csv service").phase == "specification"


def test_bad_explicit_value_is_refused_naming_the_key() -> None:
    with pytest.raises(ValidationError) as info:
        CallRequest(scenario="x", context={"phase": "coding"})
    assert "context.phase" in str(info.value)
    with pytest.raises(ValidationError) as info:
        CallRequest(scenario="x", context={"complexity": 3})
    assert "context.complexity" in str(info.value)


@pytest.mark.parametrize("context", [{"language": "  "}, {"language": ""}, {"languages": []}, {"languages": [" ", ","]}])
def test_a_language_key_that_names_none_is_refused(context: dict) -> None:
    """QA AC: a blank language dropped the languages the scenario says (python here) without a word."""
    with pytest.raises(ValidationError) as info:
        CallRequest(scenario="fix the failing test in parser.py", context=context)
    key = next(iter(context))  # named as the caller wrote it
    assert f"context.{key}: names no language" in str(info.value), str(info.value)
    assert analyse("fix the failing test in parser.py", {"language": None}).source["languages"] != "explicit"
    with pytest.raises(ValidationError) as info:  # QA: only the first bad key was named
        CallRequest(scenario="x", context={"language": 5, "phase": 3, "complexity": 7})
    assert all(f"context.{key}" in str(info.value) for key in ("language", "phase", "complexity")), str(info.value)
    # QA: `language: 5` was refused as "context.languages: Input should be a valid list", a key not written.
    with pytest.raises(ValidationError) as info:
        CallRequest(scenario="x", context={"language": 5})
    assert "context.language: a language name or a list of them, not 5" in str(info.value)
    with pytest.raises(ValidationError) as info:
        CallRequest(scenario="x", context={"languages": ["go", 7]})
    assert "context.languages.1: Input should be a valid string" in str(info.value)
    with pytest.raises(ValidationError) as info:  # QA U: rust was dropped, silently, for go
        CallRequest(scenario="x", context={"language": "rust", "languages": ["go"]})
    assert "context.language and context.languages: give one of them" in str(info.value)
    # Keys the analyser does not know are the caller's business.
    assert CallRequest(scenario="x", context={"ticket": "ABC-1"}).context == {"ticket": "ABC-1"}


def test_exclude_takes_tool_versions_and_names_a_bare_name() -> None:
    """QA: exclude=["slow_square"] excluded nothing (it matches NAME@VERSION only), silently."""
    with pytest.raises(ValidationError, match="exclude takes tool versions as NAME@VERSION; 'slow_square' names no version"):
        CallRequest(scenario="square this number", exclude=["slow_square"])
    assert CallRequest(scenario="square this number", exclude=["slow_square@1.0.0"]).exclude == ["slow_square@1.0.0"]


def test_a_context_key_or_language_close_to_one_selection_reads_is_named_as_a_likely_typo() -> None:
    assert context_typos({"language": "python", "files": ["a.py"], "environment": "prod"}) == []
    # A key far from every read one is the caller's own (QA X: `user_id` was warned of on every call).
    assert context_typos({"user_id": 7, "team": "billing"}) == []
    assert context_typos({"langauge": "python", "task-type": "testing"}) == [
        "context key 'langauge' is not read by selection: did you mean 'language'?",
        "context key 'task-type' is not read by selection: did you mean 'task_type'?"]
    assert context_typos({"TASK_TYPE": "testing", "Language": "go"}) == [  # QA selection F11: upper case dropped, unsaid
        "context key 'TASK_TYPE' is not read by selection: did you mean 'task_type'?",
        "context key 'Language' is not read by selection: did you mean 'language'?"]
    # A language it does not know but one it knows is close to (QA X: `pyton` matched nothing, unsaid);
    # an alias or a version of a known one is known, and a language like none may be one a tool declares.
    assert context_typos({"languages": ["pyton", "python3", "elixir"]}) == [
        "context language 'pyton' is not one selection knows: did you mean 'python'?"]
    assert context_typos({"language": "Javscript,rust"}) == [
        "context language 'javscript' is not one selection knows: did you mean 'javascript'?"]
    # A real language nothing detects is no typo, however close to one detected (QA integration L1).
    assert context_typos({"languages": ["fsharp", "zsh", "scss", "purescript"]}) == []


@pytest.mark.parametrize("files", [7, "a.py", ["a.py", 3], {"a.py": 1}])
def test_files_the_analyser_cannot_read_are_refused_naming_them(files: object) -> None:
    """QA 49: `context.files: 7` was read as no file at all, without a word, where a bad `languages`
    is refused."""
    from pydantic import ValidationError

    from selection.models import CallRequest

    with pytest.raises(ValidationError, match=r"context.files: a list of paths, or paths mapped to their contents"):
        CallRequest(scenario="review this", context={"files": files})
    CallRequest(scenario="review this", context={"files": {"a.py": "x = 1"}})
    CallRequest(scenario="review this", context={"files": ["a.py"]})


# QA 58b: behaviours a single mutation changed while every unit test passed
def test_complexity_is_the_mean_of_size_and_nesting_each_full_at_10k_lines_and_8_levels() -> None:
    """Mutants C4 (mean -> max), C5 (LINES_FOR_FULL 10_000 -> 1_000) and C6 (NESTING_FOR_FULL 8 -> 4)
    survived: the unit test checks only that complexity grows."""
    from selection.context import complexity_of

    assert complexity_of(10_000, 0) == 0.5
    assert complexity_of(0, 8) == 0.5
    assert complexity_of(10_000, 8) == 1.0
    assert complexity_of(0, 4) == 0.25
    assert complexity_of(99, 0) == pytest.approx(0.25, abs=1e-3)  # 100 lines: half way on the log scale

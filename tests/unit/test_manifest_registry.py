"""The registry: loading the example tools, surviving bad manifests, refusing path escapes, indexes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from selection.manifest import ManifestError, ToolManifest
from selection.registry import ToolRegistry
from tests.conftest import EXAMPLE_TOOLS

EXAMPLE_NAMES = {"convert_units", "csv_to_json", "fast_sort", "hash_text", "slugify", "sort_numbers", "word_stats"}


def write_tool(root: Path, folder: str, manifest: dict[str, Any], files: dict[str, str] | None = None) -> Path:
    """A tool folder with its manifest and `files`; a python tool without files gets its module."""
    tool_dir = root / folder
    tool_dir.mkdir(parents=True, exist_ok=True)
    if files is None and manifest.get("implementation", {}).get("entrypoint") == "tool:run":
        files = {"tool.py": "def run(value):\n    return value\n"}
    for name, text in (files or {}).items():
        (tool_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (tool_dir / name).write_text(text)
    path = tool_dir / "tool.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def python_tool(name: str = "echo", version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "description": f"{name} tool",
        "implementation": {"kind": "python", "entrypoint": "tool:run"},
        **extra,
    }


def executable_tool(argv: list[str], name: str = "exe") -> dict[str, Any]:
    return {"name": name, "description": "an executable", "implementation": {"kind": "executable", "argv": argv}}


@pytest.fixture(scope="module")
def examples() -> ToolRegistry:
    return ToolRegistry.load([EXAMPLE_TOOLS])


def test_all_examples_load_without_errors(examples: ToolRegistry) -> None:
    assert examples.errors == []
    assert set(examples.namespaces()) == EXAMPLE_NAMES
    for manifest in examples.all():
        assert manifest.tool_dir is not None and Path(manifest.tool_dir).is_dir()
        assert len(manifest.examples) >= 2 and manifest.test_cases, manifest.key
        assert examples.source(manifest.key) == str(Path(manifest.tool_dir) / "tool.yaml")


def test_examples_cover_every_kind_and_a_shared_capability(examples: ToolRegistry) -> None:
    kinds = {m.implementation.kind for m in examples.all()}
    assert kinds == {"python", "executable", "http"}
    assert [m.name for m in examples.all() if "sorting" in m.tags] == ["fast_sort", "sort_numbers"]


def test_missing_field_names_file_and_field_and_others_still_load(tmp_path: Path) -> None:
    write_tool(tmp_path, "good", python_tool("good"), {"tool.py": "def run(i): return i\n"})
    broken = python_tool("broken")
    del broken["description"]
    bad_path = write_tool(tmp_path, "broken", broken)
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / "tool.yml").write_text("name: [unclosed\n")

    registry = ToolRegistry.load([tmp_path])

    assert [m.key for m in registry.all()] == ["good@1.0.0"]
    assert len(registry.errors) == 2
    by_file = {Path(e.path).parent.name: e for e in registry.errors}
    assert by_file["broken"].path == str(bad_path)
    assert by_file["broken"].field == "description"
    assert str(bad_path) in str(by_file["broken"]) and "description" in str(by_file["broken"])
    assert by_file["garbled"].field == "(yaml)"
    assert "at line 2, column 1 (while parsing a flow sequence that opened at line 1, column 7)" in str(by_file["garbled"])  # where to look


def test_an_unclosed_quote_is_reported_where_it_opened_not_only_at_the_end_of_the_file(tmp_path: Path) -> None:
    """QA M: a description whose quote never closed was reported 'at line 4, column 1' only, the end of the file."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tool.yaml").write_text('name: x\ndescription: "unclosed\nimplementation: {kind: python\n')
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert error.field == "(yaml)"
    assert error.reason == ("found unexpected end of stream at line 4, column 1 "
                            "(while scanning a quoted scalar that opened at line 2, column 14)")


def test_every_bad_field_of_a_manifest_is_named_at_once(tmp_path: Path) -> None:
    """QA: only the first bad field was named, so an author found the next one at the next load."""
    write_tool(tmp_path, "t", python_tool(version="1.0", tags=5, timeout_s="fast"))
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert error.field == "version" and "Value error" not in str(error)
    assert error.reason == ("'1.0' is not a semantic version (MAJOR.MINOR.PATCH); field 'tags': Input should be a valid list; "
                            "field 'timeout_s': Input should be a valid number, unable to parse string as a number")


@pytest.mark.parametrize("written", ["1.0", "1.10", "2", "0x1F", ".inf", "true", "2026-01-01", "1_000"])
def test_an_unquoted_version_is_quoted_as_written(tmp_path: Path, written: str) -> None:
    """QA 64c: an unquoted version YAML reads as a number said "Input should be a valid string";
    QA 64d: `1.10` was quoted as the number 1.1, `0x1F` as 31, `.inf` as inf."""
    write_tool(tmp_path, "t", python_tool())
    manifest = tmp_path / "t" / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1.0.0", f"version: {written}"))
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert (error.field, error.reason) == ("version", f"'{written}' is not a semantic version (MAJOR.MINOR.PATCH)"), error
    manifest.write_text(manifest.read_text().replace(f"version: {written}", "version: null"))  # QA 65a
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert (error.field, error.reason) == ("version", "is empty: a version is MAJOR.MINOR.PATCH, as in version: 1.0.0"), error


def test_missing_directory_is_an_error_not_a_crash(tmp_path: Path) -> None:
    registry = ToolRegistry.load([tmp_path / "nope", EXAMPLE_TOOLS])
    assert len(registry.errors) == 1 and registry.errors[0].field == "(directory)"
    assert set(registry.namespaces()) == EXAMPLE_NAMES


def test_duplicate_version_names_both_files(tmp_path: Path) -> None:
    first = write_tool(tmp_path, "a", python_tool("dup"))
    second = write_tool(tmp_path, "b", python_tool("dup"))
    write_tool(tmp_path, "c", python_tool("dup", "1.1.0", parent_version="1.0.0"))

    registry = ToolRegistry.load([tmp_path])

    assert [m.key for m in registry.all()] == ["dup@1.0.0", "dup@1.1.0"]
    assert registry.source("dup@1.0.0") == str(first)
    (error,) = registry.errors
    assert error.path == str(second) and str(first) in error.reason and "dup@1.0.0" in error.reason
    with pytest.raises(ManifestError, match="already defined"):
        registry.add(registry.get("dup@1.0.0"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["{python}", "{tool_dir}/../outside.py"], "outside the tool directory"),
        (["{python}", "--script={tool_dir}/sub/../../outside.py"], "outside the tool directory"),
        (["{python}", "{tool_dir}/{script}"], "would let a value choose the file"),
        (["{python}", "{tool_dir}/missing.py"], "does not exist"),
        (["{python}", "{tool_dir}/link_out.py"], "outside the tool directory"),
        (["{python}", "{tool_dir}/linked_dir/outside.py"], "outside the tool directory"),
    ],
)
def test_executable_paths_must_stay_in_the_tool_directory(tmp_path: Path, argv: list[str], reason: str) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "outside.py").write_text("print('{}')\n")
    (tmp_path / "tools" / "t").mkdir(parents=True)
    os.symlink(outside / "outside.py", tmp_path / "tools" / "t" / "link_out.py")
    os.symlink(outside, tmp_path / "tools" / "t" / "linked_dir")
    write_tool(tmp_path / "tools", "t", executable_tool(argv))

    registry = ToolRegistry.load([tmp_path / "tools"])

    assert len(registry) == 0
    (error,) = registry.errors
    assert error.field == "implementation.argv.1" and reason in error.reason


def test_a_program_in_the_tool_directory_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    """QA 55b L3: every call failed "Permission denied" until an evolution copied the script
    executable, and the changelog credited the retry mutator."""
    path = write_tool(tmp_path, "t", executable_tool(["{tool_dir}/run.sh", "{tool_dir}/data.txt"]),
                      {"run.sh": "#!/bin/sh\ncat\n", "data.txt": ""})

    refused = ToolRegistry.load([tmp_path])
    (error,) = refused.errors
    assert error.field == "implementation.argv.0" and "is not executable (chmod +x it" in error.reason, error
    (path.parent / "run.sh").chmod(0o755)  # its arguments need not be executable: only the program
    assert ToolRegistry.load([tmp_path]).namespaces() == ["exe"]


def test_paths_inside_the_tool_directory_are_accepted(tmp_path: Path) -> None:
    argv = ["/usr/bin/env", "{python}", "{tool_dir}/run.py", "--lib={tool_dir}/lib", "{tool_dir}/lib/link.py", "{tool_dir}"]
    path = write_tool(tmp_path, "t", executable_tool(argv), {"run.py": "", "lib/helper.py": ""})
    os.symlink(path.parent / "lib" / "helper.py", path.parent / "lib" / "link.py")  # a symlink that stays inside

    registry = ToolRegistry.load([tmp_path])

    assert registry.errors == []
    assert registry.namespaces() == ["exe"]


def test_python_entrypoint_symlinked_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "evil.py").write_text("def run(i): return i\n")
    write_tool(tmp_path / "tools", "t", python_tool(), {})
    os.symlink(tmp_path / "evil.py", tmp_path / "tools" / "t" / "tool.py")

    registry = ToolRegistry.load([tmp_path / "tools"])

    (error,) = registry.errors
    assert error.field == "implementation.entrypoint" and "outside the tool directory" in error.reason


@pytest.mark.parametrize(("code", "reason"), [
    ("def count(value):\n    return value\n\ndef _helper():\n    pass\n", "tool.py defines no 'run' (it defines count)"),
    ("def run(value)\n    return value\n", "tool.py is not valid Python at line 1: expected ':'"),
    ("table = {}\ntable['run'] = print\n", "tool.py defines no 'run' (it defines table)"),  # a key, not a name
])
def test_a_python_entrypoint_its_module_cannot_hold_is_refused_at_load(tmp_path: Path, code: str, reason: str) -> None:
    """QA: a manifest naming a function its module lacks was served, and every call of it crashed."""
    write_tool(tmp_path, "t", python_tool(), {"tool.py": code})
    write_tool(tmp_path, "ok", python_tool("fine"), {"tool.py": "def run(value):\n    return value\n"})

    registry = ToolRegistry.load([tmp_path])

    (error,) = registry.errors
    assert error.field == "implementation.entrypoint" and error.reason == reason
    assert registry.namespaces() == ["fine"]


@pytest.mark.parametrize("code", [
    "try:\n    from fast import run\nexcept ImportError:\n    def run(value):\n        return value\n",
    "import json as run\n",
    "def _impl(value):\n    return value\n\nrun = _impl\n",
    "if True:\n    with open(__file__) as run:\n        pass\n",
    "from helpers import *\n",  # reading cannot tell what these bind: the call will
    "def __getattr__(name):\n    return print\n",
    "globals()['run'] = print\n",
    "vars()['run'] = print\n",
    "import sys\nsetattr(sys.modules[__name__], 'run', print)\n",
    "def setup():\n    global run\n    run = print\n",
    "import sys\nmatch sys.version_info[0]:\n    case 3:\n        def run(value):\n            return value\n",  # QA
    "first, *run = [1, 2]\n",
])
def test_a_module_that_may_bind_the_entrypoint_is_accepted(tmp_path: Path, code: str) -> None:
    write_tool(tmp_path, "t", python_tool(), {"tool.py": code})
    assert ToolRegistry.load([tmp_path]).errors == []


def test_an_entrypoint_module_neither_in_the_folder_nor_importable_is_refused_at_load(tmp_path: Path) -> None:
    """QA integration M3: `uppercase:run` beside upper.py passed `fittest tools --refused`, and each
    call failed as an outage (unavailable), which evolution then tried to retry."""
    write_tool(tmp_path, "t", python_tool("upper_text", implementation={"kind": "python", "entrypoint": "uppercase:run"}),
               {"upper.py": "def run(value):\n    return value\n"})
    write_tool(tmp_path, "lib", python_tool("dumps", implementation={"kind": "python", "entrypoint": "yaml:safe_dump"}))
    # QA 57c L1: Python's own modules and fittest's are no tool's, whatever their function does.
    for folder, entrypoint in (("std", "subprocess:check_output"), ("own", "workers.sandbox:main")):
        write_tool(tmp_path, folder, python_tool(f"{folder}_tool", implementation={"kind": "python", "entrypoint": entrypoint}))
    write_tool(tmp_path, "pkg", python_tool("packaged", implementation={"kind": "python", "entrypoint": "helpers.text:run"}),
               {"helpers/__init__.py": "", "helpers/text.py": "def run(value):\n    return value\n"})

    # QA recheck M-A: a module of the folder runs only as its file, so a package's name, or a typo
    # after the first dot, is refused too.
    write_tool(tmp_path, "pk", python_tool("shout_pkg", implementation={"kind": "python", "entrypoint": "shoutpkg:run"}),
               {"shoutpkg/__init__.py": "def run(value):\n    return value\n"})
    write_tool(tmp_path, "dt", python_tool("shout_typo", implementation={"kind": "python", "entrypoint": "lib.shuot:run"}),
               {"lib/__init__.py": "", "lib/shout.py": "def run(value):\n    return value\n"})

    registry = ToolRegistry.load([tmp_path])

    reasons = {Path(e.path).parent.name: e.reason for e in registry.errors if e.field == "implementation.entrypoint"}
    assert reasons == {
        "t": "module 'uppercase' is neither uppercase.py in the tool's folder nor a module Python can import (did you mean upper:run?)",
        "pk": "module 'shoutpkg' is neither shoutpkg.py in the tool's folder nor a module Python can import "
              "(did you mean shoutpkg.__init__:run?)",
        "dt": "module 'lib.shuot' is neither lib/shuot.py in the tool's folder nor a module Python can import "
              "(did you mean lib.shout:run?)",
        "std": "module 'subprocess' is of Python's standard library, not a tool: name a function of the tool's folder "
               "or of a package installed for it",
        "own": "module 'workers.sandbox' is fittest's own code, not a tool: name a function of the tool's folder or of "
               "a package installed for it",
    }
    assert registry.namespaces() == ["dumps", "packaged"]  # an importable module, a module file of the folder


@pytest.mark.parametrize("evolved_file", ["../other/echo_v1_1_0.py", "/etc/passwd"])
def test_evolved_file_outside_is_refused(tmp_path: Path, evolved_file: str) -> None:
    write_tool(tmp_path, "t", python_tool(evolved_file=evolved_file))
    registry = ToolRegistry.load([tmp_path])
    (error,) = registry.errors
    assert error.field == "evolved_file"


def test_add_checks_paths_of_manifests_built_in_memory(tmp_path: Path) -> None:
    registry = ToolRegistry()
    manifest = ToolManifest.model_validate(
        {**executable_tool(["{python}", "{tool_dir}/../x.py"]), "tool_dir": str(tmp_path)}
    )
    with pytest.raises(ManifestError, match="outside the tool directory"):
        registry.add(manifest)
    assert len(registry) == 0


def test_versions_sort_by_semver_and_original_is_lowest_without_parent(tmp_path: Path) -> None:
    registry = ToolRegistry()
    for version, parent in [("1.10.0", "1.9.0"), ("1.2.0", "1.0.0"), ("1.9.0", "1.2.0"), ("2.0.0", None), ("1.0.0", None)]:
        registry.add(ToolManifest.model_validate(python_tool("t", version, parent_version=parent)))
    registry.add(ToolManifest.model_validate(python_tool("only_evolved", "1.1.0", parent_version="1.0.0")))

    assert [m.version for m in registry.versions("t")] == ["1.0.0", "1.2.0", "1.9.0", "1.10.0", "2.0.0"]
    assert registry.original("t").version == "1.0.0"  # type: ignore[union-attr]
    assert registry.original("only_evolved") is None
    assert registry.original("unknown") is None and registry.versions("unknown") == []
    assert registry.get("t@1.10.0") is not None and registry.get("t@3.0.0") is None
    assert "t@1.9.0" in registry and len(registry) == 6
    assert registry.namespaces() == ["only_evolved", "t"]



def test_a_test_case_cannot_expect_an_error_and_an_output() -> None:
    from pydantic import ValidationError

    from selection.manifest import TestCase

    with pytest.raises(ValidationError, match="expect_error: true has no output to check"):
        TestCase(input={}, expect={"a": 1}, expect_error=True)
    with pytest.raises(ValidationError, match="expect_error: true has no output to check"):
        TestCase(input={}, expect_keys=["a"], expect_error=True)
    assert TestCase(input={}).check(True, {"any": "output"}) is None  # no expectation: it must succeed


def test_an_argv_template_no_input_can_fill_is_refused_with_the_file_and_the_field(tmp_path: Path) -> None:
    write_tool(tmp_path, "t", executable_tool(["{python}", "{tool_dir"]))
    write_tool(tmp_path, "u", executable_tool(["{python}", "{mode!r}"]))
    registry = ToolRegistry.load([tmp_path])
    assert len(registry) == 0
    reasons = {Path(e.path).parent.name: (e.field, e.reason) for e in registry.errors}
    assert reasons["t"][0].endswith("argv") and "bad argv template '{tool_dir'" in reasons["t"][1]
    assert reasons["u"][0].endswith("argv") and "placeholder {mode} in '{mode!r}': only plain {name} is allowed" in reasons["u"][1]


def test_a_manifest_that_is_not_utf8_or_nested_too_deeply_is_refused_alone(tmp_path: Path) -> None:
    """QA M: a manifest saved in Latin-1 (or YAML nested thousands deep) raised UnicodeDecodeError
    (RecursionError) out of the registry's load, so no tool loaded: the memory worker's watch
    stopped serving new tools, and every executor that loaded the registry failed each call."""
    write_tool(tmp_path, "good", python_tool("good"), {"tool.py": "def run(i): return i\n"})
    (tmp_path / "latin1").mkdir()
    (tmp_path / "latin1" / "tool.yaml").write_bytes(
        b'name: latin\ndescription: "R\xe9sum\xe9 formatter"\nimplementation: {kind: python, entrypoint: m:run}\n')
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "tool.yaml").write_text("name: deep\nexamples: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "date").mkdir()  # PyYAML raises ValueError, not YAMLError, for a date that is no date
    (tmp_path / "date" / "tool.yaml").write_text("name: date\nreleased: 2026-13-45\n")

    registry = ToolRegistry.load([tmp_path])

    assert [m.key for m in registry.all()] == ["good@1.0.0"]
    by_file = {Path(e.path).parent.name: e for e in registry.errors}
    assert by_file["latin1"].field == "(file)"
    assert "not UTF-8 text: byte 0xe9 at line 2" in by_file["latin1"].reason
    assert by_file["deep"].field == "(yaml)" and "nested too deeply" in by_file["deep"].reason
    assert by_file["date"].field == "(yaml)" and "ValueError: month must be in 1..12" in by_file["date"].reason


def test_a_symlink_loop_in_a_tool_folder_refuses_that_manifest_alone(tmp_path: Path) -> None:
    """QA M: resolving a file that is a symbolic link to itself raised RuntimeError out of the load."""
    write_tool(tmp_path, "good", python_tool("good"), {"tool.py": "def run(i): return i\n"})
    write_tool(tmp_path, "loop", python_tool("loop"), {})
    (tmp_path / "loop" / "tool.py").symlink_to("tool.py")
    write_tool(tmp_path, "loop2", executable_tool(["{tool_dir}/run.sh"], name="loop2"))
    (tmp_path / "loop2" / "run.sh").symlink_to("run.sh")

    registry = ToolRegistry.load([tmp_path])

    assert [m.key for m in registry.all()] == ["good@1.0.0"]
    by_file = {Path(e.path).parent.name: e for e in registry.errors}
    assert set(by_file) == {"loop", "loop2"}
    assert all(e.field == "implementation" and "Symlink loop" in e.reason for e in by_file.values())


@pytest.mark.parametrize(
    ("implementation", "reason"),
    [
        ({"url": "http://[::1:8819/echo"}, "is not a valid URL: Invalid IPv6 URL"),
        ({"url": "http://127.0.0.1:99999/x"}, "is not a valid URL: Port out of range"),
        ({"url": "http://"}, "names no host"),
        ({"url": "http://exa mple.com/"}, "white space"),
        ({"url": "http://127.0.0.1:1/x", "headers": {"X-Team": "Équipe Zürich"}}, "header X-Team: value 'Équipe Zürich' must be ASCII"),
        ({"url": "http://127.0.0.1:1/x", "headers": {"X-A": "a\nb"}}, "must be ASCII text on one line"),
        ({"url": "http://127.0.0.1:1/x", "headers": {"Bad Header": "x"}}, "header name 'Bad Header' is not an HTTP token"),
    ],
)
def test_an_http_url_or_header_no_request_can_carry_is_refused_at_load(tmp_path: Path, implementation: dict[str, Any],
                                                                       reason: str) -> None:
    """QA M: these loaded, then raised out of every attempt (InvalidURL, UnicodeEncodeError)."""
    write_tool(tmp_path, "h", {"name": "h", "description": "h", "implementation": {"kind": "http", **implementation}})
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert error.field.startswith("implementation.http.") and reason in error.reason, error


def test_usual_http_urls_and_headers_load(tmp_path: Path) -> None:
    for i, url in enumerate(["http://127.0.0.1:8765/convert", "https://[::1]:8443/a?b=c", "https://api.example.com/v1/x"]):
        write_tool(tmp_path, f"h{i}", {"name": f"h{i}", "description": "h", "implementation": {
            "kind": "http", "url": url, "headers": {"Authorization": "Bearer abc.def-1", "X-Api-Key": "k"}}})
    registry = ToolRegistry.load([tmp_path])
    assert registry.errors == [] and len(registry) == 3


def test_a_manifest_that_is_a_broken_or_looping_symlink_is_refused_by_name(tmp_path: Path) -> None:
    """QA N: such a tool.yaml was skipped without a word, in the log and in `fittest tools`."""
    write_tool(tmp_path, "good", python_tool("good"), {"tool.py": "def run(i): return i\n"})
    (tmp_path / "dangling").mkdir()
    (tmp_path / "dangling" / "tool.yaml").symlink_to("/nonexistent/tool.yaml")
    (tmp_path / "selfloop").mkdir()
    (tmp_path / "selfloop" / "tool.yaml").symlink_to("tool.yaml")

    registry = ToolRegistry.load([tmp_path])

    assert [m.key for m in registry.all()] == ["good@1.0.0"]
    reasons = {Path(e.path).parent.name: (e.field, e.reason) for e in registry.errors}
    assert reasons == {"dangling": ("(file)", "No such file or directory"),
                       "selfloop": ("(file)", "Too many levels of symbolic links")}


def test_a_tool_folder_linked_into_the_tools_directory_is_served_and_a_link_back_up_is_no_loop(tmp_path: Path) -> None:
    """QA 55b L1: a team deploys a tool's folder as a symbolic link; it was left out without a word
    (Python 3.11's rglob does not follow links to folders)."""
    write_tool(tmp_path / "releases", "v7", python_tool("linked"))
    write_tool(tmp_path / "tools", "plain", python_tool("plain"))
    os.symlink(tmp_path / "releases" / "v7", tmp_path / "tools" / "linked")
    os.symlink(tmp_path / "tools", tmp_path / "tools" / "plain" / "up")  # a loop, read once

    registry = ToolRegistry.load([tmp_path / "tools"])

    assert registry.errors == []
    assert sorted(registry.namespaces()) == ["linked", "plain"]
    assert registry.source("linked@1.0.0") == str(tmp_path / "tools" / "linked" / "tool.yaml")
    assert registry.get("linked@1.0.0") is not None


def test_the_http_settings_of_an_evolved_version_are_its_chains_http_manifests_as_the_registry_reads_it() -> None:
    """QA 55b M2: what an evolved version of an http tool calls its parent with (`http_root`)."""
    from selection.manifest import HttpImplementation, ToolManifest

    http = {"kind": "http", "url": "http://127.0.0.1:9/a", "headers": {"Authorization": "Bearer t"}}
    wrapper = {"kind": "python", "entrypoint": "w:run"}
    registry = ToolRegistry()
    original = ToolManifest(name="gate", description="d", implementation=http)
    registry.add(original)
    v11 = ToolManifest(name="gate", version="1.1.0", description="d", implementation=wrapper, parent_version="1.0.0")
    v12 = ToolManifest(name="gate", version="1.2.0", description="d", implementation=wrapper, parent_version="1.1.0")
    registry.add(v11)
    assert registry.http_root(v12) == registry.http_root(v11) == HttpImplementation(**http)
    assert registry.http_root(original) is None  # not evolved: it runs its own settings
    orphan = ToolManifest(name="gate", version="2.1.0", description="d", implementation=wrapper, parent_version="2.0.0")
    assert registry.http_root(orphan) is None  # a chain this registry cannot follow
    python = ToolManifest(name="py", description="d", implementation={"kind": "python", "entrypoint": "t:run"})
    registry.add(python)
    child = ToolManifest(name="py", version="1.1.0", description="d", implementation=wrapper, parent_version="1.0.0")
    assert registry.http_root(child) is None  # a chain that starts at a python tool


def test_a_manifest_refused_for_a_field_is_refused_for_its_missing_program_too(tmp_path: Path) -> None:
    """QA 55b L9: `fittest tools --refused` named the schema error alone; once it was mended, the
    manifest was refused again for the program it names, which is not there."""
    manifest = {**executable_tool(["{tool_dir}/run.sh"]), "timeout_s": -1}
    write_tool(tmp_path, "t", manifest)

    (error,) = ToolRegistry.load([tmp_path]).errors
    assert error.fields == ["timeout_s", "implementation.argv.0"], error
    assert "greater than 0" in error.reason and "run.sh does not exist" in error.reason, error
    # An implementation at fault itself is named once, with no guess at its files.
    write_tool(tmp_path, "t", {**manifest, "implementation": {"kind": "executable", "argv": []}})
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert error.fields == ["implementation.executable.argv", "timeout_s"] and "does not exist" not in error.reason, error


def test_a_manifest_whose_aliases_expand_to_millions_of_values_is_refused_at_once(tmp_path: Path) -> None:
    """QA 57c H5: 500 bytes of aliases of aliases in `test_cases` loaded, and every plan that ranked
    the tool wrote its ten million values out."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
               f"*a{i - 1}, *a{i - 1}]" for i in range(1, 7)]
    folder = tmp_path / "bomb"
    folder.mkdir()
    (folder / "tool.yaml").write_text("\n".join([
        "name: bomb", "description: adds two numbers", "implementation: {kind: http, url: 'http://127.0.0.1:9/x'}",
        "test_cases:", "  - input:", *(f"      {line}" for line in levels)]) + "\n")
    started = time.monotonic()
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert time.monotonic() - started < 5
    assert error.field == "(yaml)" and "more than 100,000 values once its aliases are expanded" in error.reason, error
    # Aliases that stay small are a manifest's own business.
    (folder / "tool.yaml").write_text("\n".join([
        "name: bomb", "description: adds two numbers", "implementation: {kind: http, url: 'http://127.0.0.1:9/x'}",
        "test_cases:", "  - input: &two {a: 1, b: 1}", "    expect: 2", "  - input: *two", "    expect_keys: []"]) + "\n")
    assert ToolRegistry.load([tmp_path]).namespaces() == ["bomb"]
    # Nor is one long text aliased a few hundred times (QA 57d M2: 80 MB in 408 KB).
    text = "x" * 400_000
    (folder / "tool.yaml").write_text("\n".join([
        "name: bomb", "description: adds two numbers", "implementation: {kind: http, url: 'http://127.0.0.1:9/x'}",
        "test_cases:", f"  - input: {{text: &t {text}, again: [{', '.join(['*t'] * 200)}]}}"]) + "\n")
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert "more than 2,000,000 characters of text once its aliases are expanded" in error.reason, error
    # Nor is a file past a megabyte, aliases or not.
    (folder / "tool.yaml").write_text("name: bomb\ndescription: adds two numbers\nimplementation: {kind: http, url: "
                                      "'http://127.0.0.1:9/x'}\nexamples: [" + ", ".join(["add these two numbers"] * 50_000) + "]\n")
    (error,) = ToolRegistry.load([tmp_path]).errors
    assert error.field == "(file)" and "a manifest is at most 1,000,000" in error.reason, error
    assert error.reason.startswith(f"is {(folder / 'tool.yaml').stat().st_size:,} bytes"), error


def test_a_manifest_that_is_no_regular_file_is_refused_unread(tmp_path: Path) -> None:
    """QA 64a: a manifest linked to /dev/zero filled the memory worker at 270 MB/s; one linked to a
    FIFO blocked the tools watch in its open, and no change was served until a restart."""
    zero, fifo = tmp_path / "zero", tmp_path / "fifo"
    zero.mkdir()
    fifo.mkdir()
    (zero / "tool.yaml").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "pipe")
    (fifo / "tool.yaml").symlink_to(tmp_path / "pipe")
    (tmp_path / "plain").mkdir()
    os.mkfifo(tmp_path / "plain" / "tool.yaml")  # QA 64d: skipped, unsaid
    errors = ToolRegistry.load([tmp_path]).errors
    assert sorted((Path(e.path).parent.name, e.field) for e in errors) == [
        ("fifo", "(file)"), ("plain", "(file)"), ("zero", "(file)")], errors
    assert all("is not a regular file" in e.reason for e in errors), errors


def test_a_python_function_that_cannot_take_the_input_is_refused_at_load(tmp_path: Path) -> None:
    """QA 64c: `def run(text, sep)` was served, and each call failed as a refusal of its input, "the
    caller's mistake", at the runner's own line. The function is called with one argument, the input."""
    write_tool(tmp_path, "two", python_tool(name="two"), files={"tool.py": "def run(text, sep):\n    return text\n"})
    write_tool(tmp_path, "fine", python_tool(name="fine"), files={"tool.py": "def run(payload, *, strict=False):\n    return payload\n"})
    write_tool(tmp_path, "wrapped", python_tool(name="wrapped"),
               files={"tool.py": "import functools\ndef run(a, b):\n    return a\nrun = functools.partial(run, b=1)\n"})
    registry = ToolRegistry.load([tmp_path])
    (error,) = registry.errors
    assert error.field == "implementation.entrypoint" and error.reason.startswith(
        "run(text, sep) cannot take what it is called with: one argument, the call's input (a dict)"), error
    assert sorted(registry.namespaces()) == ["fine", "wrapped"]  # what reading cannot tell is let through


@pytest.mark.parametrize(("typed", "hint"), [
    ("csv_lenent", "did you mean csv_lenient?"),
    ("CSV_LENIENT", "did you mean csv_lenient?"),  # QA 64d: a name in capitals got no hint
    ("csv_lenent@1.0.0", "did you mean csv_lenient@1.0.0?"),  # nor NAME@VERSION
    ("csv_lenient", ""),
    ("shout", ""),
])
def test_a_name_close_to_a_tools_gets_a_hint(typed: str, hint: str) -> None:
    registry = ToolRegistry()
    registry.add(ToolManifest.model_validate({**python_tool("csv_lenient"), "implementation": {"kind": "http", "url": "http://x/run"}}))
    assert registry.did_you_mean(typed) == hint

"""`fittest test`: a tool author runs a manifest's test cases by hand, in the sandbox an evolution's
tests stage uses (QA 64c-7: a wrong `expect` showed only as every evolution's candidates failing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import as_published

FITTEST = Path(sys.executable).parent / "fittest"


def tool(root: Path, version: str, cases: list[dict], body: str = "return {'upper': data['text'].upper()}") -> None:
    folder = root / f"shout-{version}"
    folder.mkdir(parents=True)
    (folder / "tool.py").write_text(f"import time\n\ndef run(data):\n    if data.get('hang'):\n        time.sleep(30)\n    {body}\n")
    (folder / "tool.yaml").write_text(yaml.safe_dump({
        "name": "shout", "version": version, "description": "Upper-cases a text.", "timeout_s": 1.0,
        "implementation": {"kind": "python", "entrypoint": "tool:run"}, "test_cases": cases}))


def fittest_test(tools: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FITTEST), "test", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FITTEST_TOOLS_DIR": str(tools), "COLUMNS": "200"})


def test_each_case_is_run_and_a_wrong_expect_fails_the_command_naming_what_came(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tool(tools, "1.0.0", [{"input": {"text": "hi"}, "expect": {"upper": "HI"}},
                          {"input": {"text": "hi"}, "expect": {"upper": "hi"}},  # the author's mistake
                          {"input": {"text": 5}, "expect_error": True},
                          {"input": {"text": "x", "hang": True}, "expect_keys": ["upper"]}])
    tool(tools, "1.1.0", [{"input": {"text": "ok"}, "expect": {"upper": "OK"}}])
    tool(tools, "0.9.0", [])

    done = fittest_test(tools, "shout@1.0.0", "--json")
    assert done.returncode == 1, done.stderr
    (run,) = as_published(json.loads(done.stdout), "test_output")
    assert run["tool"] == "shout@1.0.0" and run["passed"] is False and run["died"] is None
    assert [c["passed"] for c in run["cases"]] == [True, False, True, False]
    assert run["cases"][1]["why"] == 'expected {"upper": "hi"}, got {"upper": "HI"}'
    assert run["cases"][3]["error"].startswith("timeout"), run["cases"][3]
    assert run["cases"][2]["error"].startswith("crash: AttributeError"), run["cases"][2]  # the error that passed, named

    shown = fittest_test(tools, "shout")  # each version: the one without cases is said to have none
    assert shown.returncode == 1
    said = " ".join(shown.stdout.split())
    assert "shout@0.9.0: no test cases" in said and "shout@1.0.0: 2 of 4 passed" in said and "shout@1.1.0: 1 of 1 passed" in said, said

    passing = fittest_test(tools, "shout@1.1.0", "--json")
    assert passing.returncode == 0 and json.loads(passing.stdout)[0]["passed"] is True


def test_a_tool_or_version_not_there_or_without_cases_is_refused_by_name(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tool(tools, "1.0.0", [])
    for args, said in [(["shot"], "no tool named 'shot' (did you mean shout?)"),
                       (["shout@2.0.0"], "shout has no version 2.0.0 (it has 1.0.0)"),
                       (["shout"], "shout has no test cases")]:
        done = fittest_test(tools, *args)
        assert done.returncode == 2 and said in " ".join(done.stderr.split()), (args, done.stderr)


def test_a_case_that_kills_its_process_is_named_and_the_others_are_shown(tmp_path: Path) -> None:
    """QA 65a: one case's `os._exit` left "0 of 0 passed" and an empty table."""
    tools = tmp_path / "tools"
    tool(tools, "1.0.0", [{"input": {"text": "a"}, "expect": {"upper": "A"}}, {"input": {"text": "die"}, "expect": {"upper": "DIE"}},
                          {"input": {"text": "b"}, "expect": {"upper": "B"}}],
         body="if data['text'] == 'die':\n        import os; os._exit(0)\n    return {'upper': data['text'].upper()}")
    done = fittest_test(tools, "shout", "--json")
    assert done.returncode == 1, done.stderr
    (run,) = as_published(json.loads(done.stdout), "test_output")
    assert [c["passed"] for c in run["cases"]] == [True, False, True], run
    assert run["cases"][1]["why"].startswith("its run killed the process it ran in"), run["cases"][1]
    assert "each case then ran alone" in run["died"]

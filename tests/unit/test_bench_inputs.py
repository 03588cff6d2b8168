"""The selection and supervised benches read a tools JSON and a queries CSV that someone else wrote:
what they accept, and the error that names the file, row and problem when they cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workers.bench.selection import BenchInputError, load_queries, load_tools
from workers.cli import app

TOOLS = {"ResearchHelper": "Finds academic papers.", "PDF&URLTool": "Reads PDF files and web pages."}


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_text(text, encoding=encoding)
    return path


def test_tools_become_snake_case_namespaces_named_back_in_lower_case(tmp_path: Path) -> None:
    manifests, names = load_tools(write(tmp_path / "tools.json", json.dumps(TOOLS)))
    assert [m.name for m in manifests] == ["research_helper", "pdf_url_tool"]
    assert names == {"research_helper": "researchhelper", "pdf_url_tool": "pdf&urltool"}


def test_tools_named_in_other_scripts_are_namespaces_of_their_own(tmp_path: Path) -> None:
    """QA 51b L5: 天气Tool and 股票Tool were both `tool`, and the file was refused."""
    tools = {"天气Tool": "Tells the weather.", "股票Tool": "Quotes stock prices.", "CaféFinder": "Finds cafés."}
    manifests, names = load_tools(write(tmp_path / "tools.json", json.dumps(tools, ensure_ascii=False)))
    assert len({m.name for m in manifests}) == 3 and manifests[2].name == "cafe_finder"
    assert all(m.name.startswith("tool_") for m in manifests[:2])
    assert sorted(names.values()) == sorted(name.lower() for name in tools)
    path = write(tmp_path / "q.csv", "Query,Tool\n明天天气怎么样,天气tool\n")
    assert load_queries(path, set(names.values())) == [("明天天气怎么样", "天气tool")]


def test_queries_match_tool_names_whatever_their_case_and_a_byte_order_mark_is_no_column_name(tmp_path: Path) -> None:
    """Spreadsheet programs start a UTF-8 CSV with a byte-order mark; MetaTool's file has CRLF lines."""
    path = write(tmp_path / "q.csv", "Query,Tool\r\nFind papers on bees,researchhelper\r\n\"Read this PDF, please\",PDF&URLTool\r\n",
                 encoding="utf-8-sig")
    assert load_queries(path, {"researchhelper", "pdf&urltool"}) == [
        ("Find papers on bees", "researchhelper"), ("Read this PDF, please", "pdf&urltool")]
    _, names = load_tools(write(tmp_path / "tools.json", json.dumps(TOOLS), encoding="utf-8-sig"))
    assert set(names.values()) == {"researchhelper", "pdf&urltool"}


@pytest.mark.parametrize("header", ["query,tool", " Query , Tool ", "QUERY,TOOL", "Tool,Query", "id,Tool,split,Query"])
def test_the_columns_are_found_whatever_their_case_spaces_and_order(tmp_path: Path, header: str) -> None:
    """QA J: a held-out file written by another program than MetaTool's (`query,tool`) was refused."""
    by_name = {"query": "\"Find papers, on bees\"", "tool": "ResearchHelper", "id": "7", "split": "test"}
    line = ",".join(by_name[c.strip().lower()] for c in header.split(","))
    path = write(tmp_path / "q.csv", f"{header}\r\n{line}\r\n\r\n{line}\r\n")
    assert load_queries(path, {"researchhelper"}) == [("Find papers, on bees", "researchhelper")] * 2


@pytest.mark.parametrize(("text", "message"), [
    ("Question,Answer\nhi,ResearchHelper\n", "expected the columns Query,Tool"),
    ("Query,Tool\nFind papers,ResearchHelper\n,ResearchHelper\n", "line 3: empty Query or Tool"),
    ("Query,Tool\nFind papers,WeatherTool\n", "line 2: tool 'WeatherTool' is not in the tools file"),
    ("Query,Tool\n", "no queries"),
    ("Query,Tool,query\nFind papers,ResearchHelper,\n", "expected the columns Query,Tool \\(once each\\)"),
    ("Query,Tool\nFind papers\n", "line 2: empty Query or Tool"),
    ('Query,Tool\n"unterminated,foo\nFind papers,ResearchHelper\n', "lines 2-3: a quoted field is not closed"),
    # QA 51b: the line an editor shows, past a query that spans lines; a quote left open that took
    # in another row's comma
    ('Query,Tool\n"find\npapers",ResearchHelper\nbook,NoSuchTool\n', "line 4: tool 'NoSuchTool'"),
    ('Query,Tool\n"unclosed query,ResearchHelper\n"next query, at time",ResearchHelper\n',
     "tool .* is not in the tools file; a quoted field of it spans lines: is a quote not closed\\?"),
])
def test_a_bad_queries_file_is_refused_naming_the_row_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "q.csv", text)
    with pytest.raises(BenchInputError, match=message) as caught:
        load_queries(path, {"researchhelper"})
    assert str(path) in str(caught.value)


def test_an_empty_queries_file_is_named_as_such(tmp_path: Path) -> None:
    """QA AC: it said "found None"."""
    with pytest.raises(BenchInputError, match="found nothing: the file is empty"):
        load_queries(write(tmp_path / "q.csv", ""), {"researchhelper"})


def test_a_queries_file_that_is_not_utf8_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_bytes(b"Query,Tool\n\xff\xfe caf\xe9,ResearchHelper\n")
    with pytest.raises(BenchInputError, match="cannot read the queries CSV"):
        load_queries(path, {"researchhelper"})


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]", "expected a non-empty JSON object"),
    ("{}", "expected a non-empty JSON object"),
    ('{"ResearchHelper": ""}', "tool 'ResearchHelper' has no description"),
    ('{"ResearchHelper": 1}', "tool 'ResearchHelper': its description must be a string, not 1"),  # QA AC
    ('{"ResearchHelper": "a", "  ": "b"}', "a tool has a blank name"),  # QA AC: no query could name it
    ('{"ResearchHelper": "a", "Research_Helper": "b"}',  # each as the file spells it (QA 59c L3)
     "tools 'ResearchHelper' and 'Research_Helper' map to the same namespace 'research_helper'"),
    ('{"A": "x", "a": "y"}', "tools 'A' and 'a' differ only in case"),  # QA 59c L3: "tools 'a' and 'a'"
    ('{"ResearchHelper": ', "cannot read the tools JSON"),
    ('{"ResearchHelper": "a", "researchhelper": "b"}', "tools 'ResearchHelper' and 'researchhelper' differ only in case"),
])
def test_a_bad_tools_file_is_refused_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BenchInputError, match=message):
        load_tools(write(tmp_path / "tools.json", text))


def test_the_command_reports_bad_input_before_it_starts_anything(tmp_path: Path) -> None:
    tools = write(tmp_path / "tools.json", json.dumps(TOOLS))
    queries = write(tmp_path / "q.csv", "Query,Tool\nWhat is the weather?,WeatherTool\n")
    result = CliRunner().invoke(app, ["bench", "selection", "--tools", str(tools), "--queries", str(queries)])
    assert result.exit_code == 2  # refused, as typer refuses a file that does not exist
    assert "tool 'WeatherTool' is not in the tools file" in result.output


def test_a_model_that_cannot_load_ends_the_command_with_what_to_set(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    tools = write(tmp_path / "tools.json", json.dumps(TOOLS))
    queries = write(tmp_path / "q.csv", "Query,Tool\n" + "Find papers on bees,ResearchHelper\n" * 10)
    env = {**os.environ, "FITTEST_EMBEDDING_MODEL_PATH": str(tmp_path / "no-model")}
    done = subprocess.run([str(Path(sys.executable).parent / "fittest"), "bench", "supervised", "--tools", str(tools),
                           "--queries", str(queries)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    said = " ".join(done.stderr.split())
    assert f"could not be loaded from the directory {tmp_path / 'no-model'}" in said and "Set FITTEST_EMBEDDING_MODEL_PATH" in said


@pytest.mark.parametrize("bench", ["selection", "supervised"])
def test_a_json_path_that_cannot_be_written_is_refused_before_the_bench_runs(tmp_path: Path, bench: str) -> None:
    """QA J: a --json in a missing directory ended a full selection bench (13 min) with a traceback, the JSON lost."""
    tools = write(tmp_path / "tools.json", json.dumps(TOOLS))
    queries = write(tmp_path / "q.csv", "Query,Tool\nFind papers on bees,ResearchHelper\n")
    base = ["bench", bench, "--tools", str(tools), "--queries", str(queries)]
    missing = CliRunner().invoke(app, [*base, "--json", str(tmp_path / "nowhere" / "out.json")], env={"COLUMNS": "400"})
    assert missing.exit_code == 2 and "does not exist" in missing.output
    a_dir = CliRunner().invoke(app, [*base, "--json", str(tmp_path)], env={"COLUMNS": "400"})
    assert a_dir.exit_code == 2 and "is a directory" in a_dir.output


def test_a_tool_name_longer_than_a_namespace_is_registered_and_its_queries_matched(tmp_path: Path) -> None:
    """QA J: a name of 80 letters ended the command with a pydantic traceback; one with spaces around it
    was never matched by a query's (stripped) Tool."""
    long = "Research" + "x" * 80
    manifests, names = load_tools(write(tmp_path / "tools.json", json.dumps({long: "Finds papers.", " Weather ": "Forecasts."})))
    assert [len(m.name) for m in manifests] == [64, 7] and set(names.values()) == {long.lower(), "weather"}
    queries = write(tmp_path / "q.csv", f"Query,Tool\nFind papers,{long}\nRain?,Weather\n")
    assert load_queries(queries, set(names.values())) == [("Find papers", long.lower()), ("Rain?", "weather")]


def test_the_private_redis_directory_is_removed_when_no_redis_server_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA J: with no Redis answering and no redis-server binary, the command said so and left an
    empty fittest-bench-redis-* directory under TMPDIR at every run."""
    import tempfile

    import workers.stack as stack
    from workers.bench.selection import run_selection_bench
    from workers.settings import Settings

    def no_server() -> str:
        raise stack.StackError("no redis-server binary was found")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(stack, "find_redis_server", no_server)
    tools = write(tmp_path / "tools.json", json.dumps(TOOLS))
    queries = write(tmp_path / "q.csv", "Query,Tool\nFind papers on bees,ResearchHelper\n")
    said: list[str] = []
    with pytest.raises(stack.StackError):
        run_selection_bench(Settings(redis_url="redis://:secret@127.0.0.1:1/0"), tools, queries, notice=said.append)
    assert not list(tmp_path.glob("fittest-bench-redis-*"))
    # It says why it starts one (QA J: a mistyped FITTEST_REDIS_URL went unnoticed), without the password.
    assert said == ["redis://:**@127.0.0.1:1/0 does not answer: the bench runs its own redis-server"]


@pytest.mark.parametrize("bench", ["selection", "supervised"])
def test_a_json_path_that_is_an_input_of_the_bench_is_refused(tmp_path: Path, bench: str) -> None:
    """QA 51b: `--json` naming the queries file overwrote it with the numbers."""
    tools = write(tmp_path / "tools.json", json.dumps(TOOLS))
    queries = write(tmp_path / "q.csv", "Query,Tool\nFind papers on bees,ResearchHelper\n")
    for given in (queries, tools):
        result = CliRunner().invoke(app, ["bench", bench, "--tools", str(tools), "--queries", str(queries), "--json", str(given)],
                                    env={"COLUMNS": "400"})
        assert result.exit_code == 2 and "is an input of the bench: give another file" in result.output, result.output
    assert queries.read_text().startswith("Query,Tool")


def test_a_stream_of_fewer_than_two_queries_is_refused() -> None:
    """QA 51b: `--limit 1` left the first half empty, and its top-1 was reported as 0.000."""
    result = CliRunner().invoke(app, ["bench", "selection", "--tools", "t.json", "--queries", "q.csv", "--limit", "1"],
                                env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "1 is not in the range x>=2" in result.output, result.output

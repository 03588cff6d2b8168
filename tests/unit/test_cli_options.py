"""What the CLI makes of its JSON options and how it shows a call, without services."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import typer

from workers.cli.calls import show_call
from workers.cli.common import console, err_console, parse_json_option

CALL_ID = "ddfacd9d-2de5-4c92-8b47-37fd8c2c0fa1"


def refused(text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with err_console.capture() as err, pytest.raises(typer.Exit) as stop:
        parse_json_option(text, "--input")
    return stop.value.exit_code, " ".join(err.get().split())


def test_a_json_option_is_read_from_the_text_a_file_or_standard_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_json_option('{"n": 1}', "--input") == {"n": 1}
    (tmp_path / "input.json").write_text('{"numbers": [3, 1, 2]}')
    assert parse_json_option(f"@{tmp_path / 'input.json'}", "--input") == {"numbers": [3, 1, 2]}
    monkeypatch.setattr("sys.stdin", io.StringIO('{"text": "' + "x" * 200_000 + '"}'))  # past a command line's limit
    assert len(parse_json_option("-", "--input")["text"]) == 200_000


@pytest.mark.parametrize(("text", "says"), [
    ('{"numbers": [3,1,2]', "--input: it is not valid JSON"),
    ("[1, 2]", "--input: it must be a JSON object, not list"),
    ("null", "--input: it must be a JSON object, not null"),
    ("@/no/such/file.json", "--input /no/such/file.json: cannot read it"),
])
def test_a_bad_json_option_is_refused_with_the_exit_code_of_a_refused_payload(text: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, message = refused(text, capsys)
    assert code == 2 and says in message


def test_the_call_id_is_shown_whole_on_a_line_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 40)  # narrower than the id and its status
    with console.capture() as out:
        show_call({"call_id": CALL_ID, "status": "no_candidates", "attempts": [],
                   "message": "no tool matches this scenario, namespace and tags"})
    assert f"call {CALL_ID}: no_candidates" in out.get().splitlines()[0]

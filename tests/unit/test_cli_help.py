"""`--help` is the CLI's documentation: every command has one, and its paragraphs are wrapped to
the terminal, not broken where the docstring's lines happen to end."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from workers.cli import app

COMMAND = typer.main.get_command(app)


def commands(group: Any = COMMAND, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(words after `fittest`, command) of every command, those of sub-apps (`bench`) included."""
    found = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


@pytest.mark.parametrize("path,command", [pytest.param(p, c, id=" ".join(p)) for p, c in commands()])
def test_every_command_documents_itself_in_whole_paragraphs(path: tuple[str, ...], command: Any) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "2000", "TERMINAL_WIDTH": "2000"})
    assert result.exit_code == 0, result.output
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(command.help or "").split("\n\n")]
    assert paragraphs[0], f"fittest {' '.join(path)} has no help"
    shown = [" ".join(line.strip(" │").split()) for line in result.output.splitlines()]
    for paragraph in paragraphs:
        plain = paragraph.replace("`", "")  # inline code is shown without its backticks
        assert plain in shown, f"fittest {' '.join(path)} --help breaks the paragraph {plain[:60]!r}…"


@pytest.mark.parametrize("command", [["call", "sort these"], ["result", "abc"], ["evolve", "x"], ["explain", "sort these"],
                                     ["recommend"], ["health"], ["feedback", "show", "x"], ["weights"]])
def test_a_timeout_that_is_not_a_number_is_refused_in_one_line(command: list[str]) -> None:
    """QA 50d: `--timeout nan` passed the range check and ended in a traceback, exit code 1."""
    done = CliRunner().invoke(app, [*command, "--timeout", "nan"], env={"COLUMNS": "200"})
    assert done.exit_code == 2, done.output
    assert "Invalid value for '--timeout': not a number (NaN): give seconds" in done.output
    assert "Traceback" not in done.output

"""`fittest demo` stopped by something outside it ends as every command does (README: "the command
ends with one line that says what, and exit code 1"); 2 is what `fittest call` exits with for a
payload it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from workers.cli import app
from workers.settings import get_settings


def test_a_model_that_cannot_load_ends_the_demo_with_exit_code_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FITTEST_EMBEDDING_MODEL_PATH", str(tmp_path / "no_model_here"))
    monkeypatch.setenv("FITTEST_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["demo", "--calls", "1", "--no-fresh"])
    finally:
        get_settings.cache_clear()
    assert "could not be loaded" in result.output  # it stops there, before starting anything
    assert result.exit_code == 1, result.output


def test_a_demo_of_no_calls_is_refused_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FITTEST_EMBEDDING_MODEL_PATH", str(tmp_path / "no_model_here"))  # were it not refused, it stops there
    monkeypatch.setenv("FITTEST_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["demo", "--calls", "0"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2 and "--calls" in result.output, result.output

"""`fittest demo` stopped by something outside it ends as every command does (README: "the command
ends with one line that says what, and exit code 1"); 2 is what `fittest call` exits with for a
payload it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from workers.cli import app
from workers.settings import get_settings


@pytest.mark.parametrize(("args", "code", "said"), [
    (["--calls", "1", "--no-fresh"], 1, "could not be loaded"),  # it stops there, before starting anything
    (["--calls", "0"], 2, "--calls"),  # refused before anything starts; were it not, the model stops it
])
def test_a_demo_that_cannot_run_ends_with_one_line_and_its_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    args: list[str], code: int, said: str) -> None:
    monkeypatch.setenv("FITTEST_EMBEDDING_MODEL_PATH", str(tmp_path / "no_model_here"))
    monkeypatch.setenv("FITTEST_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["demo", *args])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == code and said in result.output, result.output

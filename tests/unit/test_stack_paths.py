"""The stack's processes run in the repository; the relative paths of the shell that started them
reach them as absolute paths, so that they mean the same files there as in that shell."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.settings import Settings
from workers.stack import Stack


def test_relative_paths_and_the_config_file_reach_the_processes_as_absolute_paths(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fittest.toml").write_text("max_candidates = 7\n")
    monkeypatch.setenv("FITTEST_CONFIG", "fittest.toml")
    monkeypatch.setenv("FITTEST_TOOLS_DIR", "mytools")
    settings = Settings(data_dir=Path("state"), embedding_model_path=Path("models/minilm"))
    env = Stack(settings).env
    assert env["FITTEST_TOOLS_DIR"] == str(tmp_path / "mytools")
    assert env["FITTEST_DATA_DIR"] == str(tmp_path / "state")
    assert env["FITTEST_EMBEDDING_MODEL_PATH"] == str(tmp_path / "models" / "minilm")
    assert env["FITTEST_CONFIG"] == str(tmp_path / "fittest.toml")
    assert "FITTEST_REDIS_TLS_CA" not in env  # an unset path stays unset
    assert Stack(settings, env={"FITTEST_DATA_DIR": "/elsewhere"}).env["FITTEST_DATA_DIR"] == "/elsewhere"  # what the caller gives wins

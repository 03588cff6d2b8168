"""`fittest settings --markdown` is the README's settings table: every FITTEST_ variable, with a meaning."""

from __future__ import annotations

from typer.testing import CliRunner

from workers.cli import app
from workers.settings import Settings, get_settings


def test_markdown_table_lists_every_setting_with_its_default_and_meaning(monkeypatch) -> None:
    monkeypatch.setenv("FITTEST_FLOWER_PASSWORD", "s3cret-not-shown")
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["settings", "--markdown"])
    assert result.exit_code == 0, result.output
    rows = [line.split(" | ") for line in result.output.splitlines()[2:]]
    variables = [r[0].strip("| `") for r in rows]
    assert variables == [f"FITTEST_{name.upper()}" for name in Settings.model_fields] + ["FITTEST_CONFIG"]
    assert all(r[2].strip(" |") for r in rows), "every setting needs a description (Field(description=...))"
    assert dict(zip(variables, (r[1] for r in rows)))["FITTEST_METRICS_PORT"] == "`9808`"
    shown = CliRunner().invoke(app, ["settings", "--json"]).output
    get_settings.cache_clear()
    assert "s3cret-not-shown" not in shown and "***" in shown


def test_the_readme_shows_the_settings_table_as_the_code_declares_it() -> None:
    """The README's table is `fittest settings --markdown` pasted: a setting added or changed without
    pasting it again would leave the README untrue."""
    from pathlib import Path

    table = CliRunner().invoke(app, ["settings", "--markdown"]).output
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert table in readme, "paste `fittest settings --markdown` over the README's settings table"

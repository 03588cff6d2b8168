"""`fittest settings --markdown` is the README's settings table: every FITTEST_ variable, with a meaning."""

from __future__ import annotations

import json

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
    log_json = next(r for r in json.loads(shown) if r["variable"] == "FITTEST_LOG_JSON")
    assert log_json["value"] == log_json["default"] == "true"  # QA ops: "True" beside "true"


def test_the_readme_shows_the_settings_table_as_the_code_declares_it() -> None:
    """The README's table is `fittest settings --markdown` pasted: a setting added or changed without
    pasting it again would leave the README untrue."""
    from pathlib import Path

    table = CliRunner().invoke(app, ["settings", "--markdown"]).output
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert table in readme, "paste `fittest settings --markdown` over the README's settings table"


def test_a_misspelled_setting_in_the_environment_is_warned_of_and_other_variables_are_not() -> None:
    """QA ops: FITTEST_MAX_CANDIDATE=3 was silently ignored, where FITTEST_CONFIG refuses the same typo."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from workers.settings import misspelled_variables

    assert misspelled_variables({"FITTEST_MAX_CANDIDATE": "3", "FITTEST_EXAMPLE_HTTP_PORT": "8831", "FITTEST_MAX_CANDIDATES": "4",
                                 "FITTEST_TEST_REDIS_URL": "redis://x", "PATH": "/bin"}) == [
        "FITTEST_MAX_CANDIDATE is not a setting, and is ignored: did you mean FITTEST_MAX_CANDIDATES?"]
    fittest = Path(sys.executable).parent / "fittest"
    done = subprocess.run([str(fittest), "settings", "--json"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FITTEST_BREAKER_TRESHOLD": "2"})
    assert done.returncode == 0 and "warning: FITTEST_BREAKER_TRESHOLD is not a setting, and is ignored: did you mean " \
        "FITTEST_BREAKER_THRESHOLD?" in " ".join(done.stderr.split()), done.stderr

"""`fittest health`'s tools check where no memory worker answers: the directory as this host sees it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import free_port
from workers.health import health
from workers.settings import Settings


def test_a_tools_directory_that_is_not_there_fails_the_tools_check(tmp_path: Path) -> None:
    """QA resilience: the directory moved away, every call ended no_candidates, and health said healthy."""
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", tools_dir=tmp_path / "tools")
    (check,) = health(settings, ["tools"], [], timeout=0.2).checks
    assert (check.name, check.status) == ("tools", "fail")
    assert check.detail == (f"FITTEST_TOOLS_DIR {tmp_path / 'tools'} is not a directory: its tools stay registered, "
                            "not run, until it is back, and a restart would serve none of them")
    (tmp_path / "tools").mkdir()
    report = health(settings, ["tools"], [], timeout=0.2)
    assert report.healthy and report.checks[0].status == "ok"

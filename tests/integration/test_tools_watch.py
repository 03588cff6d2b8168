"""A tool added to FITTEST_TOOLS_DIR while the workers run is served without a restart; a manifest
changed in place or refused is reported in the memory worker's log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLE_TOOLS
from tests.integration.conftest import start_pipeline

SLUG_CALL: dict[str, Any] = {"scenario": "make a URL slug from the article title", "input": {"title": "Héllo, Wörld!"}, "max_attempts": 2}


def events(log: Path) -> list[dict]:
    found = []
    for line in log.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # Celery's own banner
    return found


def test_a_manifest_added_while_the_workers_run_is_served_and_a_changed_one_is_reported(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    p = start_pipeline(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                       FITTEST_TOOLS_RESCAN_S="0.3")
    try:
        before = p.call(**SLUG_CALL)
        assert before["tool"] != "slugify"
        shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
        served: list[dict] = []

        def slugify_served() -> bool:
            served.append(p.call(**SLUG_CALL))
            return served[-1]["tool"] == "slugify"

        p.wait_for(slugify_served, timeout=30)
        assert served[-1]["status"] == "success" and served[-1]["output"] == {"slug": "hello-world"}

        manifest = tools / "word_stats" / "tool.yaml"
        manifest.write_text(manifest.read_text().replace("Count the words", "Count all the words"))
        (tools / "broken.yaml").write_text("name: broken\nversion: [not a version\n")
        log = tmp_path / "logs" / "memory.log"

        def reported() -> bool:
            seen = {(e.get("event"), e.get("tool") or e.get("path")) for e in events(log)}
            return {("tool_manifest_changed", "word_stats@1.0.0"), ("tool_manifest_refused", str(tools / "broken.yaml"))} <= seen

        p.wait_for(reported, timeout=30)
        assert ("tool_added", "slugify@1.0.0") in {(e.get("event"), e.get("tool")) for e in events(log)}
    finally:
        p.close()
        p.state().clear()

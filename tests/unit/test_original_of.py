"""Which original an executor compares an evolved version's code with."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import whoami_tool
from selection.registry import ToolRegistry
from workers.runners import RunLimits, run_tool
from workers.tasks.execution import original_of


def test_the_original_of_a_tool_added_after_the_executor_started_is_read_from_the_tools_directory(tmp_path: Path) -> None:
    """QA: slow_cube, added while the stack ran, evolved a timeout-only 1.1.0 that ran in a
    subprocess (124 ms a call; 1.9 ms after a restart): the executor's registry, read as it started,
    had no original to compare its code with."""
    original = whoami_tool(tmp_path / "tools")
    evolved = original.model_copy(update={"version": "1.1.0", "parent_version": "1.0.0", "timeout_s": 40.0})
    started_before = ToolRegistry()  # what the executor read when the tool was not there yet

    found = original_of(evolved, started_before, tmp_path / "tools")
    assert found is not None and found.key == "whoami@1.0.0"
    outcome = run_tool(evolved, {}, timeout_s=10, limits=RunLimits(), original=found)
    assert outcome.success and outcome.output == {"pid": __import__("os").getpid()}  # in this process
    assert original_of(original, started_before, tmp_path / "tools") is None  # no evolution made it
    assert original_of(evolved.model_copy(update={"name": "gone"}), started_before, tmp_path / "tools") is None

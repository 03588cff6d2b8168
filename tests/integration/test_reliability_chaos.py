"""Smoke test of `fittest bench chaos`: the command runs its scenarios end to end and its audit
finds no lost call and no effect applied twice or missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_bench_chaos_loses_nothing_and_applies_nothing_twice(tmp_path: Path, model_path: Path) -> None:
    out = tmp_path / "chaos.json"
    env = {**os.environ, "FITTEST_EMBEDDING_MODEL_PATH": str(model_path)}
    fittest = str(Path(sys.executable).parent / "fittest")
    run = subprocess.run([fittest, "bench", "chaos", "--calls", "100", "--json", str(out)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=400)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert {"calls", "completed", "failed_with_result", "lost", "double_applied", "recovery_s"} <= set(result)
    assert result["calls"] == 100
    assert result["completed"] + result["failed_with_result"] + result["lost"] == 100
    # On failure: which phase lost a call, and what the bench said of each call it could not read.
    # A string, which pytest shows whole (it cut the list of phases short before the lost one).
    assert (result["lost"], result["double_applied"], result["effects_missing"]) == (0, 0, 0), \
        "\n".join([str([p for p in result["phases"] if p["lost"]]), run.stdout[-6000:]])
    assert result["failed_with_result"] == 5  # every twentieth call is told to fail, and says so
    assert result["quality_stored"] == result["quality_expected"] == 0.5  # five crashes, 0.10 each
    assert [p["name"] for p in result["phases"]] == ["steady", "crash", "restart", "store down", "store back"]
    store_down = next(p for p in result["phases"] if p["name"] == "store down")
    assert store_down["degraded"] == store_down["calls"] == 20  # the store stays locked until each is answered
    assert result["recovery_s"] > 0
    assert run.returncode == 0, run.stderr[-3000:]

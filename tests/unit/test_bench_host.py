"""The host a bench's numbers were measured on (workers/bench/host.py), as an operator comparing two
runs would read it."""

from __future__ import annotations

import os
from datetime import datetime
from importlib import metadata
from pathlib import Path

import pytest

from workers.bench.host import SIMD_FLAGS, HostInfo


def test_the_host_names_its_cpu_extensions_packages_and_load() -> None:
    host = HostInfo.here()
    assert host.cores == os.cpu_count()
    assert host.packages["onnxruntime"] == metadata.version("onnxruntime")
    assert host.packages["fastembed"] == metadata.version("fastembed")
    assert len(host.load_average) == 3 and all(x >= 0 for x in host.load_average)
    assert datetime.fromisoformat(host.finished_at).tzinfo is not None
    assert host.cpu and set(host.simd) <= set(SIMD_FLAGS)
    line = host.line()
    assert f"{host.cores} cores" in line and f"onnxruntime {host.packages['onnxruntime']}" in line


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo here")
def test_the_cpu_extensions_are_those_the_kernel_reports() -> None:
    first = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
    flags = next(line.split(":", 1)[1].split() for line in first.splitlines() if line.startswith("flags"))
    assert HostInfo.here().simd == [f for f in SIMD_FLAGS if f in flags]


def test_a_bench_says_which_code_and_which_settings_its_numbers_come_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 59c L1: two runs with another FITTEST_MIN_SIMILARITY and the classifier off were told
    apart by nothing in their JSON, nor runs of two commits."""
    import subprocess

    from workers.bench.host import BenchResult

    monkeypatch.setenv("FITTEST_MIN_SIMILARITY", "0.4")
    monkeypatch.setenv("FITTEST_REDIS_URL", "redis://:sesame@127.0.0.1:6379/0")
    monkeypatch.setenv("FITTEST_LLM_API_KEY", "sk-secret")
    result = BenchResult()
    assert result.settings["FITTEST_MIN_SIMILARITY"] == "0.4"
    assert result.settings["FITTEST_REDIS_URL"] == "redis://:**@127.0.0.1:6379/0" and result.settings["FITTEST_LLM_API_KEY"] == "***"
    assert "FITTEST_MAX_CANDIDATES" not in result.settings  # at its default
    root = Path(__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout, as CI's clean clone is
        assert result.code is not None and result.code.removesuffix("-dirty") == head.stdout.strip()

"""Smoke runs of `fittest bench throughput` and `fittest bench scale` at tiny sizes: the commands
work end to end and write every documented key. Not timing tests: no number is asserted on."""

from __future__ import annotations

import json

import pytest

from tests.conftest import cli_runner

pytestmark = pytest.mark.slow


@pytest.fixture
def cli(monkeypatch, model_path, tmp_path):
    return cli_runner(monkeypatch, {"FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
                                    "FITTEST_DATA_DIR": str(tmp_path / "data")})


def test_throughput_bench_writes_its_keys(cli, tmp_path) -> None:
    out = tmp_path / "throughput.json"
    result = cli("bench", "throughput", "--calls", "8", "--concurrency", "2", "--rounds", "2", "--warmup", "2",
                 "--scenarios", "2", "--json", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert {"calls", "pipeline_calls_per_s", "baseline_calls_per_s", "ratio", "p50_ms", "p99_ms"} <= set(data)
    assert data["calls"] == 8 and data["pipeline_failed"] == 0
    assert data["pipeline_calls_per_s"] > 0 and data["baseline_calls_per_s"] > 0
    assert data["ratio"] == pytest.approx(data["pipeline_calls_per_s"] / data["baseline_calls_per_s"], rel=0.02)


def test_scale_bench_writes_its_keys_for_both_stores(cli, tmp_path) -> None:
    out = tmp_path / "scale.json"
    result = cli("bench", "scale", "--tools", "5 40", "--vectors", "200 400 100000", "--max-vectors", "400",
                 "--queries", "10", "--json", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["tool_levels"] == [5, 40] and data["vector_levels"] == [200, 400]  # 100000 capped away
    cells = {(c["store"], c["tools"], c["vectors"]) for c in data["cells"]}
    assert cells == {(s, t, v) for s in ("edge", "client") for t in (5, 40) for v in (200, 400)}
    assert all(c["p99_ms"] >= c["p50_ms"] > 0 and c["queries"] == 10 for c in data["cells"])
    assert {(g["store"], g["along"]) for g in data["growth"]} == {(s, a) for s in ("edge", "client") for a in ("vectors", "tools")}
    assert {"edge_p99_ms_at_100k", "meets_target", "server_advised_above", "skipped", "build_s"} <= set(data)

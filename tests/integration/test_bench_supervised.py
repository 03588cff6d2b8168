"""`fittest bench supervised` on a slice of the MetaTool development queries, with the real
embedding model: it ranks each fold by a classifier fitted on the other folds' labels, and the
labels teach it more than the description match alone knows."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import Result

from tests.conftest import ROOT, cli_runner

DATA = ROOT.parent / "shared" / "data" / "metatool"


def _slice(tmp_path: Path, every: int) -> Path:
    with (DATA / "queries_dev.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[::every]
    out = tmp_path / "queries.csv"
    with out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["Query", "Tool"])
        writer.writeheader()
        writer.writerows({"Query": r["Query"], "Tool": r["Tool"]} for r in rows)
    return out


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, model_path: Path) -> Callable[..., Result]:
    if not (DATA / "tools.json").exists():
        pytest.skip(f"the MetaTool data is not at {DATA}")
    run = cli_runner(monkeypatch, {"FITTEST_EMBEDDING_MODEL_PATH": str(model_path)})
    return lambda *args: run("bench", "supervised", "--tools", str(DATA / "tools.json"), *args)


@pytest.mark.slow  # a bench smoke test: runs last, and `make test-fast` leaves it out
def test_the_labels_of_other_folds_teach_more_than_the_descriptions(cli, tmp_path: Path) -> None:
    out = tmp_path / "supervised.json"
    result = cli("--queries", str(_slice(tmp_path, 7)), "--folds", "3", "--epochs", "30", "--json", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["queries"] == 1498 and data["tools"] == 199 and data["folds"] == 3 and data["epochs"] == 30
    described, learned = data["description"], data["supervised"]
    for scores in (described, learned):
        assert 0 < scores["top1"] <= scores["top5"] <= 1
        assert 1 <= scores["mean_attempts"] <= 5
    # the description match is what the stream's zero-shot ranks by: ~0.54 top-1 on the whole file
    assert 0.45 < described["top1"] < 0.65
    assert learned["top1"] > described["top1"] + 0.1
    assert learned["mean_attempts"] < described["mean_attempts"]
    assert "classifier on the other folds' labels" in result.output
    # where it was measured: the JSON names the packages that move such numbers, and so does the printed line
    assert data["host"]["packages"]["onnxruntime"] == metadata.version("onnxruntime")
    assert f"onnxruntime {metadata.version('onnxruntime')}" in result.output


def test_a_query_of_an_unknown_tool_is_named(cli, tmp_path: Path) -> None:
    queries = tmp_path / "bad.csv"
    queries.write_text("Query,Tool\nbook me a flight,TripTool\nwhat is the weather,NoSuchTool\n")
    result = cli("--queries", str(queries))
    assert result.exit_code != 0
    assert "line 3" in result.output and "NoSuchTool" in result.output


def test_fewer_queries_than_folds_is_refused(cli, tmp_path: Path) -> None:
    queries = tmp_path / "two.csv"
    queries.write_text("Query,Tool\nbook me a flight,TripTool\nwhat is the weather,WeatherTool\n")
    result = cli("--queries", str(queries), "--folds", "3")
    assert result.exit_code != 0
    assert "2 queries cannot be split into 3 folds" in result.output

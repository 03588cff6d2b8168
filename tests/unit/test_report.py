"""`fittest report`: one HTML file, every plot embedded as a PNG, the numbers in the table."""

from __future__ import annotations

import base64
import re
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from selection.models import FailureClass, Promotion, ToolExecutionResult
from workers.metrics import MetricsReader, MetricsRecorder
from workers.report import write_report
from workers.state.redis import RedisStateStore

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def prefix(run_prefix: str) -> str:
    return f"{run_prefix}:"  # its keys go with run_prefix's


def images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)]


def test_report_of_a_busy_history_embeds_every_plot(redis_client, prefix, tmp_path) -> None:
    recorder = MetricsRecorder(redis_client, prefix)
    state = RedisStateStore(redis_client, prefix)
    start = time.time() - 600
    for i in range(30):
        ok = i % 3 != 0
        result = ToolExecutionResult(attempt_id=f"a{i}", call_id=f"c{i}", tool="csv_to_json", version="1.0.0",
                                     success=ok, error_class=None if ok else FailureClass.crash,
                                     execution_time_ms=10.0 + i, timestamp=start + 20 * i)
        recorder.attempt(result, quality=1.0 - 0.01 * i)
        recorder.call("success" if ok else "failed", 1 if ok else 2, 30.0, "csv_to_json" if ok else None)
    recorder.call("invalid", 0, 0.0, None)  # ended before any attempt: a call made, no attempt
    recorder.flush()
    state.promote(Promotion(namespace="csv_to_json", evolved_version="1.1.0", original_version="1.0.0",
                            promoted_at=start + 300))
    state.promote(Promotion(namespace="csv_to_json", evolved_version="1.1.0", original_version="1.0.0",
                            status="rolled_back", promoted_at=start + 500))

    path = write_report(MetricsReader(redis_client, prefix), tmp_path / "out")
    html = path.read_text()
    assert path.name == "index.html"
    pngs = images(html)
    assert len(pngs) == 4 and all(p.startswith(PNG_MAGIC) and len(p) > 5_000 for p in pngs)
    for heading in ("Quality per tool version", "Feedback per tool version", "Attempts per call", "Evolutions and rollbacks"):
        assert f"<h2>{heading}</h2>" in html
    assert "csv_to_json@1.0.0" in html
    assert "<b>31</b>" in html  # calls
    assert "<b>64.5%</b>" in html  # 20 of 31 succeeded
    assert "<b>1.33</b>" in html  # attempts per call that tried a tool: 40 in 30
    assert "src='http" not in html and "<script" not in html  # self-contained: opens offline


def test_the_report_counts_versions_evolved_not_a_manifests_and_only_within_its_hours(redis_client, prefix, tmp_path) -> None:
    """QA ops: "evolutions 2" where every evolution had found no fix and two manifests had been given
    new versions, and the same with --hours set to a minute after them."""
    from evolution.promotions import MANIFEST_MUTATION

    state = RedisStateStore(redis_client, prefix)
    start = time.time() - 600
    state.promote(Promotion(namespace="csv_to_json", evolved_version="1.1.0", original_version="1.0.0",
                            mutation="rename_input_key", promoted_at=start))
    state.promote(Promotion(namespace="slugify", evolved_version="1.1.0", original_version="1.0.0",
                            mutation=MANIFEST_MUTATION, promoted_at=start + 10))
    state.promote(Promotion(namespace="csv_to_json", evolved_version="1.1.0", original_version="1.0.0",
                            status="rolled_back", promoted_at=start + 500))

    def cards(since: float | None) -> str:
        return write_report(MetricsReader(redis_client, prefix), tmp_path / str(since), since=since).read_text()

    assert "versions evolved<b>1</b>" in cards(None) and "rollbacks<b>1</b>" in cards(None)
    assert "versions evolved<b>0</b>" in cards(start + 100) and "rollbacks<b>1</b>" in cards(start + 100)


def test_report_command_on_an_empty_history_still_writes_a_page(redis_url, prefix, tmp_path, monkeypatch) -> None:
    from workers.cli import app
    from workers.settings import get_settings

    monkeypatch.setenv("FITTEST_REDIS_URL", redis_url)
    monkeypatch.setenv("FITTEST_KEY_PREFIX", prefix)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["report", "--out", str(tmp_path / "r")])
        refused = CliRunner().invoke(app, ["report", "--out", str(tmp_path / "never"), "--hours", "-1"])
        (tmp_path / "a_file").write_text("x")
        on_a_file = CliRunner().invoke(app, ["report", "--out", str(tmp_path / "a_file")])
        unwritable = CliRunner().invoke(app, ["report", "--out", "/proc/fittest-report"])  # not even root makes one there
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    html = (tmp_path / "r" / "index.html").read_text()
    assert len(images(html)) == 4
    assert "calls<b>0</b>" in html and "succeeded<b>–</b>" in html
    assert "No attempt recorded in this period." in html and "The 0 busiest" not in html
    assert refused.exit_code == 2 and "--hours must be more than 0" in refused.output and not (tmp_path / "never").exists()
    # A path it cannot write to is refused in one line, not a traceback (QA new user)
    assert on_a_file.exit_code == 2 and "something that is not a directory is there" in on_a_file.output, on_a_file.output
    assert (tmp_path / "a_file").read_text() == "x"
    assert unwritable.exit_code == 2 and "--out /proc/fittest-report: No such file or directory" in unwritable.output, unwritable.output


def test_a_share_says_all_or_none_only_when_it_is() -> None:
    from workers.report import share

    assert [share(3138, 3150), share(3149, 3150), share(3150, 3150)] == ["99.6%", "99.9%", "100%"]  # QA: 99.6% showed as 100%
    assert [share(0, 10), share(1, 10_000), share(1, 3), share(0, 0)] == ["0%", "0.1%", "33.3%", "–"]


def test_the_feedback_plot_shows_refused_inputs_apart_as_the_tools_list_counts_them(redis_client, prefix,
                                                                                     monkeypatch) -> None:
    """QA ops L3: refusals of other tools' inputs were red -1 bars, where the table below and
    `fittest tools` list the version with 0 failures."""
    from workers import report

    recorder = MetricsRecorder(redis_client, prefix)
    start = time.time() - 600
    for i in range(6):
        result = ToolExecutionResult(attempt_id=f"r{i}", call_id=f"c{i}", tool="fast_sort", version="1.0.0", success=False,
                                     error_class=FailureClass.bad_input, timestamp=start + 60 * i)
        recorder.attempt(result, quality=1.0, counted_apart=i % 2 == 0)
    recorder.flush()
    data = report.ReportData.read(MetricsReader(redis_client, prefix))
    assert [p.counted_apart for p in data.attempts["fast_sort@1.0.0"]] == [True, False] * 3
    drawn: list[tuple[str, float]] = []

    def bars(fig: Any) -> str:
        """Each bar series of the figure by its label, with the attempts it stands for (below the axis)."""
        drawn.extend((str(bar.get_label()), sum(-r.get_height() for r in bar)) for ax in fig.axes for bar in ax.containers)
        return ""

    monkeypatch.setattr(report, "_png", bars)
    report.plot_feedback(data, ["fast_sort@1.0.0"])
    assert dict(drawn) == {"positive": 0, "negative": 3, "refused inputs (counted apart)": 3}

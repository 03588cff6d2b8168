"""`fittest health`'s tools check where no memory worker answers: the directory as this host sees it."""

from __future__ import annotations

import os
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


def test_refused_manifests_are_named_in_a_warning_that_keeps_health_healthy(tmp_path: Path) -> None:
    """QA onboarding M3: 3 of 12 manifests refused, and health said `tools ok`. Named with the file,
    field and reason, as a warning: the other tools serve, and a restart reads the same files."""
    from selection.manifest import ManifestError
    from workers.health import HealthReport, tools_dir_check

    (tmp_path / "tools").mkdir()
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", tools_dir=tmp_path / "tools")
    refused = [ManifestError(tmp_path / "tools/bad_field/tool.yaml", "description", "Field required"),
               ManifestError(tmp_path / "tools/bad_version/tool.yaml", "version", "'v1.0' is not a semantic version")]
    check = tools_dir_check(settings, 9, refused)
    assert check.status == "warn"
    assert check.detail == (
        f"9 tool versions served; FITTEST_TOOLS_DIR {tmp_path / 'tools'} is a directory; 2 manifests refused "
        f"(`fittest tools --refused` lists them): {tmp_path / 'tools/bad_field/tool.yaml'}: field 'description': "
        f"Field required; {tmp_path / 'tools/bad_version/tool.yaml'}: field 'version': 'v1.0' is not a semantic version")
    assert HealthReport(healthy=True, checks=[check]).healthy  # the schema takes the status
    assert tools_dir_check(settings, 9, refused[:1]).detail.count("1 manifest refused") == 1
    assert tools_dir_check(settings, 9).status == "ok"
    (tmp_path / "tools").rmdir()
    assert tools_dir_check(settings, 9, refused).status == "fail"  # a directory gone is still a failure


def test_the_health_table_shows_a_warning_and_exits_0(monkeypatch) -> None:
    """A `warn` check is printed (the table knew ok, fail and skip only) and passes the probe."""
    from typer.testing import CliRunner

    import workers.health
    from workers.cli import app
    from workers.health import Check, HealthReport

    report = HealthReport(healthy=True, checks=[Check(name="tools", status="warn", detail="1 manifest refused")])
    monkeypatch.setattr(workers.health, "health", lambda *args: report)
    done = CliRunner().invoke(app, ["health", "--check", "tools"])
    assert done.exit_code == 0 and "warn" in done.output and "1 manifest refused" in done.output, done.output


def test_a_workers_answer_it_cannot_read_fails_the_check_it_stands_for(monkeypatch) -> None:
    """The memory worker's answer is a model on both sides: a malformed one (a worker of another
    release) is a failed check naming the node, not a KeyError in the probe (code review 4)."""
    import workers.health
    from workers.health import WorkerHealth

    answers = {
        "memory@a": WorkerHealth.of({"queues": ["selection"], "store": {"status": "ok", "detail": "3 tool vectors", "ms": 1.5},
                                     "model": {"status": "ok", "detail": "384-dim vectors"}}),
        "memory@b": WorkerHealth.of({"queues": ["selection"], "store": {"detail": "no status"}}),
    }
    assert answers["memory@a"].store is not None and answers["memory@a"].store.detail == "3 tool vectors"
    assert answers["memory@b"].problem is not None and "not understood" in answers["memory@b"].problem
    monkeypatch.setattr(workers.health, "ask_workers", lambda *a, **k: answers)
    monkeypatch.setattr(workers.health, "check_redis", lambda *a: workers.health.Check(name="redis", status="ok"))
    report = health(Settings(), ["store", "model"], ["memory"], 1.0)
    store, model = report.checks
    assert store.status == "fail" and store.detail.endswith("(checked by memory@b)") and "not understood" in store.detail
    assert model.status == "fail" and "(checked by memory@b)" in model.detail


def test_the_store_and_model_checks_say_their_memory_worker_was_not_asked_when_redis_is_away(tmp_path: Path) -> None:
    """QA 50e: "no memory worker answered for it", of workers never asked: Redis did not answer (the
    model's check too: review 51)."""
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", data_dir=tmp_path / "data")
    store, model = health(settings, ["store", "model"], ["memory"], timeout=0.2).checks
    assert (store.name, store.status, model.name) == ("store", "fail", "model")
    for check in (store, model):
        assert "not asked: cannot reach Redis" in check.detail and "no memory worker answered" not in check.detail, check


def test_the_toolserver_check_reads_the_services_status(monkeypatch, tmp_path: Path) -> None:
    """Review 51: it passed any page that answered 200, and a port that is no port ended the command
    instead of failing the check."""
    import subprocess
    import sys
    import time

    from workers.health import check_served
    from workers.procfile import ROOT

    def serving(*command: str, cwd: Path = ROOT) -> subprocess.Popen:
        port = free_port()
        monkeypatch.setenv("FITTEST_EXAMPLE_HTTP_PORT", str(port))
        proc = subprocess.Popen([sys.executable, *command, *([str(port)] if "http.server" in command else [])], cwd=cwd,
                                env={**os.environ, "FITTEST_EXAMPLE_HTTP_PORT": str(port)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while check_served(Settings(data_dir=tmp_path), "toolserver", 1.0).detail.startswith("nothing answers") \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        return proc

    service = serving("examples/tools/http_server.py")  # the example service itself
    try:
        assert check_served(Settings(data_dir=tmp_path), "toolserver", 2.0).status == "ok"
    finally:
        service.terminate()
    (tmp_path / "health").write_text('{"status": "starting"}')
    other = serving("-m", "http.server", "--bind", "127.0.0.1", cwd=tmp_path)  # something else on its port
    try:
        down = check_served(Settings(data_dir=tmp_path), "toolserver", 2.0)
        assert down.status == "fail" and "answered 200 without 'ok'" in down.detail, down
    finally:
        other.terminate()
    monkeypatch.setenv("FITTEST_EXAMPLE_HTTP_PORT", "abc")
    bad = check_served(Settings(data_dir=tmp_path), "toolserver", 2.0)
    assert bad.status == "fail" and "FITTEST_EXAMPLE_HTTP_PORT" in bad.detail, bad


def test_the_store_check_without_a_memory_worker_says_the_data_directory_is_full(monkeypatch, tmp_path: Path) -> None:
    """QA 59d L3: a memory worker dying of SIGBUS on a full disk answered nothing, and health said
    "no answer from memory" alone, though the room it lacked is what this host can see."""
    import shutil
    from collections import namedtuple

    import workers.health

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(workers.health, "ask_workers", lambda *a, **k: {})
    monkeypatch.setattr(workers.health, "check_redis", lambda *a: workers.health.Check(name="redis", status="ok"))
    (tmp_path / "data").mkdir()
    settings = Settings(data_dir=tmp_path / "data")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**30, 2**30 - 3 * 2**20, 3 * 2**20))
    (store,) = health(settings, ["store"], ["memory"], 1.0).checks
    assert store.status == "fail" and "no memory worker answered" in store.detail and "only 3 MB free in FITTEST_DATA_DIR" in store.detail
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**30, 0, 2**30))
    (store,) = health(settings, ["store"], ["memory"], 1.0).checks
    assert "MB free" not in store.detail  # room enough: not the matter


def test_a_promoted_version_no_manifest_gives_is_named_in_a_warning(tmp_path: Path) -> None:
    """QA 60c F3: Redis restored without its FITTEST_DATA_DIR; the promoted evolved version's files
    were gone, an older version served untold, and health was green."""
    from selection.manifest import ToolManifest
    from selection.models import Promotion
    from selection.registry import ToolRegistry
    from workers.health import promoted_missing, tools_dir_check

    registry = ToolRegistry()
    http = {"kind": "http", "url": "http://127.0.0.1:9/x"}
    for name, version in (("slugify", "1.0.0"), ("hash_text", "1.0.0"), ("hash_text", "1.1.0")):
        registry.add(ToolManifest(name=name, version=version, description=name, implementation=http))
    promotions = {
        "slugify": Promotion(namespace="slugify", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0",
                             reason="verified", status="active"),
        "hash_text": Promotion(namespace="hash_text", evolved_version="1.1.0", original_version="1.0.0",
                               parent_version="1.0.0", reason="verified", status="on_trial"),
        "word_stats": None,
    }
    assert promoted_missing(promotions, registry) == ["slugify@1.1.0"]
    (tmp_path / "tools").mkdir()
    check = tools_dir_check(Settings(tools_dir=tmp_path / "tools"), 3, missing=promoted_missing(promotions, registry))
    assert check.status == "warn" and "promotions serve slugify@1.1.0, which no manifest gives" in check.detail

"""The tools directory as it is now is served without a restart: a manifest added while the workers
run is served, one changed in place is served as it now reads (`deprecated` set and taken back),
one removed is no longer served, and each change is in the memory worker's log."""

from __future__ import annotations

import json
import shutil
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import EXAMPLE_TOOLS, cli_runner
from tests.integration.conftest import pipeline_running, start_pipeline

SLUG_CALL: dict[str, Any] = {"scenario": "make a URL slug from the article title", "input": {"title": "Héllo, Wörld!"}, "max_attempts": 2}


def events(log: Path) -> list[dict]:
    found = []
    for line in log.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # Celery's own banner
    return found


def add_slugify_version(tools: Path, version: str, folder: str | None = None) -> None:
    """The example slugify tool, its manifest given `version`, in a folder of its own."""
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / (folder or f"slugify_{version}"))
    manifest = tools / (folder or f"slugify_{version}") / "tool.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1.0.0", f"version: {version}"))


def test_manifests_added_changed_and_removed_while_the_workers_run_are_served_as_they_now_read(
    tmp_path: Path, redis_url: str, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_stats")
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3") as p:
        before = p.call(**SLUG_CALL)
        assert before["tool"] != "slugify"
        shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
        served: list[dict] = []

        def slugify_served(expected: bool = True) -> bool:
            served.append(p.call(**SLUG_CALL))
            return (served[-1]["tool"] == "slugify") == expected

        p.wait_for(slugify_served, timeout=30)
        assert served[-1]["status"] == "success" and served[-1]["output"] == {"slug": "hello-world"}

        slugify = tools / "slugify" / "tool.yaml"
        as_added = slugify.read_text()
        slugify.write_text(as_added + "deprecated: true\n")
        p.wait_for(lambda: slugify_served(expected=False), timeout=30)
        slugify.write_text(as_added)  # taken back
        p.wait_for(slugify_served, timeout=30)

        manifest = tools / "word_stats" / "tool.yaml"
        manifest.write_text(manifest.read_text().replace("Count the words", "Count all the words"))
        (tools / "broken.yaml").write_text("name: broken\nversion: [not a version\n")
        slugify.unlink()
        p.wait_for(lambda: slugify_served(expected=False), timeout=30)
        log = tmp_path / "logs" / "memory.log"

        def reported() -> bool:
            seen = {(e.get("event"), e.get("tool") or e.get("path")) for e in events(log)}
            return {("tool_changed", "word_stats@1.0.0"), ("tool_manifest_refused", str(tools / "broken.yaml")),
                    ("tool_removed", "slugify@1.0.0")} <= seen

        p.wait_for(reported, timeout=30)
        assert ("tool_added", "slugify@1.0.0") in {(e.get("event"), e.get("tool")) for e in events(log)}
        # Its history stays readable, its removal in it (QA 50d F10: `show` said there was no such tool).
        cli = cli_runner(monkeypatch, p.env)
        shown = cli("show", "slugify", "--json")
        assert shown.exit_code == 0, shown.output
        lineage = json.loads(shown.output)
        assert lineage["versions"] == []
        assert [(e["event"], e["version"], e["reason"]) for e in lineage["changelog"]] == [
            ("added", "1.0.0", f"served from {slugify}"), ("removed", "1.0.0", f"{slugify} is gone")]
        text = cli("show", "slugify")
        assert text.exit_code == 0 and "slugify: no version served now" in text.output and "removed" in text.output
        assert cli("show", "nosuch").exit_code == 2  # a name that never had a version is refused as before
        named = p.client.wait(p.client.send("call_tool", name="slugify", input={"title": "x"}), 60)
        assert named["no_candidates_reason"] == "no_such_tool", named
        assert named["message"].startswith("no tool named 'slugify': slugify@1.0.0 was removed from the tools directory ")
        assert named["message"].endswith(f"({slugify} is gone); `fittest show slugify` shows its history"), named["message"]
        by_namespace = p.call(**SLUG_CALL, namespace="slugify")  # a call by scenario that names it (review 51)
        assert any(note.startswith("no tool named 'slugify' (slugify@1.0.0 was removed from the tools directory ")
                   for note in by_namespace["notes"]), by_namespace["notes"]


def test_a_new_version_given_by_a_manifest_goes_on_trial_and_is_served_once_it_proves_itself(
    tmp_path: Path, redis_url: str, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: a fixed 2.0.0 dropped into the tools directory ran only as a fallback of the broken
    1.0.0, which went on being served first. It competes on outcomes, as the README says: on trial
    against what the namespace served, then served once no worse."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3", FITTEST_TRIAL_SHARE="0.5", FITTEST_TRIAL_SUCCESSES="3") as p:
        assert p.call(**SLUG_CALL)["version"] == "1.0.0"
        add_slugify_version(tools, "2.0.0")
        state = p.state()
        p.wait_for(lambda: state.promotion("slugify") is not None, timeout=30)
        trial = state.promotion("slugify")
        assert trial is not None and (trial.evolved_version, trial.parent_version, trial.status) == ("2.0.0", "1.0.0", "on_trial")
        served: list[str] = []

        def activated() -> bool:
            result = p.call(**SLUG_CALL)
            assert result["status"] == "success", result
            served.append(result["version"])
            promotion = state.promotion("slugify")
            return promotion is not None and promotion.status == "active"

        p.wait_for(activated, timeout=60)
        assert served.count("2.0.0") >= 3 and set(served) <= {"1.0.0", "2.0.0"}  # its share of the calls (unit-tested)
        p.settled()
        assert [p.call(**SLUG_CALL)["version"] for _ in range(3)] == ["2.0.0"] * 3
        log = tmp_path / "logs" / "memory.log"
        assert ("manifest_trial", "slugify@2.0.0") in {(e.get("event"), e.get("tool")) for e in events(log)}
        shown = cli_runner(monkeypatch, p.env)("show", "slugify", "--json")
        assert shown.exit_code == 0, shown.output
        # in the order it happened: the version came, went on trial, and was served
        assert [e["event"] for e in json.loads(shown.output)["changelog"] if e["version"] == "2.0.0"] == [
            "added", "promoted", "activated"]


def test_a_call_naming_a_tool_whose_version_against_the_trial_is_deprecated_is_served_by_the_trial_version_and_its_removal_ends_the_trial(
    tmp_path: Path, redis_url: str, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA onboarding H2: with 1.0.0 deprecated during 2.0.0's trial, the trial still gave 1.0.0, no
    longer offered, 75 % of the calls, and on those a call naming the tool started with another
    tool (the one its scenario matched best), which served 7 of 8 such calls without a note."""
    tools = tmp_path / "tools"
    for name in ("slugify", "word_stats"):
        shutil.copytree(EXAMPLE_TOOLS / name, tools / name)
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3", FITTEST_TRIAL_SHARE="0.25", FITTEST_TRIAL_SUCCESSES="50") as p:
        add_slugify_version(tools, "2.0.0")
        state = p.state()
        p.wait_for(lambda: state.promotion("slugify") is not None, timeout=30)
        manifest = tools / "slugify" / "tool.yaml"
        manifest.write_text(manifest.read_text() + "deprecated: true\n")
        called: dict[str, Any] = {"scenario": "count the words of this text", "input": {"title": "Two words", "text": "Two words"},
                  "namespace": "slugify", "max_attempts": 1}

        def deprecated_gone() -> bool:  # the watch has read the change: 1.0.0 is no longer ranked
            return all(r["key"] != "slugify@1.0.0" for r in p.call(**called)["ranking"])

        p.wait_for(deprecated_gone, timeout=30)
        firsts = [p.call(**called, call_id=f"named-{i}")["attempts"][0] for i in range(8)]
        assert [(a["tool"], a["version"]) for a in firsts] == [("slugify", "2.0.0")] * 8
        # QA 51d N4: with 1.0.0 removed, the trial has one side left; it ends, and 2.0.0 serves every call.
        shutil.rmtree(tools / "slugify")
        p.wait_for(lambda: (promotion := state.promotion("slugify")) is not None and promotion.status == "active", timeout=30)
        shown = cli_runner(monkeypatch, p.env)("show", "slugify", "--json")
        assert shown.exit_code == 0, shown.output
        lineage = json.loads(shown.output)
        assert [(e["event"], e["version"]) for e in lineage["changelog"]][-2:] == [("removed", "1.0.0"), ("activated", "2.0.0")]
        assert lineage["changelog"][-1]["reason"].startswith("slugify@1.0.0, the version it was tried against, left the tools directory")
        assert [(v["version"], v["status"], v["served"]) for v in lineage["versions"]] == [("2.0.0", "active", True)]


def test_an_older_version_dropped_in_stays_a_fallback_and_the_newest_stays_served(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    """QA M: fast_sort 0.5.0 dropped beside the 1.0.0 that served the namespace became its original,
    and 1.0.0 went on trial against it: the older version served 3 of the next 6 calls."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3", FITTEST_TRIAL_SHARE="0.5") as p:
        assert p.call(**SLUG_CALL)["version"] == "1.0.0"
        add_slugify_version(tools, "0.5.0")
        state = p.state()
        p.wait_for(lambda: state.promotion("slugify") is not None, timeout=30)
        kept = state.promotion("slugify")
        assert kept is not None and (kept.evolved_version, kept.status) == ("1.0.0", "active")
        assert [p.call(**SLUG_CALL, call_id=f"after-{i}")["version"] for i in range(8)] == ["1.0.0"] * 8
        log = tmp_path / "logs" / "memory.log"
        assert ("manifest_kept_served", "slugify@1.0.0") in {(e.get("event"), e.get("tool")) for e in events(log)}


def test_an_older_and_a_newer_version_dropped_in_together_leave_the_served_one_the_trial_parent(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    """QA N: word_stats 0.5.0 and 1.1.0 came in one look beside the 1.0.0 that served; 1.1.0 went on
    trial against 0.5.0, which then served the calls outside the trial's share (17 of 20)."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    staging = tmp_path / "staging"
    for version in ("0.5.0", "2.0.0"):
        add_slugify_version(staging, version)
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3", FITTEST_TRIAL_SHARE="0.5", FITTEST_TRIAL_SUCCESSES="50") as p:
        assert p.call(**SLUG_CALL)["version"] == "1.0.0"
        staging.rename(tools / "new")  # both versions in one look of the watch
        state = p.state()
        p.wait_for(lambda: state.promotion("slugify") is not None, timeout=30)
        trial = state.promotion("slugify")
        assert trial is not None and (trial.evolved_version, trial.status, trial.parent_version) == ("2.0.0", "on_trial", "1.0.0")
        served = {p.call(**SLUG_CALL, call_id=f"after-{i}")["version"] for i in range(8)}
        assert "0.5.0" not in served


def test_a_new_version_found_at_the_start_goes_on_trial(tmp_path: Path, redis_url: str, model_path: Path) -> None:
    """A manifest given a new version while no worker ran is put on trial as the memory worker starts."""
    tools = tmp_path / "tools"
    for folder, version in (("slugify", "1.0.0"), ("slugify_2", "1.2.0")):
        add_slugify_version(tools, version, folder)
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory",), FITTEST_TOOLS_RESCAN_S="0") as p:
        state = p.state()
        p.wait_for(lambda: state.promotion("slugify") is not None, timeout=30)
        trial = state.promotion("slugify")
        assert trial is not None and (trial.evolved_version, trial.parent_version, trial.status) == ("1.2.0", "1.0.0", "on_trial")


def test_an_older_version_dropped_in_while_no_worker_ran_stays_a_fallback_at_the_restart(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    """QA N: hash_text 0.5.0 added while the stack was down became the namespace's original at the
    restart, and the 1.0.0 that had served went on trial against it: 0.5.0 served 14 of 20 calls."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    same = {"FITTEST_KEY_PREFIX": "restart:", "FITTEST_COLLECTION_PREFIX": "restart_", "FITTEST_TOOLS_RESCAN_S": "0",
            "FITTEST_TRIAL_SHARE": "0.5"}
    # stopped with its state kept, as a stack that is restarted leaves it (the pipeline below clears it)
    with closing(start_pipeline(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"), **same)) as p:
        assert p.call(**SLUG_CALL)["version"] == "1.0.0"
        p.settled()
    add_slugify_version(tools, "0.5.0")
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"), **same) as p:
        state = p.state()
        p.wait_for(lambda: state.promotion("slugify") is not None, timeout=30)
        kept = state.promotion("slugify")
        assert kept is not None and (kept.evolved_version, kept.status) == ("1.0.0", "active")
        assert [p.call(**SLUG_CALL, call_id=f"after-{i}")["version"] for i in range(8)] == ["1.0.0"] * 8


def test_a_version_given_while_another_trial_runs_goes_on_trial_once_that_one_is_decided(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    """QA: a slow_cube 2.0.0 dropped in while the evolved 1.1.0 was on trial stayed a fallback after
    1.1.0's trial ended (activated), and went on trial only at the next restart of the stack."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3", FITTEST_TRIAL_SHARE="0.5", FITTEST_TRIAL_SUCCESSES="3") as p:
        state = p.state()

        def on_trial(version: str) -> bool:
            promotion = state.promotion("slugify")
            return promotion is not None and (promotion.evolved_version, promotion.status) == (version, "on_trial")

        add_slugify_version(tools, "2.0.0")
        p.wait_for(lambda: on_trial("2.0.0"), timeout=30)
        add_slugify_version(tools, "3.0.0")
        log = tmp_path / "logs" / "memory.log"
        p.wait_for(lambda: ("tool_added", "slugify@3.0.0") in {(e.get("event"), e.get("tool")) for e in events(log)}, timeout=30)
        assert on_trial("2.0.0")  # the running trial is decided first

        def next_trial() -> bool:
            assert p.call(**SLUG_CALL)["status"] == "success"
            return on_trial("3.0.0")

        p.wait_for(next_trial, timeout=60)
        assert any((h.evolved_version, h.status) == ("2.0.0", "active") for h in state.promotion_history("slugify"))


def test_a_version_on_trial_whose_manifest_is_removed_is_rolled_back(tmp_path: Path, redis_url: str, model_path: Path) -> None:
    """QA: removing the manifest of a version on trial left it the namespace's promotion, which no
    call could decide: `fittest show` marked nothing served, `describe` and `evolve` named a version
    that no longer existed, and the next version a manifest gave never went on trial."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory",), FITTEST_TOOLS_RESCAN_S="0.3") as p:
        state = p.state()
        add_slugify_version(tools, "2.0.0")

        def status() -> tuple[str, str] | None:
            promotion = state.promotion("slugify")
            return None if promotion is None else (promotion.evolved_version, promotion.status)

        p.wait_for(lambda: status() == ("2.0.0", "on_trial"), timeout=30)
        shutil.rmtree(tools / "slugify_2.0.0")
        p.wait_for(lambda: status() == ("2.0.0", "rolled_back"), timeout=30)
        log = tmp_path / "logs" / "memory.log"
        # The worker logs the rollback after storing it: CI read the log in between once.
        p.wait_for(lambda: ("manifest_version_retired", "slugify@2.0.0") in {(e.get("event"), e.get("tool")) for e in events(log)},
                   timeout=10)


def test_a_tool_added_to_the_running_system_is_tried_first_on_its_share_of_the_calls_it_matches(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    """QA: a tool added beside an incumbent that kept succeeding at its job ran 0 times in 298 calls:
    with no outcomes of its own it never ranked first. Until it has run FITTEST_TRIAL_SUCCESSES
    times it is tried first on FITTEST_TRIAL_SHARE of the calls it matches; the tools the system
    started with are not newcomers."""
    from evolution.served_version import in_share

    tools = tmp_path / "tools"
    for name in ("word_stats", "slugify"):
        shutil.copytree(EXAMPLE_TOOLS / name, tools / name)
    call: dict[str, Any] = {"scenario": "how many words are in this paragraph", "input": {"text": "One two three. Four five!"}}
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3", FITTEST_TRIAL_SHARE="0.5", FITTEST_TRIAL_SUCCESSES="3") as p:
        state = p.state()
        catalog = redis.Redis.from_url(p.settings.redis_url)
        p.wait_for(lambda: catalog.scard(f"{p.settings.key_prefix}namespaces") == 2, timeout=30)  # noted at the start
        assert [p.call(**call)["tool"] for _ in range(4)] == ["word_stats"] * 4
        assert state.newcomers() == {}
        shutil.copytree(EXAMPLE_TOOLS / "word_stats", tools / "word_tally")
        manifest = tools / "word_tally" / "tool.yaml"
        manifest.write_text(manifest.read_text().replace("name: word_stats", "name: word_tally").replace(
            "Count the words, characters, lines and sentences of a text", "Count the words and sentences of a text"))
        p.wait_for(lambda: "word_tally" in state.newcomers(), timeout=30)
        p.settled()
        ids = [f"words-{i}" for i in range(40)]
        tried = [i for i in ids if in_share(i, "newcomer:word_tally", 0.5)]
        not_tried = [i for i in ids if i not in tried]
        # Calls outside its share go on to the incumbent, as the outcomes rank it...
        assert [p.call(**call, call_id=i)["tool"] for i in not_tried[:2]] == ["word_stats"] * 2
        # ...and those in it try the newcomer first, saying why, until it has run 3 times.
        first = [p.call(**call, call_id=i) for i in tried[:3]]
        assert [r["tool"] for r in first] == ["word_tally"] * 3, first
        assert all(r["status"] == "success" and "new to the system" in r["ranking"][0]["breakdown"]["rationale"]
                   for r in first)
        p.settled()
        after = p.call(**call, call_id=tried[3])
        assert "new to the system" not in after["ranking"][0]["breakdown"]["rationale"]
        log = tmp_path / "logs" / "memory.log"
        assert ("tool_newcomer", "word_tally") in {(e.get("event"), e.get("namespace")) for e in events(log)}
        # Its manifest edited in place to a new version (fixed, say): served as its original without a
        # trial, with no outcomes of its own, it is a newcomer again (QA 63b: 0 of 30 calls tried it).
        came = state.newcomers()["word_tally"]
        manifest.write_text(manifest.read_text().replace("version: 1.0.0", "version: 1.0.1"))
        p.wait_for(lambda: state.newcomers()["word_tally"] > came, timeout=30)
        p.settled()
        again = [p.call(**call, call_id=f"{i}-again") for i in ids if in_share(f"{i}-again", "newcomer:word_tally", 0.5)][:2]
        assert [(r["tool"], r["version"]) for r in again] == [("word_tally", "1.0.1")] * 2, again
        assert sum(e.get("event") == "tool_newcomer" and e.get("namespace") == "word_tally" for e in events(log)) == 2


def test_a_tools_directory_moved_away_is_waited_for_not_blamed_on_its_tools(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    """QA resilience and recheck: moved away for a deploy, the directory read as empty and every call
    ended no_candidates; then, its tools served as last read, every attempt failed ("No module named
    ...") and took the tools' quality down. Now their calls say why they cannot run, and nothing is
    charged to them; moved back, they run."""
    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_TOOLS_RESCAN_S="0.3") as p:
        assert p.call(**SLUG_CALL)["status"] == "success"
        tools.rename(tmp_path / "tools.away")
        gone = p.call(**SLUG_CALL)
        assert gone["status"] == "no_candidates" and gone["attempts"] == [], gone
        assert gone["message"] == (f"FITTEST_TOOLS_DIR ({tools}) is not a directory: the versions whose code is in it "
                                   "are not run until it is back (slugify@1.0.0)")
        stats = p.state().stats(["slugify@1.0.0"])["slugify@1.0.0"]
        assert (stats.quality, stats.failures) == (1.0, 0)
        (tmp_path / "tools.away").rename(tools)
        back = p.call(**SLUG_CALL)
        assert (back["status"], back["tool"], back["output"]) == ("success", "slugify", {"slug": "hello-world"})


def test_a_manifest_edited_to_a_new_version_ends_the_promotion_of_a_version_evolved_from_the_old_one(
    tmp_path: Path, redis_url: str, model_path: Path
) -> None:
    """QA 64c: an http tool's evolved retry version, active, stayed served first after its manifest was
    edited to 1.0.1 for a moved service; it called the old URL until its breaker opened. The version
    it evolved from is no longer served, nor is it, and its promotion says why."""
    from evolution.versioning import evolved_manifest, version_dir
    from selection.manifest import load_manifest
    from selection.models import Promotion
    from workers.evolver import read_parent, write_version

    tools = tmp_path / "tools"
    shutil.copytree(EXAMPLE_TOOLS / "slugify", tools / "slugify")
    manifest = tools / "slugify" / "tool.yaml"
    original = load_manifest(manifest)
    write_version(version_dir(tmp_path / "data" / "evolved", "slugify", "1.1.0"), evolved_manifest(original, "1.1.0"),
                  dict(read_parent(original).files))
    with pipeline_running(tmp_path, redis_url, model_path, tools, roles=("memory", "executor"), FITTEST_TOOLS_RESCAN_S="0.3") as p:
        state = p.state()
        state.promote(Promotion(namespace="slugify", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0",
                                reason="evolved", mutation="input coercion: rename name→title", status="active"))
        p.settled()
        assert (p.call(**SLUG_CALL)["version"]) == "1.1.0"
        manifest.write_text(manifest.read_text().replace("version: 1.0.0", "version: 1.0.1"))

        def promotion() -> tuple[str, str] | None:
            found = state.promotion("slugify")
            return None if found is None else (found.evolved_version, found.status)

        p.wait_for(lambda: promotion() == ("1.1.0", "rolled_back"), timeout=30)
        ended = state.promotion("slugify")
        assert ended is not None and "the version it evolved from left the tools directory" in ended.reason, ended
        served = p.call(**SLUG_CALL)
        assert (served["status"], served["version"]) == ("success", "1.0.1"), served
        assert {r["key"] for r in served["ranking"]} & {"slugify@1.0.0", "slugify@1.1.0"} == set(), served["ranking"]

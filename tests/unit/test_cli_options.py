"""What the CLI makes of its options and how it shows what it was asked about, without services
(Redis's start-up check, the registry and the state stores are stood in for)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer

from evolution.models import ChangelogEntry
from selection.manifest import ToolManifest
from selection.ports import ToolStats
from selection.registry import ToolRegistry
from workers.cli import app, evolution, learning
from selection.models import CallResult
from workers.cli import calls
from tests.conftest import run_cli
from tests.fakes_evolution import InMemoryEvolutionState
from workers.cli.common import call_payload, console, err_console, parse_json_option
from workers.client import CallSender

CALL_ID = "ddfacd9d-2de5-4c92-8b47-37fd8c2c0fa1"


def show_answer(answer: dict[str, Any]) -> None:
    """A worker's answer shown as `fittest call` shows it: read into its model first."""
    calls.show_call(CallResult.model_validate(answer))


def exit_code_of(answer: dict[str, Any]) -> int:
    return calls.exit_code(CallResult.model_validate(answer))


def refused(text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with err_console.capture() as err, pytest.raises(typer.Exit) as stop:
        call_payload("sort numbers", text, None, None, None, 5, None)
    return stop.value.exit_code, " ".join(err.get().split())


def test_a_json_option_is_read_from_the_text_a_file_or_standard_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_json_option('{"n": 1}', "--input") == {"n": 1}
    (tmp_path / "input.json").write_text('{"numbers": [3, 1, 2]}')
    assert parse_json_option(f"@{tmp_path / 'input.json'}", "--input") == {"numbers": [3, 1, 2]}
    monkeypatch.setattr("sys.stdin", io.StringIO('{"text": "' + "x" * 200_000 + '"}'))  # past a command line's limit
    assert len(parse_json_option("-", "--input")["text"]) == 200_000


@pytest.mark.parametrize(("text", "says"), [
    ('{"numbers": [3,1,2]', "--input: it is not valid JSON"),
    ("[1, 2]", "--input: it must be a JSON object, not list"),
    ("null", "--input: it must be a JSON object, not null"),
    ("@/no/such/file.json", "--input /no/such/file.json: cannot read it"),
    ("", "--input is empty: give a JSON object ('{}' for none)"),  # QA AA: `--input "$UNSET"` ran on {}
    ("  ", "--input is empty"),
    ('{"numbers": [1.5, 1e400]}', "--input: it holds the number 1e400, out of range (it reads as Infinity)"),  # QA 60d L6
    ('{"n": ' + "1" * 5000 + "}", "--input: it holds what JSON this command reads cannot (Exceeds the limit"),  # QA 64a: a traceback
])
def test_a_bad_json_option_is_refused_with_the_exit_code_of_a_refused_payload(text: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, message = refused(text, capsys)
    assert code == 2 and says in message


def test_json_nested_past_what_the_parser_can_read_is_refused_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """QA 60d M1: ~1,000 levels gave a RecursionError's traceback and exit code 1."""
    code, message = refused("[" * 5000 + "]" * 5000, capsys)
    assert code == 2 and "--input: it nests too deeply" in message


def test_a_call_id_of_ones_own_goes_in_the_payload_and_a_bad_one_is_refused() -> None:
    assert call_payload("sort numbers", None, None, None, None, 5, None, call_id="job-17")["call_id"] == "job-17"
    with err_console.capture() as err, pytest.raises(typer.Exit) as stop:
        call_payload("sort numbers", None, None, None, None, 5, None, call_id="job 17")
    assert stop.value.exit_code == 2 and "call_id" in err.get()


@pytest.mark.parametrize(("stopped_by", "code"), [(None, 130), (signal.SIGTERM, 143)])
def test_a_call_whose_wait_is_stopped_says_its_id_and_that_it_stays_queued(
        stopped_by: signal.Signals | None, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    """QA 60d M3: Ctrl-C or SIGTERM while `fittest call` waited printed nothing of the call it had
    sent, which ran once a worker started."""
    from workers.cli.common import told_when_stopped

    before = signal.getsignal(signal.SIGTERM)
    with err_console.capture() as err, pytest.raises(typer.Exit) as stop:
        with told_when_stopped(CALL_ID, f"stopped waiting: `fittest result {CALL_ID}` shows it", json_out=True):
            if stopped_by is None:
                raise KeyboardInterrupt
            os.kill(os.getpid(), stopped_by)
            time.sleep(5)  # the signal's handler ends the wait before this does
    assert stop.value.exit_code == code
    assert json.loads(capsys.readouterr().out) == {"call_id": CALL_ID, "status": "pending",
                                                   "message": f"stopped waiting: `fittest result {CALL_ID}` shows it"}
    assert f"fittest result {CALL_ID}" in err.get()
    assert signal.getsignal(signal.SIGTERM) == before  # the command's own handling ends with the wait


def test_the_call_id_is_shown_whole_on_a_line_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 40)  # narrower than the id and its status
    with console.capture() as out:
        show_answer({"call_id": CALL_ID, "status": "no_candidates", "attempts": [],
                   "message": "no tool matches this scenario, namespace and tags"})
    assert f"call {CALL_ID}: no_candidates" in out.get().splitlines()[0]


# ------------------------------------------------------------- commands on stand-in stores
HTTP = {"kind": "http", "url": "http://127.0.0.1:9/x"}


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> ToolRegistry:
    """Redis answers the start-up check; the registry is this one, the state stores are empty."""
    registry = ToolRegistry()
    registry.add(ToolManifest(name="fast_sort", description="Sorts numbers.", implementation=HTTP))
    registry.add(ToolManifest(name="fast_sort", version="1.1.0", description="Sorts numbers.", implementation=HTTP))
    registry.add(ToolManifest(name="old_sort", description="Sorts numbers slowly.", implementation=HTTP, deprecated=True))
    monkeypatch.setattr("workers.redis_connection.probe_client", lambda *a, **k: SimpleNamespace(
        ping=lambda: True, close=lambda: None, exists=lambda key: 1))  # a stack is served under the prefix
    monkeypatch.setattr("workers.tool_catalog.load_registry", lambda settings: registry)
    state = SimpleNamespace(promotion=lambda ns: None, promotion_history=lambda ns: [],
                            stats=lambda keys: {k: ToolStats() for k in keys},
                            stats_and_breakers=lambda keys: ({k: ToolStats() for k in keys}, {k: "closed" for k in keys}))
    ledger = InMemoryEvolutionState()
    ledger.log(ChangelogEntry(namespace="fast_sort", event="failed", version="1.1.0", reason="it failed", time=0.0))
    monkeypatch.setattr(evolution, "_stores", lambda: (registry, state, ledger))
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: state)
    return registry


def run(*args: str) -> tuple[int, str]:
    """`fittest ARGS`: its exit code and its output on one line."""
    result = run_cli(*args, reraise=True)
    return result.exit_code, " ".join(result.output.split())


def help_of(*path: str, param: str) -> str:
    """What `--help` says of one argument or option of a command (as written, not wrapped to a terminal)."""
    command: Any = typer.main.get_command(app)
    for word in path:
        command = command.commands[word]
    return str(next(p.help for p in command.params if p.name == param))


def test_show_says_a_deprecated_version_is_not_served_and_events_0_shows_no_changelog(stores: ToolRegistry) -> None:
    code, out = run("show", "old_sort", "--events", "0")
    assert code == 0 and "◀ served" not in out and "deprecated: not offered by selection" in out
    assert "changelog" not in out
    code, out = run("show", "fast_sort")
    assert code == 0 and "1.0.0 original ◀ served" in out and "it failed" in out
    assert run("show", "fast_sort", "--events", "-1")[0] == 2  # refused by the option's range


def test_show_says_a_promoted_version_no_manifest_gives_is_missing_not_deprecated(stores: ToolRegistry,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 60c F3: Redis restored without FITTEST_DATA_DIR; `show` called the lost version deprecated."""
    from selection.models import Promotion

    lost = Promotion(namespace="fast_sort", evolved_version="1.2.0", original_version="1.0.0", parent_version="1.1.0",
                     reason="verified", status="active")
    state = evolution._stores()[1]
    monkeypatch.setattr(state, "promotion", lambda ns: lost if ns == "fast_sort" else None)
    code, out = run("show", "fast_sort", "--events", "0")
    assert code == 0 and "the version its promotion serves, 1.2.0, is given by no manifest" in out, out
    assert "deprecated" not in out


def test_feedback_show_names_a_tool_or_version_nobody_serves_and_keeps_one_versions_entries(
    stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [{"timestamp": 0.0, "tool": "fast_sort", "version": v, "value": 1.0, "source": "manual", "reason": f"good {v}",
                "scenario": "sort"} for v in ("1.0.0", "1.1.0", "1.1.0")]
    asked: list[dict[str, Any]] = []

    def ask(*_: Any, **kwargs: Any) -> dict[str, Any]:
        asked.append(kwargs)
        return {"tool": "fast_sort", "total": 3, "entries": entries, "trend": []}

    monkeypatch.setattr(learning, "_ask", ask)
    assert run("feedback", "show", "nosuch") == (2, "error: no tool named 'nosuch'")
    assert run("feedback", "show", "fast_sort@9.9.9") == (2, "error: fast_sort has no version '9.9.9' (it has 1.0.0, 1.1.0)")
    assert not asked  # refused before asking the workers
    code, out = run("feedback", "show", "fast_sort@1.1.0")
    assert code == 0 and "2 entries (of the tool's 3" in out and "good 1.1.0" in out and "good 1.0.0" not in out
    assert asked[-1]["tool"] == "fast_sort"
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"tool": "fast_sort", "total": 3, "entries": entries, "trend": [], "forgiven": 2})
    code, out = run("feedback", "show", "fast_sort")
    assert code == 0 and "3 entries; 2 entries left out, of an outage the tool recovered from or of a call whose input" in " ".join(out.split())
    # QA ops: `tools` counted successes this listed no entry for, unexplained.
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: SimpleNamespace(
        stats=lambda keys: {k: ToolStats(quality=0.32 if k == "fast_sort@1.1.0" else 0.9) for k in keys}))
    out = run("feedback", "show", "fast_sort")[1]
    assert ("fast_sort@1.1.0's quality is 0.32: under 0.5, its successes give no entry (the design's rule), its failures "
            "still do") in out and "fast_sort@1.0.0's quality" not in out
    assert json.loads(run("feedback", "show", "fast_sort", "--json")[1])["quality"] == {"fast_sort@1.0.0": 0.9,
                                                                                       "fast_sort@1.1.0": 0.32}


def test_feedback_add_refuses_a_name_with_an_empty_version_and_says_what_its_score_is_for(
    stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = {"status": "recorded", "feedback": {"tool": "fast_sort", "version": "1.0.0", "value": -1.0, "scenario": "sort numbers"}, "score_now": -25.0}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: recorded)
    assert run("feedback", "add", "fast_sort@", "negative")[0] == 2
    assert run("feedback", "add", "@1.0.0", "negative") == (2, "error: '@1.0.0' names no tool: NAME, or NAME@VERSION")  # QA AC
    assert "its feedback score for a job worded as its description is now -25.0; other jobs count it" in run("feedback", "add", "fast_sort", "negative")[1]
    assert "its feedback score for that scenario is now -25.0" in run("feedback", "add", "fast_sort", "negative",
                                                                        "--scenario", "sort numbers")[1]


def test_feedback_add_of_a_call_a_trial_counted_says_where_the_trial_stands(
    stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial = {"namespace": "fast_sort", "evolved_version": "1.1.0", "role": "evolved", "status": "rolled_back",
             "counts": {"evolved_successes": 3, "evolved_failures": 2, "parent_successes": 4, "parent_failures": 0}}
    recorded = {"status": "recorded", "feedback": {"tool": "fast_sort", "version": "1.1.0", "value": -1.0, "scenario": "sort numbers"}, "score_now": -25.0}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {**recorded, "trial": trial})
    code, out = run("feedback", "add", "fast_sort", "negative", "--call", "c1")
    assert code == 0 and ("the trial of fast_sort@1.1.0 now counts 3/5 successes of the version on trial, 4/4 of "
                          "the version it is tried against: rolled back") in " ".join(out.split())
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: recorded)  # no trial counted the call
    assert "trial" not in run("feedback", "add", "fast_sort", "negative", "--call", "c1")[1]
    # QA 65c-A: judged after the verdict that the call's run decided
    late = {**trial, "status": "active", "decided_before": True}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {**recorded, "trial": late})
    code, out = run("feedback", "add", "fast_sort", "negative", "--call", "c1")
    assert code == 0 and ("the trial of fast_sort@1.1.0 that counted this call had been decided (activated) before this "
                          "judgement: it counts in the version's record, not in the verdict (`fittest rollback fast_sort` "
                          "undoes the activation)") in " ".join(out.split()), out


def answering(asked: list[dict[str, Any]], answer: dict[str, Any]) -> Any:
    """A stand-in for the workers that notes what it was asked and gives `answer`."""
    def ask(*_: Any, **kwargs: Any) -> dict[str, Any]:
        asked.append(kwargs)
        return answer
    return ask


def test_feedback_add_refuses_a_blank_scenario_as_explain_does_and_takes_an_empty_one_for_the_tool_in_general(
    stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA F7: `feedback add sort_numbers negative --scenario "   "` was stored, where `explain "   "`
    is refused with exit code 2."""
    asked: list[dict[str, Any]] = []
    recorded = {"status": "recorded", "feedback": {"tool": "fast_sort", "version": "1.0.0", "value": -1.0, "scenario": "sort numbers"}, "score_now": -25.0}
    monkeypatch.setattr(learning, "_ask", answering(asked, recorded))
    assert run("explain", "   ") == (2, "error: scenario: it is blank (spaces only): say what you need done")
    assert run("feedback", "add", "fast_sort", "negative", "--scenario", "   ") == (2, "error: scenario: it is blank (spaces only): say what you need done")
    # QA AA: a blank tag (an unset variable) was dropped, and the call asked for no tag
    assert run("explain", "sort these", "--tag", "") == (2, "error: tags: a tag is blank: leave it out to ask for none")
    assert not asked  # refused before asking the workers
    code, out = run("feedback", "add", "fast_sort", "negative", "--scenario", "")
    assert code == 0 and "for a job worded as its description" in out and asked[-1]["scenario"] == ""
    assert 'else the tool in general (as "" says). One of spaces only is refused.' in help_of("feedback", "add", param="scenario")


def test_a_judgement_of_quality_0_says_it_counts_for_nothing_and_shows_as_plus_zero(
    stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA AC N5: a negative judgement of --quality 0 printed "(+0.00)" and nothing more, and
    `feedback show` listed it as a red -0.00."""
    answer = {"status": "recorded", "score_now": 0.0, "feedback": {"value": -0.0, "tool": "fast_sort", "version": "1.0.0", "scenario": "sort numbers"}}
    monkeypatch.setattr(learning, "_ask", answering([], answer))
    code, out = run("feedback", "add", "fast_sort@1.0.0", "negative", "--quality", "0", "--scenario", "sort")
    assert code == 0 and "recorded negative feedback (+0.00, quality 0: it counts for nothing) for fast_sort@1.0.0" in out
    code, out = run("feedback", "add", "fast_sort@1.0.0", "negative", "--quality", "0", "--call", CALL_ID)
    assert f"(+0.00, quality 0: takes back any judgement of call {CALL_ID}; its output counts as it ran)" in out  # QA AE
    answer["feedback"]["value"] = -0.5  # type: ignore[index]
    assert "recorded negative feedback (-0.50) for fast_sort@1.0.0;" in run("feedback", "add", "fast_sort@1.0.0", "negative",
                                                                           "--quality", "0.5", "--scenario", "sort")[1]
    entry = {"timestamp": time.time(), "tool": "fast_sort", "version": "1.0.0", "value": -0.0, "source": "manual", "reason": "",
             "scenario": "sort"}
    trend = [{"start": time.time(), "count": 1, "positive": 0, "negative": 1, "mean_value": -0.0}]
    monkeypatch.setattr(learning, "_ask", answering([], {"tool": "fast_sort", "total": 1, "entries": [entry], "trend": trend}))
    code, out = run("feedback", "show", "fast_sort")
    assert code == 0 and "+0.00" in out and "-0.00" not in out and "feedback on fast_sort: 1 entry" in out  # not "1 entries"
    entry["general"] = True  # QA AD: a judgement in general was shown under the tool's description
    assert "│ (in general) │" in run("feedback", "show", "fast_sort")[1]


def test_feedback_show_counts_the_trend_per_hour_when_asked_and_asks_an_older_worker_nothing_new(
    stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team's first day of feedback was one row of the per-day trend."""
    asked: list[dict[str, Any]] = []
    import calendar

    start = calendar.timegm((2026, 11, 23, 14, 0, 0))  # the periods are UTC's, and so are the starts shown
    trend = [{"start": start, "count": 2, "positive": 2, "negative": 0, "mean_value": 1.0}]
    answer = {"tool": "fast_sort", "total": 0, "entries": [], "trend": trend, "per": "hour"}
    monkeypatch.setattr(learning, "_ask", answering(asked, answer))
    code, out = run("feedback", "show", "fast_sort", "--per", "hour")
    assert code == 0 and asked[-1]["per"] == "hour" and "trend per hour" in out and "2026-11-23 14:00" in out, out
    assert "hour (UTC)" in out, out
    del answer["per"]  # a worker of an earlier release counts per day, whatever it is asked
    code, out = run("feedback", "show", "fast_sort")
    assert code == 0 and "per" not in asked[-1] and "trend per day" in out and "2026-11-23 14:00" not in out, out
    assert run("feedback", "show", "fast_sort", "--per", "month")[0] == 2


def test_feedback_add_refusals_exit_2_and_name_what_is_wrong(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA F8: `--quality nan` was refused as "less than or equal to 1", and a tool, version or quality
    the workers refused exited 1 where a refused `fittest call` (and typer's range check) exits 2."""
    asked: list[dict[str, Any]] = []
    answer: dict[str, Any] = {}
    monkeypatch.setattr(learning, "_ask", answering(asked, answer))
    assert run("feedback", "add", "fast_sort", "negative", "--quality", "nan") == (
        2, "error: quality: nan is not a number: give one from 0 to 1")
    assert run("feedback", "add", "", "negative")[0] == 2
    assert run("feedback", "add", "fast_sort", "negative", "--quality", "2")[0] == 2  # typer's own range check
    assert not asked
    answer.update(status="invalid", errors=[{"field": "tool", "message": "no tool named 'nosuch'"}])
    assert run("feedback", "add", "nosuch", "negative") == (2, "error: tool: no tool named 'nosuch'")
    answer.update(errors=[{"field": "tool", "message": "no tool version 'fast_sort@9.9.9'"}])
    assert run("feedback", "add", "fast_sort@9.9.9", "negative") == (2, "error: tool: no tool version 'fast_sort@9.9.9'")
    # not a refusal of what was given, but of the moment: as for anything outside the command, 1
    answer.update(status="unavailable", errors=[{"field": "call_id", "message": "the vector memory is unavailable now"}])
    assert run("feedback", "add", "fast_sort", "negative", "--call", CALL_ID)[0] == 1


def test_feedback_add_says_which_version_a_name_alone_judged(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA F8: during a trial, NAME alone judged the version on trial (25 % of the calls); the help and
    the answer now say it is the version serving most of them."""
    recorded = {"status": "recorded", "feedback": {"tool": "fast_sort", "version": "1.0.0", "value": -1.0, "scenario": "sort numbers"}, "score_now": -25.0}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: recorded)
    out = run("feedback", "add", "fast_sort", "negative")[1]
    assert "for fast_sort@1.0.0; " in out and "(fast_sort alone: fast_sort@1.0.0, the version it serves)" in out
    assert "the version serving most" not in run("feedback", "add", "fast_sort@1.0.0", "negative")[1]
    assert ("the version it serves; during a trial, the version it is tried against: NAME@VERSION "
            "judges the one on trial") in help_of("feedback", "add", param="tool")


def test_weights_say_why_the_last_retrain_left_them_as_they_were(monkeypatch: pytest.MonkeyPatch, stores: ToolRegistry) -> None:
    """QA F9: after a retrain on 33 records only --json said why the weights had not moved."""
    from selection.ports import SelectionWeights

    current = SelectionWeights(version=3, evidence={
        "records": 33, "set_aside": 4, "success_rate": 0.8, "correlations": {"phase": 0.1, "language": 0.25}, "noise": 0.3482,
        "unchanged": "no component correlates positively with success beyond the noise of 33 records (0.35)"})
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: SimpleNamespace(
        weights=lambda: current, weights_history=lambda n: [], last_retrain=lambda: None))
    code, out = run("weights")
    assert code == 0
    assert ("correlation of each component with success: phase +0.10, language +0.25 (noise of 33 records: 0.35; "
            "a component above it steers in proportion, one within it keeps 0.05, one below it none)") in out
    assert "weights left as they were: no component correlates positively with success beyond the noise of 33 records (0.35)" in out
    assert ("4 records set aside (a caller's mistake, or a failure of an outage its version recovered from) left "
            "out") in " ".join(out.split())
    assert "refitted" not in out
    # QA 56a L5: a new version each retrain, each "left as they were": its classifier was refitted.
    refitted = current.model_copy(update={"classifier": "softmax over 12 tools"})
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: SimpleNamespace(
        weights=lambda: refitted, weights_history=lambda n: [refitted, current.model_copy(update={"version": 2})],
        last_retrain=lambda: None))
    assert "beyond the noise of 33 records (0.35) (v3 stored the classifier it refitted)" in " ".join(run("weights")[1].split())


def test_weights_say_the_classifier_is_off_when_the_workers_latest_retrain_found_it_off(
        monkeypatch: pytest.MonkeyPatch, stores: ToolRegistry) -> None:
    """QA 58c L4: with FITTEST_TOOL_CLASSIFIER=false the table named the revision stored before, as in
    use; QA 58d N4: the workers' setting decides, as their retrain found it, not the shell's."""
    from selection.ports import RetrainNote, SelectionWeights
    from workers.tool_classifier import CLASSIFIER_OFF

    current = SelectionWeights(version=7, classifier="a410b5760216", evidence={"records": 20}, updated_at=time.time())
    note: list[RetrainNote | None] = [None]
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: SimpleNamespace(
        weights=lambda: current, weights_history=lambda n: [], last_retrain=lambda: note[0]))
    monkeypatch.setenv("FITTEST_TOOL_CLASSIFIER", "false")  # this shell's setting: not the workers'
    assert "a410b5760216" in run("weights")[1] and "tool classifier: off" not in run("weights")[1]
    note[0] = RetrainNote(at=time.time() + 1, evidence={"records": 20, "classifier": {"unchanged": CLASSIFIER_OFF}})
    out = " ".join(run("weights")[1].split())
    assert "a410b5760216" not in out
    assert "tool classifier: off (FITTEST_TOOL_CLASSIFIER=false): neither refitted nor used by selection" in out


def test_weights_list_as_many_earlier_versions_as_asked_and_the_latest_retrain_that_stored_nothing(
        monkeypatch: pytest.MonkeyPatch, stores: ToolRegistry) -> None:
    """QA AC: `--history N` listed N - 1 earlier versions (the history holds the current one too), and
    a retrain that stored nothing (fewer than 10 records, say) was never told of."""
    from selection.ports import RetrainNote, SelectionWeights
    from tests.fakes_state import InMemoryStateStore

    state = InMemoryStateStore()
    for phase in (0.1, 0.2, 0.3):
        state.set_weights(SelectionWeights(weights={"phase": phase}, evidence={"records": 20}))
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: state)
    assert [w["version"] for w in json.loads(run("weights", "--history", "1", "--json")[1])["history"]] == [2]
    assert [w["version"] for w in json.loads(run("weights", "--history", "5", "--json")[1])["history"]] == [2, 1]
    assert json.loads(run("weights", "--history", "0", "--json")[1])["history"] == []
    assert "left as they were" not in run("weights")[1]

    state.note_retrain(RetrainNote(at=time.time() + 1, evidence={"records": 3, "unchanged": "3 records, fewer than 10"}))
    out = run("weights")[1]
    assert ", 3 records): weights left as they were: 3 records, fewer than 10" in out and "last retrain (" in out, out
    assert json.loads(run("weights", "--json")[1])["last_retrain"]["evidence"]["records"] == 3
    # QA learning F9: the records it set aside were told of the current weights' retrain only.
    state.note_retrain(RetrainNote(at=time.time() + 1.5, evidence={"records": 12, "set_aside": 2,
                                                                    "unchanged": "no component above the noise"}))
    assert ", 12 records, 2 set aside): weights left as they were: no component above the noise" in run("weights")[1]
    state.set_weights(SelectionWeights(weights={"phase": 0.4}, updated_at=time.time() + 2))  # a later retrain stored weights
    assert "left as they were" not in run("weights")[1]


def test_weights_retrain_on_demand_and_say_what_the_retrain_did(monkeypatch: pytest.MonkeyPatch, stores: ToolRegistry) -> None:
    """QA ops: no way to retrain before the beat's first interval (the weights read "never learned")."""
    from selection.ports import SelectionWeights
    from tests.fakes_state import InMemoryStateStore

    state = InMemoryStateStore()
    asked: list[tuple[str, str]] = []

    def retrained(task: str, queue: str, timeout: float, **kwargs: Any) -> dict[str, Any]:
        asked.append((task, queue))
        stored = state.set_weights(SelectionWeights(weights={"history": 1.0}, evidence={"records": 40}))
        return {"changed": True, "version": stored.version, "weights": stored.weights, "evidence": stored.evidence}

    monkeypatch.setattr("workers.state.open_state_store", lambda settings: state)
    monkeypatch.setattr(learning, "_ask", retrained)
    assert "never learned" in run("weights")[1] and asked == []
    code, out = run("weights", "--retrain")
    assert code == 0 and asked == [("retrain_weights", "learning")]
    assert "retrained: weights v1 stored" in out and "SPARC weights v1" in out
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"changed": False, "reason": "another retrain is running"})
    assert "retrained: nothing new stored (another retrain is running)" in run("weights", "--retrain")[1]


@pytest.mark.parametrize(("command", "says"), [
    (["promote", "fast_sort@1.1.0", "1.1.0"], "the version goes in its second argument: NAME VERSION"),
    (["evolve", "fast_sort@1.1.0"], "the version goes in --version VERSION"),
    (["describe", "fast_sort@1.1.0", "Sorts numbers fast."], "the version goes in --version VERSION"),
    (["rollback", "fast_sort@1.1.0"], "this command takes no version: it acts on the version served"),
])
def test_a_name_with_its_version_where_a_command_takes_the_name_alone_says_where_the_version_goes(
        stores: ToolRegistry, command: list[str], says: str) -> None:
    """QA 60d L1: `call`, `show` and `feedback` take NAME@VERSION; these said "no tool named
    'fast_sort@1.1.0'"."""
    code, out = run(*command)
    said = " ".join(out.replace("│", " ").split())  # unboxed
    assert code == 2 and "'fast_sort@1.1.0': give the tool's name alone (fast_sort)" in said and says in said


def test_version_names_the_release_and_its_commit() -> None:
    code, out = run("--version")
    assert code == 0 and re.fullmatch(r"fittest \d+\.\d+\.\d+( \(commit [0-9a-f]{12}(-dirty)?\))?", out), out


def test_a_json_command_that_ends_with_an_error_prints_one_json_document(stores: ToolRegistry) -> None:
    """QA 60d M2: with --json, `show`, `evolve`, `promote`, `rollback`, `describe` and `feedback show`
    printed nothing on stdout when they failed, `call` and `explain` a document: a script could not
    read every end the same way."""
    for command in (["show", "nosuch", "--json"], ["rollback", "fast_sort", "--json"], ["promote", "fast_sort", "9.9.9", "--json"]):
        result = run_cli(*command, reraise=True)
        assert result.exit_code == 2, result.output
        answer = json.loads(result.stdout)
        assert answer["status"] == "error" and answer["exit_code"] == 2 and answer["message"] in " ".join(result.stderr.split())
    shown = run_cli("show", "fast_sort", "--json", reraise=True)  # a document that succeeded is alone
    assert shown.exit_code == 0 and "status" not in json.loads(shown.stdout)
    refused = run_cli("rollback", "fast_sort", reraise=True)  # without --json, nothing on stdout
    assert refused.exit_code == 2 and refused.stdout == ""


def test_rollback_of_a_tool_nobody_serves_says_so(stores: ToolRegistry) -> None:
    assert run("rollback", "nosuch") == (2, "error: no tool named 'nosuch'")


def test_rollback_with_nothing_to_roll_back_is_refused_with_exit_2(stores: ToolRegistry) -> None:
    """QA evolution F9: it exited 1, the code for something outside the command (Redis down), where
    the README gives a refusal of what was asked exit 2."""
    assert run("rollback", "fast_sort") == (2, "error: fast_sort has no promoted version to roll back (the original is served)")


def test_explain_with_nothing_to_rank_says_how_a_call_would_end(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"call_id": "c", "status": "success", "ranking": [], "degraded": []})
    code, out = run("explain", "sort numbers", "--tag", "nosuch")
    assert code == 0 and "no tool matches this scenario, namespace and tags: a call would end with no_candidates" in out
    assert "warning" not in out
    code, out = run("explain", "sort numbers", "--namespace", "fast_srot")
    assert code == 0 and "warning: no tool named fast_srot was ranked: the call was ranked by its scenario alone" in out


def test_explain_refused_by_the_workers_exits_2_as_a_refusal_here_does(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA V: a refusal the workers sent back ended explain with exit code 1, "something outside
    the command", where the same refusal made before asking exits 2."""
    refused = {"call_id": "invalid", "status": "invalid", "errors": [{"field": "context.files", "message": "not a list of paths"}]}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: refused)
    assert run("explain", "sort numbers") == (2, "error: context.files: not a list of paths")
    code, out = run("explain", "sort numbers", "--json")  # QA: 0 with --json, where `call --json` exits 2
    assert code == 2 and '"status": "invalid"' in out


def test_the_tools_table_marks_a_deprecated_version() -> None:
    from workers.cli.tools import ToolRow, tools_table

    rows = [ToolRow(name=n, version="1.0.0", kind="http", quality=1.0, standing=1.0, successes=0, failures=0,
                    deprecated=n == "old_sort") for n in ("fast_sort", "old_sort")]
    with console.capture() as out:
        console.print(tools_table(rows))
    lines = out.get().splitlines()
    assert any("old_sort@1.0.0 (deprecated)" in line for line in lines)
    assert not any("fast_sort@1.0.0 (deprecated)" in line for line in lines)


def test_a_long_error_shows_its_start_and_its_end() -> None:
    traceback = "crash Traceback (most recent call last):\n" + "  File 'x.py', line 1, in f\n" * 40 + "RaggedRowError: line 2 has 3 fields"
    with console.capture() as out:
        show_answer({"call_id": CALL_ID, "status": "failed", "attempts": [
            {"tool": "csv_to_json", "version": "1.0.0", "outcome": "failure", "error_class": "crash",
             "error_message": traceback, "execution_time_ms": 5}]})
    shown = " ".join(out.get().replace("│", " ").split())
    assert "crash crash Traceback" in shown and "RaggedRowError: line 2 has 3 fields" in shown and " … " in shown


def test_show_calls_a_version_promoted_before_another_superseded(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    from selection.models import Promotion

    first = Promotion(namespace="fast_sort", evolved_version="1.1.0", original_version="1.0.0", status="active")
    by_hand = Promotion(namespace="fast_sort", evolved_version="1.0.0", original_version="1.0.0", status="active")
    registry, state, ledger = evolution._stores()
    monkeypatch.setattr(evolution, "_stores", lambda: (registry, SimpleNamespace(
        promotion=lambda ns: by_hand, promotion_history=lambda ns: [first, by_hand], stats_and_breakers=state.stats_and_breakers), ledger))
    code, out = run("show", "fast_sort", "--events", "0")
    assert code == 0 and "1.0.0 active ◀ served" in out and "1.1.0 superseded" in out


def test_show_calls_the_version_a_trial_is_tried_against_so_when_it_is_not_the_parent(stores: ToolRegistry,
                                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 51d N2: 1.2.0, evolved by hand from 1.0.0 while 1.1.0 was active, is tried against 1.1.0,
    which `show` called the "trial's parent"."""
    from selection.models import Promotion

    stores.add(ToolManifest(name="fast_sort", version="1.2.0", parent_version="1.0.0", description="Sorts numbers.", implementation=HTTP))
    active = Promotion(namespace="fast_sort", evolved_version="1.1.0", original_version="1.0.0", status="active")
    trial = Promotion(namespace="fast_sort", evolved_version="1.2.0", original_version="1.0.0", parent_version="1.1.0", status="on_trial")
    registry, state, ledger = evolution._stores()
    monkeypatch.setattr(evolution, "_stores", lambda: (registry, SimpleNamespace(
        promotion=lambda ns: trial, promotion_history=lambda ns: [active, trial], stats_and_breakers=state.stats_and_breakers), ledger))
    code, out = run("show", "fast_sort", "--events", "0")
    assert code == 0 and "1.1.0 tried against ◀ served on the other 75%" in out and "1.2.0 on_trial ◀ served on 25%" in out


def test_explain_shows_a_small_negative_feedback_as_0(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    breakdown = {"source": "semantic", "similarity": 0.5, "quality": 1.0, "feedback": -0.3, "sparc": 0.5, "rationale": "r"}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"call_id": "c", "status": "success", "degraded": [], "ranking": [
        {"key": "fast_sort@1.0.0", "score": 1.0, "probability": 1.0, "breakdown": breakdown}]})
    code, out = run("explain", "sort numbers")
    assert code == 0 and "-0" not in out and " +0 " in out
    assert "selection cache" not in out  # ranked by fresh searches: nothing to say
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"call_id": "c", "status": "success", "degraded": [], "evidence_age_s": 12.5,
                                                           "cache_ttl_s": 30.0, "ranking": [
        {"key": "fast_sort@1.0.0", "score": 1.0, "probability": 1.0, "breakdown": breakdown}]})
    assert ("by searches the selection cache kept for 12.5 s: outcomes since then are not counted yet "
            "(FITTEST_SELECTION_CACHE_TTL_S, 30 s)") in run("explain", "sort numbers")[1]  # QA AD


def test_a_call_retried_after_its_evolution_shows_the_round_that_failed_and_the_evolution() -> None:
    failed = {"tool": "sort_numbers", "version": "1.0.0", "outcome": "failure", "error_class": "timeout",
              "error_message": "no result within 2s", "execution_time_ms": 2000.0}
    retried = {"tool": "sort_numbers", "version": "1.1.0", "outcome": "success", "error_class": None,
               "error_message": None, "execution_time_ms": 3800.0}
    evolution = {"status": "evolved", "parent": "sort_numbers@1.0.0", "version": "1.1.0", "message": "timeout_s 2s -> 8s",
                 "elapsed_s": 6.0, "failed_attempts": [failed]}
    with console.capture() as out:
        show_answer({"call_id": CALL_ID, "status": "success", "tool": "sort_numbers", "version": "1.1.0",
                   "attempts": [retried], "evolution": evolution, "output": {"numbers": [1, 2]}})
    rows = [" ".join(line.replace("│", " ").split()) for line in out.get().splitlines()]
    assert any(r.startswith("1 sort_numbers@1.0.0 failure timeout no result within 2s 2000") for r in rows)
    assert any(r.startswith("evolution evolved sort_numbers@1.0.0 → 1.1.0: timeout_s 2s -> 8s 6000") for r in rows)
    assert any(r.startswith("2 sort_numbers@1.1.0 success") for r in rows)
    with console.capture() as out:  # a call that ended with its evolution has that round as its attempts
        show_answer({"call_id": CALL_ID, "status": "failed", "attempts": [failed],
                   "evolution": {**evolution, "status": "no_fix", "version": None}})
    rows = [" ".join(line.replace("│", " ").split()) for line in out.get().splitlines()]
    assert sum("sort_numbers@1.0.0 failure" in r for r in rows) == 1
    attempt = next(i for i, r in enumerate(rows) if r.startswith("1 sort_numbers@1.0.0 failure"))
    assert rows[attempt + 1].startswith("evolution no_fix")  # the attempt, then what its failure started (QA)


def test_an_evolution_that_made_no_fix_says_why_under_the_table() -> None:
    """QA 62a: "no mutator could propose a version" and "1 candidate(s) failed verification" were
    all the table said; the mutators' notes and the stage each candidate failed at were in --json."""
    failed = {"tool": "kg_convert", "version": "1.0.0", "outcome": "failure", "error_class": "bad_input",
              "error_message": "TypeError", "execution_time_ms": 1.0}
    stages = [{"stage": "static", "passed": True},
              {"stage": "replay", "passed": False, "problems": ['successful input {"pounds": 150} now fails: timeout']}]
    evolution = {"status": "no_fix", "parent": "kg_convert@1.0.0", "message": "1 candidate(s) failed verification",
                 "failed_attempts": [failed], "notes": ["crash: no mutator answers this failure class"],
                 "candidates": [{"mutator": "coerce", "mutation": "input coercion: pounds as int", "outcome": "failed",
                                 "stages": stages},
                                {"mutator": "retry", "mutation": "retry 3 times", "outcome": "skipped"},
                                {"mutator": "coerce", "mutation": "input coercion: pounds as float", "outcome": "skipped",
                                 "reason": "failed before for a similar reason (0.97): rolled back by hand"}]}
    with console.capture() as out:
        show_answer({"call_id": CALL_ID, "status": "failed", "attempts": [failed], "evolution": evolution})
    lines = [line.strip() for line in out.get().splitlines()]
    assert "evolution: crash: no mutator answers this failure class" in lines
    assert ('evolution: input coercion: pounds as int failed replay: successful input {"pounds": 150} now fails: '
            "timeout") in lines
    assert ("evolution: input coercion: pounds as float skipped: failed before for a similar reason (0.97): "
            "rolled back by hand") in lines
    assert not any("retry 3 times" in line for line in lines)  # skipped, with no reason given
    with console.capture() as out:  # an evolution that fixed it has nothing to explain
        show_answer({"call_id": CALL_ID, "status": "failed", "attempts": [failed], "evolution": {**evolution, "status": "evolved"}})
    assert "evolution:" not in out.get()


def test_the_schema_of_a_task_nobody_serves_is_refused_as_a_bad_argument() -> None:
    code, out = run("schema", "bogus")
    assert code == 2 and "error: unknown schema 'bogus' (known: resilient_tool_call, call_tool, record_feedback, record_feedback_reply, explain, explain_reply, feedback_report, feedback_report_reply, recommend, recommend_reply, prepare_evolution, prepare_evolution_reply, retrain_weights_reply, forget, forget_reply, invalid_reply, result, call_output, tools_output, tools_refused_output, show_output, promote_output, health_output, settings_output, weights_output, test_output, feedback_show_output)" in out
    code, out = run("schema", "record_feedback")
    assert code == 0 and '"call_id"' in out  # a judgement may name the call it judges
    # QA 59a L2: NAME_reply, as the README and --help name answers, of a call is its result
    assert [json.loads(run("schema", name)[1])["title"] for name in ("resilient_tool_call_reply", "call_tool_reply")] == [
        "CallResult", "CallResult"]


def test_the_schema_of_what_call_and_result_print_names_every_status_they_print() -> None:
    """QA 60d M2: `pending`, `unknown`, `revoked`... were in no schema a script could check against."""
    schema = json.loads(run_cli("schema", "call_output").output)

    def statuses(node: Any) -> set[str]:
        if isinstance(node, dict):
            found = set(node.get("enum", [])) | ({node["const"]} if "const" in node else set()) if "status" == node.get("title", "").lower() else set()
            return found.union(*(statuses(v) for v in node.values()))
        return set().union(*(statuses(v) for v in node)) if isinstance(node, list) else set()

    assert statuses(schema) == {"success", "failed", "invalid", "no_candidates", "pending", "unknown", "revoked", "error",
                                "not_a_call", "expired"}


def test_a_call_served_past_a_held_back_version_names_it() -> None:
    served = {"tool": "fast_sort", "version": "1.0.0", "outcome": "success", "execution_time_ms": 3.0}
    with console.capture() as out:
        show_answer({"call_id": CALL_ID, "status": "success", "tool": "fast_sort", "version": "1.0.0", "attempts": [served],
                   "held_back": ["sort_numbers@1.0.0"], "output": {"numbers": [1, 2]}})
    assert "not tried, their circuit breaker was open: sort_numbers@1.0.0" in out.get()
    with console.capture() as out:  # a call that tried nothing says so in its message, once
        show_answer({"call_id": CALL_ID, "status": "no_candidates", "attempts": [], "held_back": ["sort_numbers@1.0.0"],
                   "message": "every version that matches is held back by its circuit breaker (sort_numbers@1.0.0)"})
    assert out.get().count("sort_numbers@1.0.0") == 1


def test_explain_names_a_namespace_held_back_by_its_breaker_rather_than_a_typo(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA: a namespace call whose only version's breaker was open said 'no tool named compress_logs
    was ranked', the warning for a typo."""
    breakdown = {"source": "semantic", "similarity": 0.5, "quality": 1.0, "feedback": 0.0, "sparc": 0.5, "rationale": "r"}
    note = "fast_sort@1.0.0 held back by its circuit breaker: the call was ranked by its scenario alone"  # the workers'
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"call_id": "c", "status": "success", "degraded": [], "held_back": ["fast_sort@1.0.0"],
                                                         "notes": [note],
                                                         "ranking": [{"key": "sort_numbers@1.0.0", "score": 1.0,
                                                                      "probability": 1.0, "breakdown": breakdown}]})
    code, out = run("explain", "sort numbers", "--namespace", "fast_sort")
    assert code == 0 and "no tool named" not in out
    assert out.count(f"warning: {note}") == 1
    assert "held back, their circuit breaker open: fast_sort@1.0.0" in out


def test_the_tools_list_shows_each_circuit_breaker() -> None:
    """QA: no command showed that a version was held back by its open breaker."""
    from tests.fakes_state import InMemoryStateStore
    from workers.cli.tools import tool_rows, tools_table

    manifests = [ToolManifest(name=n, description=n, implementation=HTTP) for n in ("fast_sort", "old_sort")]
    state = InMemoryStateStore()
    for _ in range(3):
        state.record_run("old_sort@1.0.0", 1.0, False, threshold=3, cooldown_s=60)
    rows = tool_rows(manifests, state, trial_runs=5)
    assert [(r.name, r.breaker, r.failures) for r in rows] == [("fast_sort", "closed", 0), ("old_sort", "open", 0)]
    with console.capture() as out:
        console.print(tools_table(rows))
    assert any("old_sort@1.0.0" in line and " open " in line for line in out.get().splitlines())


def test_the_tools_list_marks_a_tool_new_to_the_running_system_while_its_trial_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fakes_state import InMemoryStateStore
    from workers.cli.tools import tool_rows, tools_table

    monkeypatch.setattr(console, "_width", 250)  # each mark in one line (a narrower terminal wraps them under the key)

    manifests = [ToolManifest(name=n, description=n, implementation=HTTP) for n in ("fast_sort", "new_sort")]
    state = InMemoryStateStore()
    state.note_namespaces(["fast_sort"], now=1.0)
    state.note_namespaces(["fast_sort", "new_sort"], now=2.0)
    rows = tool_rows(manifests, state, trial_runs=2)
    assert [(r.name, r.newcomer) for r in rows] == [("fast_sort", False), ("new_sort", True)]
    with console.capture() as out:
        console.print(tools_table(rows))
    assert any("new_sort@1.0.0 (new tool: tried first on a share of its calls)" in line for line in out.get().splitlines())
    state.record_run("new_sort@1.0.0", 1.0, False, 1, 60.0)  # its breaker open: not tried at all meanwhile (QA 48 recheck)
    assert [r.newcomer for r in tool_rows(manifests, state, trial_runs=2)] == [False, False]
    state.record_run("new_sort@1.0.0", 1.0, True, 1, 60.0)
    state.record_successes([("new_sort@1.0.0", "a1"), ("new_sort@1.0.0", "a2")])
    assert [r.newcomer for r in tool_rows(manifests, state, trial_runs=2)] == [False, False]  # its runs are done
    # The evolved version its promotion puts on trial is marked as such, and only it (QA: nothing was).
    from selection.models import Promotion

    evolved = ToolManifest(name="fast_sort", version="1.1.0", parent_version="1.0.0", description="fast_sort", implementation=HTTP)
    state.promote(Promotion(namespace="fast_sort", evolved_version="1.1.0", original_version="1.0.0"))
    rows = tool_rows([*manifests, evolved], state, trial_runs=2)
    assert [(r.version, r.on_trial) for r in rows if r.name == "fast_sort"] == [("1.0.0", False), ("1.1.0", True)]
    with console.capture() as out:
        console.print(tools_table(rows))
    assert any("fast_sort@1.1.0 (on trial against 1.0.0)" in line for line in out.get().splitlines())
    # ...and, its trial passed, as the version served (QA 62a: only `fittest show` said which one)
    state.promote(Promotion(namespace="fast_sort", evolved_version="1.1.0", original_version="1.0.0", status="active"))
    rows = tool_rows([*manifests, evolved], state, trial_runs=2)
    assert [(r.version, r.on_trial, r.promoted) for r in rows if r.name == "fast_sort"] == [("1.0.0", False, False),
                                                                                          ("1.1.0", False, True)]
    with console.capture() as out:
        console.print(tools_table(rows))
    assert any("fast_sort@1.1.0 (promoted: served)" in line for line in out.get().splitlines())
    # A version rolled back is marked as not served (QA README L6: it was listed like any other).
    state.promote(Promotion(namespace="fast_sort", evolved_version="1.1.0", original_version="1.0.0", status="rolled_back"))
    rows = tool_rows([*manifests, evolved], state, trial_runs=2)
    assert [(r.version, r.on_trial, r.rolled_back) for r in rows if r.name == "fast_sort"] \
        == [("1.0.0", False, False), ("1.1.0", False, True)]
    assert not any(r.promoted for r in rows)  # 1.0.0 is served again, unmarked as the original is
    with console.capture() as out:
        console.print(tools_table(rows))
    assert any("fast_sort@1.1.0 (rolled back: not served)" in line for line in out.get().splitlines())


def test_a_new_tool_is_marked_at_the_version_it_serves_until_its_versions_together_ran_the_trials_runs() -> None:
    """QA 50: both versions of a new tool read "new tool: tried first on a share of its calls" after
    the tool had run 9 times, and the one its promotion no longer served too; selection counts a
    newcomer's runs over its versions and tries the version it serves."""
    from selection.models import Promotion
    from tests.fakes_state import InMemoryStateStore
    from workers.cli.tools import tool_rows

    manifests = [ToolManifest(name="new_sort", description="sort", implementation=HTTP),
                 ToolManifest(name="new_sort", version="1.1.0", parent_version="1.0.0", description="sort", implementation=HTTP)]
    state = InMemoryStateStore()
    state.note_namespaces(["fast_sort"], now=1.0)
    state.note_namespaces(["fast_sort", "new_sort"], now=2.0)

    def marked() -> list[str]:
        return [r.version for r in tool_rows(manifests[::-1], state, trial_runs=3) if r.newcomer]

    assert marked() == ["1.0.0"]  # the original, which it serves
    state.promote(Promotion(namespace="new_sort", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0"))
    assert marked() == ["1.1.0", "1.0.0"]  # on trial: each side serves its share first
    state.promote(Promotion(namespace="new_sort", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0",
                            status="active"))
    assert marked() == ["1.1.0"]
    state.record_successes([("new_sort@1.0.0", "a1"), ("new_sort@1.1.0", "a2")])
    assert marked() == ["1.1.0"]
    state.record_successes([("new_sort@1.0.0", "a3")])
    assert marked() == []  # 3 runs of the tool, over its versions


def test_a_deprecated_version_of_a_new_tool_is_not_marked_on_trial() -> None:
    """QA U: `deprecated: true` took reverse_text out of the rankings, and `fittest tools` still
    printed it "(deprecated) (new: on trial)"."""
    from tests.fakes_state import InMemoryStateStore
    from workers.cli.tools import tool_rows

    manifests = [ToolManifest(name="new_sort", description="new_sort", implementation=HTTP),
                 ToolManifest(name="new_sort", version="1.1.0", description="new_sort", implementation=HTTP, deprecated=True)]
    state = InMemoryStateStore()
    state.note_namespaces(["fast_sort"], now=1.0)
    state.note_namespaces(["fast_sort", "new_sort"], now=2.0)
    rows = tool_rows(manifests, state, trial_runs=2)
    assert [(r.version, r.deprecated, r.newcomer) for r in rows] == [("1.0.0", False, True), ("1.1.0", True, False)]


def never_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither `call` nor `explain` may send anything (the machine's Redis must not get the call)."""
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: pytest.fail("a refused payload must not be sent"))
    monkeypatch.setattr("workers.client.CallSender", lambda *a, **k: pytest.fail("a refused payload must not be sent"))


def test_call_and_explain_refuse_a_bad_payload_alike_before_sending(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA: a bad --context exited 2 from `call` but 1 from `explain`, whose message read "context:
    Value error, context.phase: ..."; a negative --timeout was taken and misread."""
    never_sent(monkeypatch)
    for command in ("call", "explain"):
        code, out = run(command, "sort numbers", "--context", '{"phase": "lunch"}')
        assert code == 2 and "context: context.phase" in out and "Value error" not in out, (command, out)
        code, out = run(command, "sort numbers", "-n", "fast_sort@")
        assert code == 2 and "names no version" in out
    code, out = run("call", "sort numbers", "--timeout", "-1")
    assert code == 2 and "--timeout" in out


def test_a_refused_payload_is_printed_as_the_workers_invalid_result_with_json(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """QA 59a L7: `fittest call --json` (for scripts) printed nothing on stdout when it refused the
    payload, where the workers' refusal of the same payload is a JSON `invalid` result."""
    never_sent(monkeypatch)
    for command in ("call", "explain"):
        for args, field in ((["--input", "[1]"], "input"), (["--context", '{"phase": "lunch"}'], "context")):
            result = run_cli(command, "sort numbers", *args, "--json")
            assert result.exit_code == 2, result.output
            printed = json.loads(result.stdout)
            assert printed["status"] == "invalid" and [e["field"] for e in printed["errors"]] == [field], printed


def test_an_input_over_the_limit_is_refused_before_it_is_sent_and_after_alike(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA: a 1.1 MB input was sent, and the workers' refusal exited 1 (--help says 2)."""
    from workers.settings import Settings

    monkeypatch.setattr("workers.settings.get_settings", lambda: Settings(input_limit_bytes=1024))
    never_sent(monkeypatch)
    for command in ("call", "explain"):
        code, out = run(command, "reverse this text", "--input", '{"text": "' + "x" * 2000 + '"}')
        assert code == 2 and "input: input is 2,012 bytes of JSON; the limit is 1,024 (FITTEST_INPUT_LIMIT_BYTES)" in out, out
    refused_there = {"call_id": CALL_ID, "status": "invalid", "attempts": [], "errors": [
        {"field": "input", "type": "too_large", "message": "input is 2,012 bytes of JSON; the limit is 1,024"}]}
    assert exit_code_of(refused_there) == 2 and exit_code_of({"call_id": "c", "status": "failed"}) == 1 and exit_code_of({"call_id": "c", "status": "success"}) == 0


def test_a_version_the_namespace_does_not_have_is_refused_by_call_and_explain(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA AA: `call -n fast_sort@9.9.9` exited 1 and `explain` 0, where every other command refuses
    a version nobody serves with exit code 2."""

    no_version = {"call_id": "c", "status": "no_candidates", "ranking": [],
                  "message": "fast_sort has no version 9.9.9 (it has 1.0.0)", "no_candidates_reason": "no_such_version"}
    no_match = {**no_version, "message": "no tool matches this scenario, namespace and tags", "no_candidates_reason": "no_match"}
    assert exit_code_of(no_version) == 2
    assert exit_code_of(no_match) == 1
    # A result a worker from before the reason stored (results are kept 24 h) says it in words only.
    assert exit_code_of({k: v for k, v in no_version.items() if k != "no_candidates_reason"}) == 2
    assert exit_code_of({k: v for k, v in no_match.items() if k != "no_candidates_reason"}) == 1
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: no_version)
    for json_out in ([], ["--json"]):
        code, out = run("explain", "sort these", "-n", "fast_sort@9.9.9", *json_out)
        assert code == 2 and "fast_sort has no version 9.9.9" in out, out
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: no_match)
    assert run("explain", "sort these", "-n", "fast_sort")[0] == 0  # nothing matched: an answer, not a refusal


def test_a_namespace_option_may_name_a_version(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA: `fittest call` had no way to ask for a version; `-n fast_sort@1.0.0` was refused."""
    asked: dict[str, Any] = {}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: asked.update(k) or {"call_id": "c", "status": "success", "ranking": [], "degraded": []})
    run("explain", "sort numbers", "-n", "fast_sort@1.1.0")
    assert asked["namespace"] == "fast_sort" and asked["version"] == "1.1.0"


def test_a_version_without_its_namespace_is_refused() -> None:
    from pydantic import ValidationError

    from selection.models import CallRequest, FieldError, field_errors

    with pytest.raises(ValidationError) as refused:
        CallRequest(scenario="sort numbers", version="1.0.0")
    assert field_errors(refused.value)[0] == FieldError(
        field="version", type="value_error", message="version 1.0.0 is given without namespace: name the tool it is a version of")


def test_explain_shows_the_context_as_analysed_and_takes_the_calls_input(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA: explain could not be given the call's input (its complexity came out 0.00 where the
    call's was 0.16), nor did it show which context values were detected and which given."""
    asked: dict[str, Any] = {}
    context = {"phase": "refinement", "languages": ["python"], "complexity": 0.16, "task_type": "bug_fix", "testing": "none",
               "source": {"phase": "explicit", "languages": "detected", "complexity": "detected", "task_type": "detected"}}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: asked.update(k) or {
        "call_id": "c", "status": "success", "ranking": [], "degraded": [], "context": context})
    code, out = run("explain", "fix this python bug", "--input", '{"code": "def f():\\n  return 1"}',
                    "--context", '{"phase": "refinement"}')
    assert code == 0 and asked["input"] == {"code": "def f():\n  return 1"}
    assert ("context as analysed: phase refinement (explicit); languages python (detected); complexity 0.16 (detected); "
            "task_type bug_fix (detected); testing none (default)") in out


def test_a_version_that_does_not_exist_is_not_taken_for_a_typo_of_the_tool(stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"status": "no_candidates", "ranking": [], "degraded": [],
                                                         "message": "fast_sort has no version 9.0.0 (it has 1.0.0, 1.1.0)",
                                                         "no_candidates_reason": "no_such_version"})
    code, out = run("explain", "sort numbers", "-n", "fast_sort@9.0.0")
    assert "fast_sort has no version 9.0.0 (it has 1.0.0, 1.1.0)" in out and "no tool named" not in out


def test_a_metrics_port_out_of_range_is_refused_as_a_bad_option_not_a_traceback() -> None:
    """FITTEST_METRICS_PORT=70000 is refused by the settings; --port 70000 ended in an OverflowError
    traceback from the socket's bind."""
    code, out = run("metrics", "--port", "70000")
    assert code == 2 and "Traceback" not in out and "--port" in out


def test_text_cut_to_fit_a_column_says_it_was_cut() -> None:
    """QA AA: `fittest show` cut "...and list its most frequent words" to "...and list it"."""
    from workers.cli.common import shortened

    text = "Count the words, characters, lines and sentences of a text and list its most frequent words."
    assert shortened(text, 70) == text[:69].rstrip() + "…" and len(shortened(text, 70)) <= 70
    assert shortened("short", 70) == "short"


def test_the_tools_list_counts_refused_inputs_apart_from_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA ops: a tool whose failures were all callers' mistakes read as a failing tool."""
    from selection.models import FailureCount, Severity
    from tests.fakes_state import InMemoryStateStore
    from workers.cli.tools import tool_rows, tools_table

    monkeypatch.setattr(console, "_width", 250)  # each note in one line (a narrower terminal wraps them)

    state = InMemoryStateStore()
    for i in range(2):
        state.mark_failure("hash_text@1.0.0", f"a{i}", Severity.low, FailureCount.refused_input)
    rows = tool_rows([ToolManifest(name="hash_text", description="hash text", implementation=HTTP)], state, trial_runs=5)
    assert (rows[0].failures, rows[0].refused_inputs, rows[0].quality) == (0, 2, 1.0)
    with console.capture() as out:
        console.print(tools_table(rows))
    assert "0 (+2 refused inputs)" in out.get() and "in a row" not in out.get()
    for i in range(2, 5):  # five in a row since its last success: its refusals count again (QA final: nothing said so)
        state.mark_failure("hash_text@1.0.0", f"a{i}", Severity.low, FailureCount.refused_input)
    rows = tool_rows([ToolManifest(name="hash_text", description="hash text", implementation=HTTP)], state, trial_runs=5)
    with console.capture() as out:
        console.print(tools_table(rows))
    assert "(the last 5 in a row: no longer taken for callers' mistakes)" in " ".join(out.get().split())


def test_the_tools_list_shows_the_standing_selection_ranks_by_beside_the_quality() -> None:
    """QA onboarding L1: a tool that succeeds 2 times in 3 showed quality 0.00 and nothing else, while
    the learned policy ranked it by 0.66 (`fittest explain` said so): an operator took it for dead."""
    from selection.models import Severity
    from tests.fakes_state import InMemoryStateStore
    from workers.cli.tools import tool_rows, tools_table

    state = InMemoryStateStore()
    state.record_successes([("add_numbers@1.0.0", f"s{i}") for i in range(27)])
    for i in range(13):
        state.mark_failure("add_numbers@1.0.0", f"f{i}", Severity.high)
    rows = tool_rows([ToolManifest(name="add_numbers", description="add numbers", implementation=HTTP)], state, trial_runs=5)
    assert (rows[0].quality, rows[0].standing) == (0.0, round(27 / 41, 4))
    with console.capture() as out:
        console.print(tools_table(rows))
    said = " ".join(out.get().split())
    row = next(line for line in out.get().splitlines() if "add_numbers" in line)
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    at = cells.index("0.00")  # quality, standing, successes, failures side by side (review: an `or` checked only two)
    assert cells[at:at + 4] == ["0.00", "0.66", "27", "13"], row
    assert "standing: the quality given back by the version's share of successes" in said


def test_up_refuses_a_role_the_procfile_does_not_have_as_a_bad_argument() -> None:
    """`up --without nosuch` exited 1, the code of a stack that could not start, not of a bad argument."""
    assert run("up", "--without", "nosuch") == (
        2, "error: no Procfile role named nosuch (roles: memory, executor, evolver, beat, flower, metrics, toolserver)")


def test_a_call_table_says_does_such_jobs_only_of_the_first_refusal_set_aside() -> None:
    """Review: every flagged attempt read "(it does such jobs: check the input)", also the one that
    only refused the same input after it."""
    attempts = [{"tool": tool, "version": "1.0.0", "outcome": "failure", "error_class": "bad_input",
                 "error_message": "KeyError: 'text'", "callers_mistake": True} for tool in ("hash_text", "sha_sum")]
    with console.capture() as out:
        show_answer({"call_id": "c", "status": "failed", "attempts": attempts, "message": "check the input"})
    lines = out.get().splitlines()
    assert any("hash_text@1.0.0" in line and "(taken for the caller's mistake: check the input)" in line for line in lines)
    assert any("sha_sum@1.0.0" in line and "(the same input, set aside)" in line for line in lines)
    took = [attempts[0], {"tool": "lower_text", "version": "1.0.0", "outcome": "success", "took_a_refused_input": True}]
    with console.capture() as out:
        show_answer({"call_id": "c", "status": "success", "tool": "lower_text", "version": "1.0.0", "attempts": took})
    assert any("lower_text@1.0.0" in line and "(set aside: it has done no such job; check its output)" in line
               for line in out.get().splitlines())  # QA final: it read just "success"


def test_a_call_table_marks_an_attempt_run_isolated_after_a_death(monkeypatch: pytest.MonkeyPatch) -> None:
    """An attempt whose worker process died comes back to run its python tool in a process of its
    own: its row says so, or the slower run and its sandbox's limits would be unexplained."""
    monkeypatch.setattr(console, "_width", 200)
    attempts = [{"tool": "nap", "version": "1.0.0", "outcome": "success", "isolated": True}]
    with console.capture() as out:
        show_answer({"call_id": "c", "status": "success", "tool": "nap", "version": "1.0.0", "attempts": attempts})
    assert any("nap@1.0.0" in line and "(run isolated)" in line for line in out.get().splitlines())


def test_the_tools_list_keeps_its_numbers_readable_beside_long_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA recheck N4: a version marked new and on trial squeezed quality, standing and successes to
    "…" in a 140-column terminal; the marks and notes wrap under their cells instead."""
    from workers.cli.tools import ToolRow, tools_table

    monkeypatch.setattr(console, "_width", 100)
    rows = [ToolRow(name="qa_power_fast", version="1.1.0", kind="python", quality=0.5, standing=0.8125,
                    successes=10, failures=5, refused_inputs=3, refused_in_a_row=6, tags=["math"],
                    newcomer=True, on_trial=True, breaker="half_open")]
    with console.capture() as out:
        console.print(tools_table(rows))
    first = next(line for line in out.get().splitlines() if "qa_power_fast@1.1.0" in line)
    assert [cell.strip() for cell in first.split("│")[1:6]] == ["qa_power_fast@1.1.0", "python", "0.50", "0.81", "10"], first


def test_an_answer_the_cli_cannot_read_is_printed_as_it_came_and_the_command_exits_3(
        stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Review #3: the display read the workers' answer key by key, so an answer of another release
    showed in part, or raised KeyError; QA: exit 1 could not be told from a call that did not succeed."""
    answer = {"call_id": "c", "status": "paused", "ranking": [{"key": "t@1.0.0"}]}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: answer)
    code, said = run("explain", "sort numbers")
    assert code == 3 and '{ "call_id": "c", "status": "paused", "ranking": [ { "key": "t@1.0.0" } ] }' in said
    assert "error: the workers' answer does not read as ExplainResult (4 field(s): status: Input should be" in said
    assert "are this client and the workers the same release?" in said


@pytest.mark.parametrize("command, model", [
    (("feedback", "add", "fast_sort", "positive", "--scenario", "sort numbers"), "FeedbackReply"),
    (("feedback", "show", "fast_sort"), "FeedbackReport"),
    (("weights", "--retrain"), "RetrainResult"),
    (("recommend",), "RecommendationReport"),
    (("evolve", "fast_sort"), "EvolutionReport"),
])
def test_every_command_tells_an_answer_it_cannot_read_from_a_refusal(
        command: tuple[str, ...], model: str, stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: only `call`, `result` and `explain` read an answer of workers of another release
    as such; these five ended in pydantic's traceback."""
    answer = {"status": "paused", "tool": 7}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: answer)
    monkeypatch.setattr(learning, "_ask_or_none", lambda *a, **k: answer)
    monkeypatch.setattr("workers.client.CallSender.send", lambda self, *a, **k: None)
    monkeypatch.setattr("workers.client.CallSender.wait", lambda *a, **k: answer)
    monkeypatch.setattr("workers.client.CallSender.ask_within", lambda *a, **k: answer)
    code, said = run(*command)
    assert code == 3 and '"status": "paused"' in said, said
    assert f"error: the workers' answer does not read as {model} (" in said, said


@pytest.mark.parametrize("taken, evolver", [(False, True), (True, True), (True, False)])
def test_evolve_tells_a_request_no_worker_took_from_an_evolution_that_goes_on(
        taken: bool, evolver: bool, stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA 49: both said "no answer from the workers ...: are they running?". One no worker took
    within --timeout expires undone, and may be sent again; one a worker took goes on, and sent
    again would evolve twice; QA 50d: unless no evolver runs, when it waits in its queue."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.client import NotDone
    from workers.health import WorkerHealth

    answers = {"evolver@h": WorkerHealth(queues=["evolution"])} if evolver else {}
    monkeypatch.setattr("workers.health.ask_workers", lambda *a, **k: {"memory@h": WorkerHealth(queues=["selection"]), **answers})

    def ask_within(self: object, task: str, timeout: float, **kwargs: object) -> dict[str, object]:
        assert (task, kwargs["queue"], kwargs["namespace"]) == ("prepare_evolution", "selection", "fast_sort")
        raise CeleryTimeout("still running") if taken else NotDone(task, timeout)

    monkeypatch.setattr("workers.client.CallSender.ask_within", ask_within)
    code, said = run("evolve", "fast_sort", "--timeout", "2")
    assert code == 1, said
    if taken and not evolver:
        assert ("the evolution of fast_sort waits in the evolution queue: no evolver runs (`fittest up` starts one, "
                "`fittest health` checks them); it runs once one does") in " ".join(said.split()), said
    elif taken:
        assert ("the evolution of fast_sort goes on in the workers past the 2 s waited for its report: "
                "`fittest show fast_sort` shows the version it makes, and its changelog the outcome") in said, said
    else:
        assert ("no worker took the evolution of fast_sort within 2 s: is the selection worker running (`fittest up`)? "
                "Nothing was evolved: send it again once one runs") in said, said


def test_an_answer_to_a_call_sent_that_reads_as_no_calls_is_unreadable_not_another_tasks(
        stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA recheck 47: the answer to a call `fittest call` had just sent, without call_id and status,
    was told as "not a call's id" (exit 1); what `fittest result` is given may be another task's
    id, but a call sent here is a call."""
    from types import SimpleNamespace

    answer = {"outcome": "done", "tool": 7}
    monkeypatch.setattr("workers.client.CallSender.send", lambda self, *a, **k: SimpleNamespace(id="call-1"))
    monkeypatch.setattr("workers.client.CallSender.wait", lambda *a, **k: answer)
    code, said = run("call", "sort numbers", "--timeout", "1")
    assert code == 3 and '"outcome": "done"' in said, said
    assert "error: call call-1: the workers' answer does not read as a call's (no call_id and status)" in said, said


def test_an_error_a_task_raised_in_its_worker_is_told_in_one_line(
        stores: ToolRegistry, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """QA recheck 47: a task that raised in its worker (or that workers of another release lack)
    ended `explain`, `recommend` and `evolve` with the worker's traceback."""
    from celery import Celery

    from workers.cli import main, operator_error
    from workers.cli.common import WorkerFailed

    app = Celery("t", backend="cache+memory://")
    app.backend.mark_as_failure("explain-1", KeyError("fittest.explain"))
    monkeypatch.setattr("workers.client.CallSender.ask_within",
                        lambda self, task, timeout, **k: CallSender.wait(app.AsyncResult("explain-1"), 1))
    with pytest.raises(WorkerFailed) as raised:
        run_cli("explain", "sort numbers", reraise=True)
    assert operator_error(raised.value) == ("the workers' fittest.explain ended with an error, not an answer: KeyError: "
                                            "'fittest.explain' (are this client and the workers the same release?)")
    monkeypatch.setattr("sys.argv", ["fittest", "explain", "sort numbers"])
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 1 and "Traceback" not in capsys.readouterr().err


def test_health_refuses_a_timeout_it_could_not_wait() -> None:
    """QA recheck 47 F2: `health --timeout inf` reported a healthy stack unhealthy (OverflowError), and
    1e9 ended in a traceback: it waits its whole timeout for the workers' answers."""
    for value in ("inf", "1e9"):
        result = run_cli("health", "--timeout", value)
        assert result.exit_code == 2 and "Invalid value for '--timeout'" in result.output, result.output


def test_an_older_result_shows_no_made_up_weights_version_nor_a_parent_it_does_not_name() -> None:
    """QA: a result without `weights_version` said "SPARC weights v0"; an evolution without its
    parent read ": no verified version"."""
    ranked = {"key": "sort_numbers@1.0.0", "probability": 1.0, "score": 1.0, "breakdown": {}}
    failed = {"tool": "sort_numbers", "version": "1.0.0", "outcome": "failure", "error_class": "crash"}
    with console.capture() as out:
        show_answer({"call_id": "c", "status": "failed", "ranking": [ranked], "attempts": [failed],
                     "evolution": {"status": "no_fix", "message": "no verified version", "failed_attempts": [failed]}})
    rows = [" ".join(line.replace("│", " ").split()) for line in out.get().splitlines()]
    assert any(r.startswith("evolution no_fix no verified version") for r in rows), rows
    assert "ranked: sort_numbers@1.0.0 (p=1.00)" in rows and not any("SPARC weights" in r for r in rows)
    with console.capture() as out:  # QA recheck N4: a version and no parent read "→ 1.0.1"
        show_answer({"call_id": "c", "status": "success", "attempts": [failed],
                     "evolution": {"status": "evolved", "version": "1.0.1", "message": "new version"}})
    assert any(" ".join(line.replace("│", " ").split()).startswith("evolution evolved 1.0.1: new version")
               for line in out.get().splitlines())


def test_control_characters_in_what_the_cli_prints_are_shown_as_escapes() -> None:
    """QA: an ANSI escape in a tool's message reached the operator's terminal as it was."""
    with console.capture() as out:
        show_answer({"call_id": "c", "status": "failed", "message": "crash \x1b[2J\x1b[31mred\x07 end\nnext\tline"})
    assert "crash \\x1b[2J\\x1b[31mred\\x07 end" in out.get() and "\x1b" not in out.get() and "\nnext" in out.get()  # newline and tab kept


def test_an_error_is_one_line_however_long_when_written_to_a_pipe() -> None:
    from workers.cli.common import fail

    message = "the workers' answer does not read as CallResult " + "because of a long list of fields, " * 10
    with err_console.capture() as err, pytest.raises(typer.Exit):
        fail(message)
    assert err.get() == f"error: {message}\n"


def test_ctrl_c_while_the_cli_imports_says_nothing_was_done(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """QA 60e N6: Ctrl-C in the second the CLI takes to import ended in a traceback from inside an
    import; the console script says nothing was done, and ends as SIGINT would (130)."""
    import builtins

    from workers import console_script

    real_import = builtins.__import__

    def interrupted(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "workers.cli":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as ended:
        console_script.main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == "stopped before the command started: nothing was done\n"


def test_weights_history_says_what_each_version_changed(monkeypatch: pytest.MonkeyPatch, stores: ToolRegistry) -> None:
    """QA 63b: v2 to v14 showed the same weights, and nothing said why their versions moved (each
    retrain stored the tool classifier it refitted)."""
    from selection.ports import SelectionWeights
    from tests.fakes_state import InMemoryStateStore

    state = InMemoryStateStore()
    for history, revision in ((0.8, "rev-a"), (0.8, "rev-b"), (0.6, "rev-c")):
        state.set_weights(SelectionWeights(weights={**SelectionWeights().weights, "history": history}, classifier=revision))
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: state)
    assert "the same weights as the version before, with the tool classifier refitted: v2" in " ".join(run("weights")[1].split())
    assert "refitted:" not in run("weights", "--history", "0")[1]  # v3 changed its weights; v2 is not listed

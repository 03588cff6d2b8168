"""What users, tools and the stores wrote is printed as it is written.

Rich reads `[...]` as markup wherever the CLI prints (console.print, table titles and cells, tree
labels): a tool error that repeats an input `[/.]` crashed `fittest call`, a feedback reason
`oops [/x]` crashed every later `fittest feedback show`, and `[a-z]` in a scenario or a manifest
error's regex vanished. Each test feeds such texts through the real rendering code, without
services (the check that Redis answers and the workers' answers are stood in for).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
from rich.text import Text

import workers.cli as cli
from selection.models import CallResult
from selection.ports import ToolStats
from tests.conftest import run_cli
from workers.cli import calls, evolution, learning, tools
from workers.cli.common import console, err_console, fail, literal

# What rich would take for markup: a closing tag that matches nothing, styles, a regex's classes,
# the empty closing tag, a trailing backslash (which escapes the markup after it) and an emoji code.
TRICKY = [
    "[/.]",
    "[red]wrong[/red]",
    "'^[a-z][a-z0-9_]{0,63}$'",
    "sort [a-z] numbers [/]",
    "oops [/x]",
    "ends with backslash \\",
    ":warning:",
]
WIDE = 1000  # no table cell is folded, whatever the terminal


@pytest.fixture(autouse=True)
def wide_consoles(monkeypatch: pytest.MonkeyPatch) -> None:
    for c in (console, err_console):
        monkeypatch.setattr(c, "width", WIDE)


@pytest.fixture(autouse=True)
def own_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process runtime a command builds here, from these tests' stand-in settings, goes with the
    test: a later test in the same process (test_ops' `tools`) was handed it."""
    import workers.runtime

    monkeypatch.setattr(workers.runtime, "_runtime", None)


@pytest.fixture
def redis_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check every Redis command makes first passes without a Redis."""
    monkeypatch.setattr("workers.redis_connection.probe_client", lambda *a, **k: SimpleNamespace(
        ping=lambda: True, close=lambda: None, exists=lambda key: 1))  # a stack is served under the prefix


def plain(output: str) -> str:
    return Text.from_ansi(output).plain


def printed(action: Callable[[], object]) -> str:
    """What `action` printed on the CLI's consoles, stdout then stderr, as plain text. A markup
    error propagates: the test fails on it."""
    with console.capture() as out, err_console.capture() as err:
        try:
            action()
        except (typer.Exit, SystemExit):
            pass
    return plain(out.get() + err.get())


def invoke(args: list[str]) -> str:
    return plain(run_cli(*args, reraise=True).output)


def assert_shown(output: str, *texts: str) -> None:
    for text in texts:
        assert text in output, f"{text!r} is not printed as written in:\n{output}"


# --------------------------------------------------------------------------------------- helpers
def test_literal_prints_any_text_as_written_wherever_it_is_put() -> None:
    texts = [*TRICKY, "\\", "two \\\\", "\\[red]x", "[bold", ""]
    for text in texts:
        for template in ("{}", "[dim]{}[/dim]", "[bold]{}[/bold] after", "before {} [dim]x[/dim]"):
            out = printed(lambda: console.print(template.format(literal(text)), highlight=False))
            expected = template.replace("[dim]", "").replace("[/dim]", "").replace("[bold]", "").replace("[/bold]", "")
            assert out == expected.format(text) + "\n"


def test_fail_and_the_operator_errors_print_their_message_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.stack import StackError

    for text in TRICKY:
        assert_shown(printed(lambda: fail(f"--input is not valid JSON: {text}")), f"error: --input is not valid JSON: {text}")

    def stack_fails() -> None:
        raise StackError(f"redis-server did not start: {' '.join(TRICKY)}")

    monkeypatch.setattr(cli, "app", stack_fails)
    assert_shown(printed(cli.main), f"error: redis-server did not start: {' '.join(TRICKY)}")


# --------------------------------------------------------------------------------------- call
def test_call_outcome_shows_the_tools_words_as_written() -> None:
    outcome = {
        "call_id": "c1",
        "status": "failed",
        "attempts": [
            {"tool": "slugify", "version": "1.0.0", "outcome": "failure", "error_class": "crash",
             "error_message": f"no slug in {text}", "execution_time_ms": 3.0}
            for text in TRICKY
        ],
        "errors": [{"field": "input.[/title]", "message": text} for text in TRICKY],
        "message": f"every candidate failed: {' '.join(TRICKY)}",
    }
    out = printed(lambda: calls.show_call(CallResult.model_validate(outcome)))
    assert_shown(out, "call c1: failed", *[f"crash no slug in {text}" for text in TRICKY],
                 *[f"input.[/title]: {text}" for text in TRICKY], f"every candidate failed: {' '.join(TRICKY)}")

    served = {"call_id": "c2", "status": "success", "tool": "slug[/x]", "version": "[/v]", "output": {"slug": "[/.]"},
              "attempts": [{"tool": "slug[/x]", "version": "[/v]", "outcome": "success", "execution_time_ms": 1.0}],
              "ranking": [{"key": key, "probability": p, "score": p, "breakdown": {}}
                          for key, p in (("slug[/x]@[/v]", 0.874), ("[red]b@1[/red]", 0.1), ("c@1", 0.02), ("d@1", 0.006))],
              "policy": "learned", "weights_version": 12, "degraded": TRICKY}
    # QA learning F9: the call showed what ran, not how selection ranked the others, nor which weights it read.
    # QA 57a M2: nor that it was ranked without the vector memory, which only --json said.
    assert_shown(printed(lambda: calls.show_call(CallResult.model_validate(served))), "call c2: success by slug[/x]@[/v]", "│ slug[/x]@[/v]",
                 '"slug": "[/.]"', "ranked by the learned policy (SPARC weights v12): slug[/x]@[/v] (p=0.87), "
                 "[red]b@1[/red] (p=0.10), c@1 (p=0.02), and 1 more", *[f"degraded: {text}" for text in TRICKY])


def test_a_tools_output_and_its_words_reach_the_terminal_without_their_control_characters() -> None:
    """QA 64a: U+009B (a terminal's 8-bit CSI) in a tool's output reached the terminal raw through
    the call's JSON, and U+202E showed a scenario reversed wherever it was printed."""
    hostile = "a\x9b31m b\u202eRTL\u202c c\x1b[2J d\u00e9"
    served = {"call_id": "c3", "status": "success", "tool": "t", "version": "1.0.0", "output": {"text": hostile},
              "attempts": [{"tool": "t", "version": "1.0.0", "outcome": "success", "execution_time_ms": 1.0}],
              "message": hostile}
    with console.capture() as out:
        calls.show_call(CallResult.model_validate(served))
    raw = out.get()
    assert not any(ch in raw for ch in "\x9b\u202e\u202c"), repr(raw)
    assert '"text": "a\\u009b31m b\\u202eRTL\\u202c c\\u001b[2J d\u00e9"' in plain(raw), plain(raw)  # JSON's escapes
    assert "a\\x9b31m b\\u202eRTL\\u202c c\\x1b[2J d\u00e9" in plain(raw), plain(raw)  # the message, as literal() shows it


# --------------------------------------------------------------------------------------- tools
def test_tools_prints_manifest_errors_and_tools_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from selection.registry import ToolRegistry
    from workers.demo import EXAMPLE_TOOLS

    bad = tmp_path / "bad"
    bad.mkdir()
    manifest = (EXAMPLE_TOOLS / "slugify" / "tool.yaml").read_text()
    (bad / "tool.yaml").write_text(manifest.replace("name: slugify", "name: Bad Name"))
    missing = tmp_path / "no [/.] dir"
    registry = ToolRegistry.load([bad, missing])
    monkeypatch.setattr("workers.settings.get_settings", lambda: SimpleNamespace(trial_successes=5, tools_dir=tmp_path,
                                                                                  key_prefix="fittest:"))
    monkeypatch.setattr("workers.tool_catalog.load_registry", lambda settings: registry)
    monkeypatch.setattr("workers.runtime.runtime", lambda: SimpleNamespace(
        state=SimpleNamespace(stats_and_breakers=lambda keys: ({}, {}), newcomers=dict, promotions=lambda names: {})))
    monkeypatch.setattr("workers.redis_connection.probe_client", lambda *a, **k: SimpleNamespace(
        ping=lambda: True, close=lambda: None, exists=lambda key: 1))  # a stack is served under the prefix

    out = printed(lambda: tools.tools(json_out=False))
    assert_shown(out, f"skipped {bad / 'tool.yaml'}: field 'name': String should match pattern '^[a-z][a-z0-9_]{{0,63}}$'",
                 f"FITTEST_TOOLS_DIR ({missing.resolve()}) is not a directory")

    rows = [tools.ToolRow(name=f"t{i}", version="1.0.0", kind="python", quality=0.5, standing=0.625, successes=1,
                          failures=2, tags=[text, "x"]) for i, text in enumerate(TRICKY)]
    rows.append(tools.ToolRow(name="[red]t[/red]", version="2.0.0\\", kind="[/kind]", quality=1.0, standing=1.0,
                              successes=0, failures=0))
    out = printed(lambda: console.print(tools.tools_table(rows)))
    assert_shown(out, *[f"{text}, x" for text in TRICKY], "[red]t[/red]@2.0.0\\", "[/kind]")


def test_demo_prints_manifest_errors_and_the_model_error_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from selection.manifest import ManifestError
    from workers.demo import run_demo
    from workers.embedder import EmbedderUnavailable
    from workers.settings import get_settings

    registry = SimpleNamespace(errors=[ManifestError("tool.yaml", "name", f"String should match pattern {text}") for text in TRICKY])
    monkeypatch.setattr("workers.demo.ToolRegistry", SimpleNamespace(load=lambda dirs: registry))

    def no_model(settings: Any) -> None:
        raise EmbedderUnavailable(f"cannot load the model at /models/[/.] {' '.join(TRICKY)}")

    monkeypatch.setattr("workers.embedder.open_embedder", no_model)  # the demo stops here, before starting anything
    out = printed(lambda: run_demo(get_settings(), calls=1, fresh=False, console=console))
    assert_shown(out, *[f"skipped manifest tool.yaml: field 'name': String should match pattern {text}" for text in TRICKY],
                 f"error: cannot load the model at /models/[/.] {' '.join(TRICKY)}")


# --------------------------------------------------------------------------------------- learning
def test_explain_shows_the_scenario_and_the_rationales_as_written(redis_answers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    breakdown = {"source": "semantic", "similarity": 0.5, "quality": 1.0, "feedback": 0.0, "sparc": 0.5,
                 "sparc_components": {"phase": 0.5}}
    answer = {"call_id": "c", "status": "success", "ranking": [
        {"key": f"tool{i}[/x]@1.0.0", "score": 1.0, "probability": 0.5, "breakdown": {**breakdown, "rationale": f"it said {text}"}}
        for i, text in enumerate(TRICKY)
    ], "degraded": TRICKY, "policy": "learned", "weights_version": 7}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: answer)
    out = invoke(["explain", "sort [a-z] numbers [/]"])
    assert_shown(out, "ranking for 'sort [a-z] numbers [/]' by the workers' learned policy (SPARC weights v7)",
                 *[f"{i}. tool{i - 1}[/x]@1.0.0: it said {text} (SPARC components: phase 0.50)" for i, text in enumerate(TRICKY, 1)],
                 *[f"│ tool{i}[/x]@1.0.0" for i in range(len(TRICKY))],
                 *[f"degraded: {text}" for text in TRICKY])

    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"call_id": "invalid", "status": "invalid", "errors": [{"field": "scenario", "message": "[/.]"}]})
    assert_shown(invoke(["explain", "x"]), "error: scenario: [/.]")


def test_feedback_shows_reasons_and_scenarios_as_written(redis_answers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [{"timestamp": 0.0, "tool": "fast[/x]", "version": "[/v]1.0.0", "value": -1.0, "source": "manual", "reason": text,
                "scenario": f"sort numbers {text}"} for text in TRICKY]
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: {"tool": "fast[/x]", "total": len(entries), "entries": entries, "trend": []})
    monkeypatch.setattr("workers.tool_catalog.load_registry", lambda settings: SimpleNamespace(versions=lambda name: [
        SimpleNamespace(version="1.0.0")]))  # a tool of that name is served
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: SimpleNamespace(
        stats=lambda keys: {k: ToolStats() for k in keys}))
    out = invoke(["feedback", "show", "fast[/x]"])
    assert_shown(out, f"feedback on fast[/x]: {len(TRICKY)} entries", "[/v]1.0.0",
                 *[f"│ {text}" for text in TRICKY], *[f"sort numbers {text}" for text in TRICKY])

    recorded = {"status": "recorded", "score_now": -1.0,
                "feedback": {"value": -1.0, "tool": "fast[/x]", "version": "[/v]1.0.0", "scenario": "sort numbers"}}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: recorded)
    assert_shown(invoke(["feedback", "add", "fast_sort", "negative", "--reason", "oops [/x]"]), "for fast[/x]@[/v]1.0.0;")

    refused = {"status": "invalid", "errors": [{"field": "reason", "message": text} for text in TRICKY]}
    monkeypatch.setattr(learning, "_ask", lambda *a, **k: refused)
    assert_shown(invoke(["feedback", "add", "fast_sort", "negative"]), "error: " + "; ".join(f"reason: {t}" for t in TRICKY))


def test_recommend_shows_failed_scenarios_as_written(redis_answers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from selection.recommend import Recommendation

    found = [Recommendation(tool="fast[/x]@1.0.0", context="task_type=[/x]", runs=5, success_rate=0.0, elsewhere_rate=None,
                            error_classes={"crash[/x]": 5}, failed_scenarios=[f"sort numbers {text}"], advice=f"look at {text}")
             for text in TRICKY]
    monkeypatch.setattr(learning, "_ask_or_none", lambda *a, **k: {
        "records": 5, "judged_wrong": 0, "recommendations": [r.model_dump(mode="json") for r in found]})
    out = invoke(["recommend"])
    assert_shown(out, "fast[/x]@1.0.0", "task_type=[/x]", "crash[/x] 5", *[f"sort numbers {text}" for text in TRICKY],
                 *[f"look at {text}" for text in TRICKY])


def test_weights_show_the_stored_classifier_and_correlations_as_written(monkeypatch: pytest.MonkeyPatch, redis_answers: None) -> None:
    from selection.ports import SelectionWeights

    current = SelectionWeights(version=2, classifier="rev[/x]", evidence={"records": 10, "correlations": {"[/c]": 0.5}})
    monkeypatch.setattr("workers.state.open_state_store", lambda settings: SimpleNamespace(
        weights=lambda: current, weights_history=lambda n: [SelectionWeights(version=1, classifier="[red]old[/red]")],
        last_retrain=lambda: None))
    assert_shown(invoke(["weights"]), "rev[/x]", "[red]old[/red]", "correlation of each component with success: [/c] +0.50")


# --------------------------------------------------------------------------------------- evolution
def test_show_prints_mutations_variants_and_the_changelog_as_written(redis_answers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    variant = {"id": "1", "status": "testing", "environment": "[/env]", "trials": 0, "successes": 0, "accesses": 0,
               "effectiveness": 0.5}
    data = evolution.Lineage.model_validate({
        "namespace": "fast_sort",
        "promotion": None,
        "versions": [
            {"version": f"1.0.{i}[/v]", "parent": None if i == 0 else "1.0.0[/v]", "status": "original" if i == 0 else "on_trial",
             "served": i == 0, "quality": 1.0, "successes": 0, "failures": 0, "refused_inputs": 0, "breaker": "closed",
             "timeout_s": 2.0, "manifest": f"/tools/{text}/tool.yaml", "mutation": f"mutation {text}",
             "variants": [{**variant, "text": f"sorts {text}"}]}
            for i, text in enumerate(TRICKY)
        ],
        "changelog": [{"namespace": "fast_sort", "time": 0.0, "event": "verified", "version": "[/v]", "mutation": text,
                       "reason": f"because {text}"} for text in TRICKY],
    })
    monkeypatch.setattr(evolution, "lineage", lambda name: data)
    out = invoke(["show", "fast[/x]"])
    assert_shown(out, "fast[/x]\n", *[f"1.0.{i}[/v]  " for i in range(len(TRICKY))], "changelog of fast[/x]", "verified", "[/v]", *[f"mutation {text}" for text in TRICKY], *[f"sorts {text}" for text in TRICKY], "([/env])",
                 *[f"because {text}" for text in TRICKY])


def show_lineage(monkeypatch: pytest.MonkeyPatch, namespace: str, promotion: dict[str, Any],
                 versions: list[tuple[str, str, bool]], deprecated: frozenset[str] = frozenset()) -> str:
    """`fittest show NAMESPACE` of a lineage with these (version, status, served) rows."""
    row: dict[str, Any] = {"parent": None, "quality": 1.0, "successes": 0, "failures": 0, "refused_inputs": 0, "breaker": "closed",
                           "timeout_s": 2.0, "manifest": "/tools/x/tool.yaml", "mutation": "", "variants": []}
    data = evolution.Lineage.model_validate({
        "namespace": namespace, "promotion": {"namespace": namespace, **promotion}, "changelog": [],
        "versions": [{**row, "version": v, "status": status, "served": served, "deprecated": v in deprecated}
                     for v, status, served in versions]})
    monkeypatch.setattr(evolution, "lineage", lambda name: data)
    return invoke(["show", namespace])


def test_show_says_a_trial_serves_a_share_of_the_calls_and_its_parent_the_rest(redis_answers: None,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """QA U: the version on trial was marked "◀ served" and the original, which serves 75 % of the
    calls, was not marked at all."""
    promotion = {"status": "on_trial", "evolved_version": "2.0.0", "parent_version": None, "original_version": "1.0.0"}
    versions = [("1.0.0", "original", False), ("2.0.0", "on_trial", True)]
    assert_shown(show_lineage(monkeypatch, "hash_text", promotion, versions), "1.0.0  original ◀ served on the other 75%",
                 "2.0.0  on_trial ◀ served on 25% of the calls")
    # QA recheck N5: with the version it is tried against deprecated, the version on trial serves every call.
    shown = show_lineage(monkeypatch, "hash_text", promotion, versions, deprecated=frozenset({"1.0.0"}))
    assert_shown(shown, "1.0.0  original deprecated: not offered by selection",
                 "2.0.0  on_trial ◀ served on every call (the version it is tried against is deprecated)")
    assert "served on the other" not in shown


def test_show_marks_what_is_served_when_the_promoted_version_is_deprecated_and_which_version_waits(
    redis_answers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA ops L6: with the active version deprecated, nothing was marked served, where 1.0.0 served
    every call; and with 1.0.0 pinned by hand, both 1.1.0 and 1.2.0 "waited", where only the newest
    manifest version goes on trial."""
    active = {"status": "active", "evolved_version": "1.1.0", "parent_version": "1.0.0", "original_version": "1.0.0"}
    shown = show_lineage(monkeypatch, "reverse_text", active, [("1.0.0", "original", False), ("1.1.0", "active", False)],
                         deprecated=frozenset({"1.1.0"}))
    assert_shown(shown, "1.0.0  original ◀ served (the version it would serve is deprecated)",
                 "1.1.0  active deprecated: not offered by selection")
    pinned = {"status": "active", "evolved_version": "1.0.0", "parent_version": None, "original_version": "1.0.0", "by": "operator"}
    shown = show_lineage(monkeypatch, "reverse_text", pinned, [("1.0.0", "original", True), ("1.1.0", "new manifest version", False),
                                                               ("1.2.0", "new manifest version", False)])
    assert_shown(shown, "1.0.0  original ◀ served", "1.2.0  new manifest version waits: `fittest promote` decides",
                 "1.1.0  new manifest version a fallback: only the newest manifest version goes on trial (`fittest promote "
                 "reverse_text 1.1.0` serves it)")
    assert " ".join(shown.split()).count("waits") == 1, shown
    # QA recheck N6, N7: the newest rolled back, the one before it does not wait for a trial it will
    # not get; and a rolled-back version is not offered when the one served is deprecated.
    rolled = show_lineage(monkeypatch, "reverse_text", pinned, [("1.0.0", "original", True), ("1.1.0", "new manifest version", False),
                                                                ("1.2.0", "rolled_back", False)])
    assert "waits: `fittest promote` decides" not in " ".join(rolled.split()), rolled
    assert "1.1.0 new manifest version a fallback" in " ".join(rolled.split()), rolled
    active["evolved_version"] = "1.1.0"
    deprecated = show_lineage(monkeypatch, "reverse_text", active, [("1.0.0", "original", False), ("1.1.0", "active", False),
                                                                    ("1.2.0", "rolled_back", False)], deprecated=frozenset({"1.1.0"}))
    assert_shown(deprecated, "1.0.0  original ◀ served (the version it would serve is deprecated)")
    assert "1.2.0  rolled_back ◀" not in " ".join(deprecated.split()), deprecated


def test_rollback_and_promote_name_the_versions_as_written(monkeypatch: pytest.MonkeyPatch, redis_answers: None) -> None:
    from selection.models import Promotion

    promotion = Promotion(namespace="fast[/x]", evolved_version="[/v2]", original_version="1.0.0", parent_version="[/v1]")
    manifests: dict[str, Any] = {}
    monkeypatch.setattr(evolution, "_stores", lambda: (SimpleNamespace(versions=lambda name: [name], get=manifests.get), None, None))
    monkeypatch.setattr("evolution.promotions.rollback", lambda *a: promotion)
    monkeypatch.setattr("evolution.promotions.promote_by_hand", lambda *a: promotion)
    monkeypatch.setattr("evolution.promotions.trial_new_manifests", lambda *a: [])
    assert_shown(invoke(["rollback", "fast[/x]"]), "fast[/x]@[/v2] rolled back; fast[/x]@[/v1] is served again")
    assert_shown(invoke(["promote", "fast[/x]", "[/v2]"]), "fast[/x]@[/v2] is served (active)")
    # QA recheck N3: the version served again is deprecated by its manifest, so nothing of the tool is.
    manifests["fast[/x]@[/v1]"] = SimpleNamespace(deprecated=True)
    assert_shown(invoke(["rollback", "fast[/x]"]), "fast[/x]@[/v2] rolled back; fast[/x]@[/v1] is served again, but its "
                 "manifest deprecates it: selection does not offer it, so no version of fast[/x] is served until one is "
                 "promoted (`fittest promote fast[/x] VERSION`) or `deprecated` is taken out")
    # QA evolution L4: undoing a promote of the trial's other side, which goes on serving, rolls nothing back
    trial = Promotion(namespace="fast[/x]", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0")
    promotion = Promotion(namespace="fast[/x]", evolved_version="1.0.0", original_version="1.0.0", parent_version="1.1.0",
                          status="rolled_back", by="operator", resumes=trial)
    assert_shown(invoke(["rollback", "fast[/x]"]), "fast[/x]@1.0.0's promotion by hand undone; fast[/x]@1.1.0 is on trial again against it")
    # QA 63g: the original promoted by hand over a version activated by its trial (no trial to resume)
    promotion = Promotion(namespace="fast[/x]", evolved_version="1.0.0", original_version="1.0.0", parent_version="1.2.0",
                          status="rolled_back", by="operator")
    assert_shown(invoke(["rollback", "fast[/x]"]), "fast[/x]@1.0.0's promotion by hand undone; fast[/x]@1.2.0 is served "
                 "again, and fast[/x]@1.0.0, the original, stays its fallback")


def test_evolution_report_prints_candidates_and_notes_as_written() -> None:
    from evolution.models import EvolutionReport

    report = EvolutionReport.model_validate({
        "job_id": "j", "namespace": "fast_sort", "trigger": "manual", "parent": "fast[/x]@1.0.0", "status": "no_fix",
        "elapsed_s": 1.0, "message": f"no candidate passed: {' '.join(TRICKY)}",
        "candidates": [{"mutator": "[/llm]", "mutation": f"fix {text}", "outcome": "failed",
                        "stages": [{"stage": "static", "passed": False}], "reason": f"test failed: {text}"}
                       for text in TRICKY],
        "notes": [f"note {text}" for text in TRICKY]})
    out = printed(lambda: evolution.show_report(report))
    assert_shown(out, "evolution of fast[/x]@1.0.0: no_fix in 1.0s", f"no candidate passed: {' '.join(TRICKY)}",
                 "[/llm]", "static✗", *[f"fix {text}" for text in TRICKY],
                 *[f"test failed: {text}" for text in TRICKY], *[f"note {text}" for text in TRICKY])


def test_the_evolution_table_shows_a_skip_reason_whole() -> None:
    """QA 53a: the reason column cut a twin skip's reason at 80 characters (`--json` had it whole)."""
    from evolution.models import EvolutionReport

    reason = ("normalize_addresses@1.1.0, which normalize_addresses serves, is this mutation of "
              "normalize_addresses@1.0.0 already")
    report = EvolutionReport.model_validate({
        "job_id": "j", "namespace": "normalize_addresses", "trigger": "manual", "parent": "normalize_addresses@1.0.0",
        "status": "no_fix", "elapsed_s": 1.0, "message": "no candidate passed",
        "candidates": [{"mutator": "timeout", "mutation": "timeout_s 0.3s → 1.2s", "outcome": "skipped", "stages": [],
                        "reason": reason}]})
    out = printed(lambda: evolution.show_report(report))
    cells = " ".join(out.replace("│", " ").split())
    assert "…" not in out and all(word in cells for word in reason.split()), out
    # QA 64c-9: one past 300 characters is cut in the middle, and the table says where the rest is
    report.candidates[0].reason = "a test failed: " + "x" * 400
    out = printed(lambda: evolution.show_report(report))
    assert "…" in out and "a long reason's middle is left out here; --json has it whole" in out, out


# --------------------------------------------------------------------------------------- ops
def test_health_report_and_settings_print_details_paths_and_values_as_written(monkeypatch: pytest.MonkeyPatch,
                                                                              redis_answers: None, tmp_path: Path) -> None:
    from workers.health import Check, HealthReport
    from workers.settings import get_settings

    report = HealthReport(healthy=False, checks=[Check(name="store", status="fail", detail=f"Qdrant said {text}")
                                                 for text in TRICKY])
    monkeypatch.setattr("workers.health.health", lambda *a: report)
    assert_shown(invoke(["health"]), *[f"Qdrant said {text}" for text in TRICKY])

    monkeypatch.setattr("workers.metrics.reader_for", lambda settings: None)
    monkeypatch.setattr("workers.report.write_report", lambda reader, out, **k: out / "index.html")
    monkeypatch.chdir(tmp_path)  # `report` makes its folder: not in the checkout
    assert_shown(invoke(["report", "--out", "out [/.]"]), f"report written to {Path('out [/.]') / 'index.html'}")

    monkeypatch.setenv("FITTEST_LLM_MODEL", "[red]wrong[/red] [/.]")
    get_settings.cache_clear()
    try:
        out = invoke(["settings"])
    finally:
        get_settings.cache_clear()
    assert_shown(out, "[red]wrong[/red] [/.]")


def test_show_says_why_a_new_manifest_version_waits_while_a_promote_holds(redis_answers: None,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """QA V: after `fittest promote word_stats 1.0.0` a manifest's 1.1.0 never went on trial, and
    neither `show` nor the log said why."""
    promotion = {"status": "active", "by": "operator", "evolved_version": "1.0.0", "parent_version": None,
                 "original_version": "1.0.0"}
    versions = [("1.0.0", "active", True), ("1.1.0", "new manifest version", False)]
    assert_shown(show_lineage(monkeypatch, "word_stats", promotion, versions), "1.0.0  active ◀ served",
                 "1.1.0  new manifest version waits: `fittest promote` decides (`fittest rollback word_stats` lets it go on trial)")
    # QA 65b: of a version other than the original promoted by hand, the rollback stops serving it, as said
    promotion = {**promotion, "evolved_version": "1.0.1", "parent_version": "1.0.0"}
    versions = [("1.0.0", "superseded", False), ("1.0.1", "active", True), ("1.1.0", "new manifest version", False)]
    assert_shown(show_lineage(monkeypatch, "word_stats", promotion, versions),
                 "1.1.0  new manifest version waits: `fittest promote` decides (`fittest rollback word_stats` lets it go on "
                 "trial, and stops serving word_stats@1.0.1, promoted by hand)")


def test_a_reader_that_goes_away_ends_a_command_as_sigpipe_does_not_as_a_failed_call() -> None:
    """QA N10: `fittest call ... | head` exited 1, what a call that did not succeed exits with."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        done = subprocess.run([sys.executable, "-c", "from workers.cli import main; main()", "schema"],
                              stdout=write, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, b"")


def test_recommend_gives_each_advice_once(redis_answers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA ops: the same 11-line advice on every row ran a 6-row table to 70 lines."""
    from selection.recommend import Recommendation

    advice = "mostly refused its input: check what callers send it"
    found = [Recommendation(tool=f"{name}@1.0.0", context="any", runs=5, success_rate=0.2, elsewhere_rate=None,
                            error_classes={"bad_input": 4}, failed_scenarios=["x"], advice=advice)
             for name in ("quick_sort", "hash_text")]
    monkeypatch.setattr(learning, "_ask_or_none", lambda *a, **k: {
        "records": 10, "judged_wrong": 0, "recommendations": [r.model_dump(mode="json") for r in found]})
    out = " ".join(invoke(["recommend"]).split())
    assert out.count("check what callers send it") == 1 and "(as in row 1)" in out

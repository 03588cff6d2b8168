"""`fittest tools` and `fittest schema`: what is registered, and how to send a job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Protocol

import typer
from pydantic import BaseModel, Field, computed_field
from rich.table import Table

from evolution.served_version import fallback_version, head_version, withdrawn_versions
from selection.context import language_typos
from selection.manifest import ToolManifest, split_key, tool_key
from selection.models import Promotion
from selection.policies.learned import standing
from selection.ports import Breakers, BreakerState, Newcomers, Promotions, StateStore
from selection.registry import DIRECTORY, in_listing_order
from selection.job_record import REFUSED_IN_A_ROW
from workers.cli.common import (REFUSED, JsonOpt, abridged, check_redis, console, err_console, fail, literal, print_json,
                                 shortened, warn_of_other_stacks)

if TYPE_CHECKING:
    from evolution.verification import Sandbox

app = typer.Typer()

# --------------------------------------------------------------------------------------- tools
class RefusedManifest(BaseModel):
    """A manifest file not served as it reads now, as `fittest tools --refused --json` lists it."""

    path: str
    field: str  # the manifest's field at fault, or "(file)", "(yaml)", "(manifest)" for the file as a whole
    reason: str
    fields: list[str] = Field(default_factory=list)  # every field at fault, `field` first (QA 51c)


@app.command()
def tools(
    json_out: JsonOpt = False,
    refused: Annotated[bool, typer.Option("--refused", help=(
        "List the manifests of the tools directory that are refused (path, field, reason) instead of the tool "
        "versions; exit code 1 when there is one (2 when FITTEST_TOOLS_DIR is not a directory), for a CI check "
        "of a team's onboarding. Reads the manifests alone: Redis need not run. A declared language that looks "
        "like a typo of a known one (pyton) is noted on stderr, with or without --refused, and refuses nothing."))] = False,
) -> None:
    """List every tool version with its quality, counters and circuit breaker (closed; open: held
    back from calls; half-open: its cool-down is over, and the next call that comes to run it probes
    it, a call of a job it did before trying it first).

    Quality is the design's score: each failure lowers it, more from the 6th and the 11th on. The
    default policy (learned) ranks by it with what the version's successes give back, shown as
    standing (quality + (1 - quality) x successes / (successes + failures + 1)), and by its
    successes and failures on jobs like the call's: `fittest explain` shows both. Refused inputs
    that were the caller's mistake, or of another tool's job the version was a fallback for, are
    counted apart, and lower nothing.

    The versions are the tools directory's as it reads now: the workers serve a manifest added or
    changed since from their next look at it (every FITTEST_TOOLS_RESCAN_S; with 0, from their next
    start), and `fittest health` counts the versions they serve."""
    from workers.settings import get_settings
    from workers.tool_catalog import load_registry

    settings = get_settings()
    if not refused:
        check_redis()
    registry = load_registry(settings)
    gone_dirs = [error.path for error in registry.errors if error.field == DIRECTORY]
    if refused and gone_dirs:  # a check that read nothing must not pass (QA evolution M4)
        fail(f"FITTEST_TOOLS_DIR ({Path(gone_dirs[0]).resolve()}) is not a directory: no manifest was checked (a "
             "relative path is read from the directory fittest runs in)", REFUSED)
    for gone in gone_dirs:
        err_console.print(f"[yellow]warning:[/yellow] FITTEST_TOOLS_DIR ({literal(Path(gone).resolve())}) is not a "
                          "directory, so no tool comes from it (a relative path is read from the directory "
                          "fittest runs in); listed from their counters: the versions that have run (the workers "
                          "keep every version they last read)")
    skipped = registry.refused()
    for manifest in registry.all():
        if manifest.parent_version is not None:
            continue  # an evolved copy repeats its parent's manifest: noted once, there (review)
        for name, meant in language_typos(manifest.sparc.languages if manifest.sparc else []):
            err_console.print(f"[yellow]note[/yellow] {literal(registry.source(manifest.key) or manifest.key)}: "
                              f"sparc.languages {literal(repr(name))} is not a language selection knows: did you mean "
                              f"{literal(repr(meant))}? (a call stating {literal(meant)} scores it as a tool of another "
                              "language)")
    if refused:  # a list of their own, so that `--json`'s list of versions keeps its shape (QA onboarding M3)
        listed = [RefusedManifest(path=e.path, field=e.field, reason=e.reason, fields=e.fields) for e in skipped]
        if json_out:
            print_json([m.model_dump() for m in listed])
        else:
            table = Table(title=f"refused manifests: {len(listed)}")
            for col in ("manifest", "field", "reason"):
                table.add_column(col)
            for m in listed:
                table.add_row(literal(m.path), literal(m.field), literal(m.reason))
            console.print(table)
        raise typer.Exit(1 if listed else 0)
    for error in skipped:
        err_console.print(f"[yellow]skipped[/yellow] {literal(error)}")
    if skipped:
        err_console.print("(`fittest tools --refused --json` lists them as JSON; `fittest health` warns of them)")
    from workers.runtime import runtime

    state = runtime().state
    warn_of_other_stacks(settings)
    rows = tool_rows(registry.all(), state, settings.trial_successes)
    if not settings.tools_dir.is_dir():
        rows += unread_rows(state, {r.key for r in rows})
    if json_out:
        print_json([r.model_dump() for r in rows])
        return
    console.print(tools_table(rows))


class ToolStates(Breakers, Newcomers, Promotions, Protocol):
    """What `fittest tools` reads of each version: its counters and breaker, the newcomers, and the promotions."""


class ToolRow(BaseModel):
    """A tool version as `fittest tools` lists it (and its --json): its manifest's summary and its state."""

    name: str
    version: str
    description: str = ""
    tags: list[str] = []
    kind: str
    quality: float
    standing: float  # what the learned policy ranks by (QA onboarding L1)
    successes: int
    failures: int
    refused_inputs: int = 0  # the caller's mistakes and other tools' jobs, counted apart
    refused_in_a_row: int = 0  # since its last success
    breaker: BreakerState = "closed"
    deprecated: bool = False
    # A version of a tool new to the running system that is still tried first on a share of the
    # calls it matches (selection/serving.py), which a deprecated version, out of the rankings, is not.
    newcomer: bool = False
    # The evolved version its namespace's promotion puts on trial (QA: "(new: on trial)" marked a
    # new tool's original, and nothing marked the version really on trial).
    on_trial: bool = False
    # The version it is tried against: its parent, or what the namespace served when it went on
    # trial (review 51: "on trial against its parent" of a manual evolution tried against another).
    trial_against: str | None = None
    # Taken out of the calls by its namespace's promotions (evolution/served_version.py
    # `withdrawn_versions`, as selection reads them; QA README L6: listed like any served version).
    rolled_back: bool = False
    # The evolved or newer version its namespace's promotion serves in place of the original, its
    # trial over (QA 62a: `fittest show` alone said which one was served).
    promoted: bool = False

    @property
    def key(self) -> str:
        return tool_key(self.name, self.version)


def versions_served(manifests: list[ToolManifest], promotions: dict[str, Promotion | None]) -> set[str]:
    """The versions their namespace serves first on some of its calls: what its promotion stands
    for (`head_version`), during a trial the version it is tried against as well, else its original
    (the lowest version with no parent, or the one its promotion was made against)."""
    versions: dict[str, set[str]] = {}
    originals: dict[str, str] = {}
    for m in in_listing_order(manifests):  # lowest version first
        versions.setdefault(m.name, set()).add(m.version)
        if m.parent_version is None:
            originals.setdefault(m.name, m.version)
    served = set()
    for name, given in versions.items():
        p = promotions.get(name)
        original = p.original_version if p is not None and p.original_version in given else originals.get(name)
        sides = [head_version(p)] + ([fallback_version(p)] if p is not None and p.status == "on_trial" else [])
        served |= {tool_key(name, version) for v in sides if (version := v or original) is not None}
    return served


def tool_rows(manifests: list[ToolManifest], state: ToolStates, trial_runs: int) -> list[ToolRow]:
    """Each version with its state; a newcomer as selection tries one (selection/serving.py
    `newcomer_to_try`): the version its namespace serves, until the namespace has run `trial_runs`
    times (QA 50: every version of a new tool was marked, after its calls had run it 9 times)."""
    stats, breakers = state.stats_and_breakers([m.key for m in manifests])
    newcomers = state.newcomers()
    promotions = state.promotions(sorted({m.name for m in manifests}))
    withdrawn = {tool_key(name, v) for name, current in promotions.items() if current is not None
                 for v in withdrawn_versions(state.promotion_history(name), current)}
    served = versions_served(manifests, promotions)
    runs: dict[str, int] = {}
    for m in manifests:
        runs[m.name] = runs.get(m.name, 0) + stats[m.key].successes + stats[m.key].failures
    return [
        ToolRow(
            name=m.name, version=m.version, description=m.description, tags=m.tags, kind=m.implementation.kind,
            quality=round(stats[m.key].quality, 4), standing=round(standing(stats[m.key]), 4),
            successes=stats[m.key].successes, failures=stats[m.key].failures,
            refused_inputs=stats[m.key].refused_inputs, refused_in_a_row=stats[m.key].refused_in_a_row,
            breaker=breakers[m.key], deprecated=m.deprecated,
            # not while its breaker holds it back (QA 48 recheck: a crashed killer read "tried first")
            newcomer=(not m.deprecated and m.name in newcomers and breakers[m.key] == "closed"
                      and m.key in served and runs[m.name] < trial_runs),
            on_trial=(trial := (p := promotions.get(m.name)) is not None and p.status == "on_trial" and p.evolved_version == m.version),
            trial_against=(fallback_version(p) or p.original_version) if trial and p is not None else None,
            rolled_back=m.key in withdrawn,
            promoted=p is not None and p.status != "on_trial" and head_version(p) == m.version and m.key not in withdrawn,
        )
        for m in manifests
    ]


def unread_rows(state: StateStore, read: set[str]) -> list[ToolRow]:
    """The versions the state counts whose manifest is not read while FITTEST_TOOLS_DIR is not
    there: the workers keep them registered (workers/tool_watch.py), so their counters and breakers
    are what an operator looks at then (QA ops: an empty table while the workers kept 10 versions)."""
    stats = {k: v for k, v in state.all_stats().items() if k not in read}
    _, breakers = state.stats_and_breakers(sorted(stats))
    return [ToolRow(name=name, version=version, kind="(its manifest is not read: FITTEST_TOOLS_DIR is not there)",
                    quality=round(st.quality, 4), standing=round(standing(st), 4), successes=st.successes,
                    failures=st.failures, refused_inputs=st.refused_inputs, refused_in_a_row=st.refused_in_a_row,
                    breaker=breakers.get(key, "closed"))
            for key, st in sorted(stats.items()) for name, version in [split_key(key)]]


STANDING_NOTE = ("quality: the design's score, lowered by each failure; standing: the quality given back by the "
                 "version's share of successes, what the default policy ranks by (a tool that succeeds 2 times in 3 "
                 "may show quality 0.00 and standing 0.50: successes / (runs + 1) where its quality is 0)")


def tools_table(rows: list[ToolRow], title: str = "tools") -> Table:
    """The table of tool versions; `title` is markup (the caller's own words), every cell is printed
    literally. Standing is shown beside quality, with a caption that says what each is: quality
    alone read 0.00 for a tool that succeeds 2 times in 3, which an operator took for dead (QA onboarding L1)."""
    table = Table(title=title, caption=STANDING_NOTE)
    # Each key whole, its marks and the failures' notes wrapped under them, the numbers at their
    # width: a long mark squeezed quality, standing and successes to "…" (QA recheck N4).
    table.add_column("tool", min_width=max((len(r.key) for r in rows), default=4))
    table.add_column("kind", no_wrap=True)
    for col in ("quality", "standing", "successes"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    table.add_column("failures", justify="right", min_width=max(  # the count and its refusals in one line
        (len(f"{r.failures} (+{r.refused_inputs} refused inputs)") for r in rows if r.refused_inputs), default=8))
    table.add_column("breaker", no_wrap=True)
    table.add_column("tags")
    for r in rows:
        q = r.quality
        color = "green" if q >= 0.9 else "yellow" if q >= 0.7 else "red"
        key = (literal(r.key) + (" [dim](deprecated)[/dim]" if r.deprecated else "")
               + (" [cyan](new tool: tried first on a share of its calls)[/cyan]" if r.newcomer else "")
               + (f" [cyan](on trial against {literal(r.trial_against or 'the original')})[/cyan]" if r.on_trial else "")
               + (" [dim](rolled back: not served)[/dim]" if r.rolled_back else "")
               + (" [green](promoted: served)[/green]" if r.promoted else ""))
        shown = {"open": "[red]open[/red]", "half_open": "[yellow]half-open[/yellow]"}.get(r.breaker, "[dim]closed[/dim]")
        refused = f" [dim](+{r.refused_inputs} refused inputs)[/dim]" if r.refused_inputs else ""
        if r.refused_in_a_row >= REFUSED_IN_A_ROW:  # QA final: nothing said the rule had tripped
            # (not "counted as failures now": a fallback's refusals of another tool's job stay refused inputs, QA 50e)
            refused += f" [yellow](the last {r.refused_in_a_row} in a row: no longer taken for callers' mistakes)[/yellow]"
        table.add_row(key, literal(r.kind), f"[{color}]{q:.2f}[/{color}]", f"{r.standing:.2f}",
                      str(r.successes), f"{r.failures}{refused}", shown, literal(", ".join(r.tags)))
    return table


CALL_REPLIES = ("resilient_tool_call_reply", "call_tool_reply")


# --------------------------------------------------------------------------------------- test
class CaseRun(BaseModel):
    """One test case of a manifest as `fittest test` ran it."""

    case: int  # its place among the manifest's test_cases, from 1
    input: dict[str, Any]
    expects: str  # TestCase.expectation
    passed: bool
    why: str | None = None  # TestCase.check's answer when it did not pass
    output: Any = None
    error: str | None = None  # the run's failure class and message, when it failed


class VersionCases(BaseModel):
    """A version's test cases as `fittest test` ran them, in one sandbox subprocess."""

    tool: str  # NAME@VERSION
    manifest: str | None = None  # the file it was read from
    cases: list[CaseRun] = Field(default_factory=list)
    died: str | None = None  # why the stage's subprocess ended before it answered (every case then counts as failed)
    elapsed_ms: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return self.died is None and all(c.passed for c in self.cases)


def run_cases(manifest: ToolManifest, source: str | None, sandbox: Sandbox) -> VersionCases:
    """`manifest`'s test cases run as the evolution's tests stage runs them (evolution/verification.py),
    in one subprocess. When that subprocess dies (a case that kills its process: `os._exit`, a
    signal), each case runs again in one of its own, so that the table shows which case killed
    it and how the others did (QA 65a: "0 of 0 passed", an empty table); not a tool with side
    effects, whose cases would do their changes again."""
    from evolution.verification import StageRun, VerifyConfig, stage_timeout

    cases = manifest.test_cases
    cap = VerifyConfig().stage_timeout_s
    run = sandbox.run(manifest, [c.input for c in cases], stage_timeout(manifest, len(cases), cap))
    found = VersionCases(tool=manifest.key, manifest=source, died=run.died, elapsed_ms=round(run.elapsed_ms, 1))
    alone: list[StageRun] = []
    if run.died is not None and len(cases) > 1 and not manifest.side_effects:
        alone = [sandbox.run(manifest, [c.input], stage_timeout(manifest, 1, cap)) for c in cases]
    for i, case in enumerate(cases, start=1):
        if alone and alone[i - 1].died is not None:
            found.cases.append(CaseRun(case=i, input=case.input, expects=case.expectation(), passed=False,
                                       why=f"its run killed the process it ran in: {alone[i - 1].died}"))
            continue
        results = alone[i - 1].results if alone else run.results[i - 1:i]
        if not results:
            continue
        result = results[0]
        failure = result.error_class.value if result.error_class else None
        why = case.check(result.success, result.output, failure)
        error = None if result.success else f"{failure or 'error'}: {result.error_message}"
        found.cases.append(CaseRun(case=i, input=case.input, expects=case.expectation(), passed=why is None, why=why,
                                   output=result.output if result.success else None, error=error))
    if alone:  # as an evolution's tests stage runs them, together, they fail
        found.died = f"{run.died}; each case then ran alone, as the table shows"
    return found


@app.command()
def test(
    tool: Annotated[str, typer.Argument(help="NAME (each of its versions) or NAME@VERSION.")],
    json_out: JsonOpt = False,
) -> None:
    """Run a tool's test cases (its manifest's `test_cases`) and show each case's outcome; exit code
    0 when every case passed, 1 when one did not, 2 when there is no such tool or no case to run.

    The cases run as an evolution's tests stage runs them, in a subprocess with the workers' limits
    (FITTEST_TOOL_MEMORY_MB, FITTEST_TOOL_CPU_S, FITTEST_OUTPUT_LIMIT_BYTES) and each case within the
    tool's timeout_s: a case that fails here fails every candidate an evolution makes of the tool.
    Reads the tools directory (and the evolved versions) alone: no worker and no Redis are needed.
    A tool with `side_effects: true` does what its cases ask, as it does in an evolution."""
    from workers.cli.common import tool_argument
    from workers.cli.evolution import versions_of
    from workers.runners.base import RunLimits
    from workers.sandbox import SubprocessSandbox
    from workers.settings import get_settings
    from workers.tool_catalog import load_registry

    name, version = tool_argument(tool)
    settings = get_settings()
    registry = load_registry(settings)
    versions = versions_of(registry, name)
    if version is not None:
        versions = [m for m in versions if m.version == version]
        if not versions:
            fail(f"{name} has no version {version} (it has {', '.join(m.version for m in registry.versions(name))})", REFUSED)
    tested = [m for m in versions if m.test_cases]
    if not tested:
        fail(f"{tool} has no test cases: a manifest lists them under test_cases (input, and expect, expect_keys or "
             "expect_error)", REFUSED)
    for m in tested:
        if m.side_effects:  # QA 65a: it appended to its log with nothing said
            err_console.print(f"[yellow]note:[/yellow] {literal(m.key)} has side effects (side_effects: true): its cases "
                              "do what they ask, as they do in an evolution")
    sandbox = SubprocessSandbox(RunLimits.from_settings(settings), registry.http_root)
    runs = [run_cases(m, registry.source(m.key), sandbox) for m in tested]
    if json_out:
        print_json([r.model_dump(mode="json") for r in runs])
    else:
        for m in versions:
            if not m.test_cases:
                console.print(f"{literal(m.key)}: no test cases")
        for r in runs:
            table = Table(title=f"{literal(r.tool)}: {sum(c.passed for c in r.cases)} of {len(r.cases)} passed"
                                f"{f' in {r.elapsed_ms / 1000:.1f} s' if not r.died else ''}")
            for col in ("case", "input", "expects", "outcome"):
                table.add_column(col)
            for c in r.cases:
                outcome = "[green]passed[/green]" if c.passed else f"[red]failed[/red]: {literal(c.why or '')}"
                if c.error:  # also of a case that expects an error: which one came (QA 65a)
                    outcome += f"\n[dim]{literal(abridged(c.error, 150, 150))}[/dim]"
                table.add_row(str(c.case), literal(shortened(json.dumps(c.input, ensure_ascii=False), 60)), literal(c.expects), outcome)
            console.print(table)
            if r.died:
                console.print(f"  [red]{literal(r.tool)}'s cases did not finish:[/red] {literal(r.died)}")
    raise typer.Exit(0 if all(r.passed for r in runs) else 1)


def command_output_schemas() -> dict[str, dict[str, Any]]:
    """What the commands print with --json that is no task's answer, by `COMMAND_output` (QA 60d M2:
    a script reading `tools`, `show`, `health` or `settings` had no schema to check against). The
    others print a task's answer: `explain` explain_reply, `feedback add` record_feedback_reply,
    `recommend` recommend_reply, `evolve` prepare_evolution_reply, `weights --retrain` beside
    weights_output on stderr."""
    from pydantic import TypeAdapter

    from workers.cli.evolution import Lineage
    from workers.cli.ops import SettingRow
    from workers.feedback_store import FeedbackShown
    from workers.health import HealthReport
    from workers.payloads import WeightsShown, every_field_present

    def printed(kind: Any, what: str) -> dict[str, Any]:
        schema = every_field_present(TypeAdapter(kind).json_schema(mode="serialization"))
        schema["description"] = what
        return schema

    return {
        "tools_output": printed(list[ToolRow], "`fittest tools --json`: each tool version, its manifest's summary and its state."),
        "tools_refused_output": printed(list[RefusedManifest], "`fittest tools --refused --json`: each manifest refused, and why."),
        "show_output": printed(Lineage, "`fittest show NAME --json`: the namespace's versions, promotion and changelog."),
        "promote_output": printed(Optional[Promotion], "`fittest promote --json` and `fittest rollback --json`: the promotion "
                                  "in force after it (null: none)."),
        "health_output": printed(HealthReport, "`fittest health --json`: each check, and each worker's answer by node name "
                                 "(exit code 0 healthy, 1 not)."),
        "settings_output": printed(list[SettingRow], "`fittest settings --json`: each variable, its default, meaning and "
                                   "current value (secrets hidden)."),
        "weights_output": printed(WeightsShown, "`fittest weights --json`: the weights in force, their history and the "
                                  "latest retrain that stored none."),
        "test_output": printed(list[VersionCases], "`fittest test TOOL --json`: each version's test cases and how each run "
                               "went (exit code 0 every case passed, 1 one did not)."),
        "feedback_show_output": printed(FeedbackShown, "`fittest feedback show TOOL --json`: the entries, their trend and "
                                        "the version's quality."),
    }


def published_schemas() -> dict[str, dict[str, Any]]:
    """Every schema `fittest schema` prints, by the name it takes."""
    from workers.payloads import payload_schemas

    return payload_schemas() | command_output_schemas()


@app.command()
def schema(
    task: Annotated[Optional[str], typer.Argument(help=(
        "A task's name (its payload, e.g. resilient_tool_call), its name with _reply (its answer), result (a call's), "
        "call_output (what `call --json` and `result --json` print), invalid_reply (a refused report's), or "
        "COMMAND_output (what tools, tools_refused, show, promote, health, settings, weights and feedback_show print "
        "with --json); all, by name, when omitted."))] = None,
) -> None:
    """Print the JSON schema of the task payloads (what a foreign service needs to send_task), of their
    answers, and of what each command prints with --json (a script checks its input against them)."""
    schemas = published_schemas()
    if task in CALL_REPLIES:  # a call's answer is its result, whichever task started it (QA 59a L2)
        task = "result"
    if task:
        if task not in schemas:
            fail(f"unknown schema '{task}' (known: {', '.join(schemas)})", REFUSED)
        print_json(schemas[task])
    else:
        print_json(schemas)

"""`fittest show`, `evolve`, `rollback`, `promote`, `describe`: a namespace's versions and how they
came to be, and the by-hand controls over which one is served."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn, Optional

import typer
from pydantic import BaseModel
from rich.table import Table
from rich.tree import Tree

from evolution.descriptions import VariantStatus
from evolution.models import ChangelogEntry, last_removal
from selection.models import Promotion
from selection.ports import BreakerState
from workers.cli.common import (REFUSED, JsonOpt, abridged, console, fail, literal, needs_redis, print_json, read_answer, reads_state,
                                seconds, shortened, tool_argument, waiting_told, when, worker_errors_told)

if TYPE_CHECKING:
    from evolution.models import EvolutionReport
    from evolution.ports import EvolutionLedger
    from selection.manifest import ToolManifest
    from selection.registry import ToolRegistry
    from workers.state.redis import RedisStateStore

app = typer.Typer()

# What `lineage` says of each version, as `show --help` explains them.
VersionStatus = Literal["original", "new manifest version", "on_trial", "active", "tried against", "rolled_back",
                        "not promoted", "superseded"]
STATUS_COLOR: dict[VersionStatus, str] = {
    "original": "cyan", "new manifest version": "cyan", "on_trial": "yellow", "active": "green", "tried against": "green",
    "rolled_back": "red", "not promoted": "dim", "superseded": "dim"}


class VariantRow(BaseModel):
    """A description variant of a version, as `fittest show` lists it."""

    id: str
    text: str
    status: VariantStatus
    environment: str
    trials: int
    successes: int
    accesses: int
    effectiveness: float


class LineageVersion(BaseModel):
    """One version of a namespace in `fittest show` (and its --json)."""

    version: str
    parent: str | None
    status: VersionStatus
    served: bool  # the version its namespace serves (a version on trial: on its share of the calls)
    deprecated: bool = False  # selection skips it
    quality: float
    successes: int
    failures: int
    # What an author checks beside them (QA evolution: only `fittest tools` showed the breaker,
    # and nothing the timeout its attempts now get, or where the version was read from).
    refused_inputs: int = 0
    breaker: BreakerState = "closed"
    timeout_s: float
    manifest: str | None = None  # the file it was read from
    mutation: str = ""  # what made it, from its promotion's changelog entry
    variants: list[VariantRow] = []


class Lineage(BaseModel):
    """A namespace's versions, lowest first, its promotion and its changelog, oldest first."""

    namespace: str
    promotion: Promotion | None
    versions: list[LineageVersion]
    changelog: list[ChangelogEntry]


def _stores() -> tuple[ToolRegistry, RedisStateStore, EvolutionLedger]:
    """The registry (tools and evolved directories), the state store and the evolution state."""
    from workers.redis_connection import redis_client
    from workers.settings import get_settings
    from workers.state import open_state_store
    from workers.state.evolution import EvolutionState
    from workers.tool_catalog import load_registry

    settings = get_settings()
    client = redis_client(settings)
    return load_registry(settings), open_state_store(settings, client=client), EvolutionState(client, settings.key_prefix)


def no_tool_named(registry: ToolRegistry, name: str) -> NoReturn:
    """Fail naming a tool no manifest here declares; when some did not load, it may be in one of
    them, and the workers go on serving it as they last read it (QA new user: "no tool named" of a
    tool whose manifest was half-edited, served in the same minute)."""
    import re
    from pathlib import Path

    from workers.settings import get_settings

    tools_dir = get_settings().tools_dir

    def may_hold(path: str) -> bool:  # a folder in the tools directory is named so, or a `name:` line of it names it
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            text = ""
        try:
            within = Path(path).resolve().relative_to(tools_dir.resolve()).parts  # not the folders above it (QA 51d)
        except ValueError:
            within = ()
        return name in within or re.search(rf"^name:\s*['\"]?{re.escape(name)}['\"]?\s*$", text, re.M) is not None

    # the file, the field and why; only those that may hold it (QA 51c: every broken manifest of the folder was named)
    unread = [str(e) for e in registry.refused() if may_hold(e.path)]
    gone = "" if tools_dir.is_dir() else (  # QA 49: `tools` listed it, `show` said there was none
        f"; FITTEST_TOOLS_DIR ({tools_dir.resolve()}) is not there: if the tool is in it, the workers keep it "
        "registered, with its counters, and do not run it until the directory is back")
    fail(registry.no_tool_named(name) + (f"; these manifests do not load: {', '.join(unread)}: if it is in one of them, "
                                      "the workers serve it as they last read it, until it loads" if unread else "") + gone,
         REFUSED)


def versions_of(registry: ToolRegistry, namespace: str) -> list[ToolManifest]:
    """The versions of a namespace, or the command fails naming it."""
    versions = registry.versions(namespace)
    if not versions:
        no_tool_named(registry, namespace)
    return versions


def lineage(namespace: str) -> Lineage:
    """Every version of a namespace with its parent, status, quality and variants, and the changelog."""
    from evolution.served_version import head_version, served_original

    from workers.selector import attempt_timeout
    from workers.settings import get_settings

    registry, state, ledger = _stores()
    # Of a tool the workers stopped serving: its history. Not of one this shell cannot read (its tools
    # directory elsewhere, a manifest half-edited), which the workers may serve still (review 51).
    if not registry.versions(namespace) and last_removal(gone := ledger.changelog(namespace)) is not None:
        return Lineage(namespace=namespace, promotion=state.promotion(namespace), versions=[], changelog=gone)
    versions = versions_of(registry, namespace)
    promotion = state.promotion(namespace)
    history = state.promotion_history(namespace)
    stats, breakers = state.stats_and_breakers([m.key for m in versions])
    variants = ledger.all_variants([m.key for m in versions])
    changelog = ledger.changelog(namespace)
    # The original its promotion was made against, not a lower manifest version added since (QA
    # recheck N8: 0.9.0, added later, was labelled the original, and 1.0.0 a new version that waits).
    base = served_original(promotion, registry, namespace)
    head = head_version(promotion) or base
    mutations = {e.version: e.mutation for e in changelog if e.event == "promoted"}
    last_status = {p.evolved_version: p.status for p in history}
    rows = []
    for m in versions:
        status: VersionStatus = last_status.get(m.version) or (
            "not promoted" if m.parent_version is not None
            else "original" if m.version == base else "new manifest version")
        if status == "rolled_back" and m.version == base:
            status = "original"  # its by-hand promotion was rolled back: it stays every version's fallback
        elif status == "rolled_back" and promotion is not None and promotion.status == "on_trial" and m.version == promotion.parent_version:
            # its by-hand promotion rolled back, the trial it had interrupted resumed against it (QA 65c-B:
            # "rolled_back ◀ served on the other 75%")
            status = "tried against"
        elif promotion is not None and promotion.status == "rolled_back" and m.version == head and m.parent_version:
            status = "active"  # served again after its child was rolled back
        elif status in ("active", "on_trial") and m.version != head:
            on_trial_against = promotion is not None and promotion.status == "on_trial" and m.version == promotion.parent_version
            # another version was promoted since; or, while that one is on trial, it serves the other calls
            # (not always the parent of the version on trial: a version evolved by hand from an older
            # one is tried against the one served, QA 51d N2)
            status = "tried against" if on_trial_against else "superseded"
        rows.append(LineageVersion(
            version=m.version, parent=m.parent_version, status=status,
            served=m.version == head and not m.deprecated,  # selection skips a deprecated version
            deprecated=m.deprecated, quality=round(stats[m.key].quality, 4), successes=stats[m.key].successes,
            failures=stats[m.key].failures, refused_inputs=stats[m.key].refused_inputs, breaker=breakers[m.key],
            timeout_s=attempt_timeout(get_settings(), registry, m, stats[m.key]), manifest=registry.source(m.key),
            mutation=mutations.get(m.version, ""),
            variants=[VariantRow(**v.model_dump(include=set(VariantRow.model_fields) - {"effectiveness"}),
                                 effectiveness=round(v.effectiveness, 3)) for v in variants.get(m.key, [])],
        ))
    return Lineage(namespace=namespace, promotion=promotion, versions=rows, changelog=changelog)


@app.command()
@reads_state
def show(
    name: Annotated[str, typer.Argument(help="The namespace (tool name); NAME@VERSION shows that version's tool, once it is one of its versions.")],
    events: Annotated[int, typer.Option(min=0, help="Changelog entries to print (newest last); 0: none.")] = 15,
    json_out: JsonOpt = False,
) -> None:
    """The lineage of a tool: its versions as a tree with status, quality and mutation, and its changelog.

    Each version shows whether it is served, its status, quality and success/failure counters, the
    mutation that made it and its description variants; the changelog lists every verdict, promotion
    and rollback.

    Statuses: original (the registry's, every version's fallback); new manifest version (another
    version a manifest gives, not on trial: waiting for its turn or for `fittest promote`, or a lower
    version kept as a fallback); on_trial (an evolved or given version served a share of the calls);
    active (promoted and served); tried against (what the version on trial is tried against, its
    parent or the version served before: it serves the calls the version on trial does not);
    rolled_back; not promoted (evolved, never promoted); superseded (another version was promoted
    since)."""
    from evolution.served_version import head_version

    name, version = tool_argument(name)  # QA 55b L6: NAME@VERSION, as `feedback show` and `call -n` take it
    data = lineage(name)
    if version is not None and version not in (known := [v.version for v in data.versions]):
        fail(f"{name} has no version {version!r}" + (f" (it has {', '.join(known)})" if known else ""), REFUSED)
    if json_out:
        print_json(data.model_dump(mode="json"))
        return
    if not data.versions:  # its history, of a tool nothing of which is served now
        console.print(f"[bold]{literal(name)}[/bold]: no version served now; its changelog says what became of them")
        print_changelog(name, data.changelog, events)
        return
    from workers.settings import get_settings

    share = get_settings().trial_share
    promotion = data.promotion
    trial = promotion if promotion and promotion.status == "on_trial" else None
    pinned = promotion is not None and promotion.status == "active" and promotion.by == "operator"
    tree = Tree(f"[bold]{literal(name)}[/bold]")
    nodes: dict[str | None, Tree] = {}
    against = trial and (trial.parent_version or trial.original_version)
    # A trial whose other version is deprecated serves every call with the version on trial (QA recheck N5).
    alone = any(row.version == against and row.deprecated for row in data.versions)
    # With the version it would serve deprecated, the namespace serves the versions left, as the
    # policy ranks them (QA ops L6: no version was marked served, where 1.0.0 served every call).
    # A rolled-back version runs only when a call names it (QA recheck N7: it was marked offered).
    offered = [row.version for row in data.versions if not row.deprecated and row.status != "rolled_back"]
    in_its_place = set(offered) if trial is None and not any(row.served for row in data.versions) else set()
    promoted = head_version(promotion)
    # QA 60c F3: a promoted version whose files were lost (Redis restored without FITTEST_DATA_DIR) was called deprecated
    why_not_served = ("the version it would serve is deprecated" if promoted is None or promoted in [r.version for r in data.versions]
                      else f"the version its promotion serves, {promoted}, is given by no manifest: FITTEST_DATA_DIR/evolved lost?")
    # Only the newest version a manifest gives goes on trial, whatever became of it (QA ops L6: each
    # older one said it waited too; QA recheck N6: with the newest rolled back, the next said so).
    # (the rows are lowest first, as `manifest_to_trial` reads the versions: deprecated or not)
    newest_given = next((row.version for row in reversed(data.versions) if row.parent is None), None)
    for row in data.versions:  # lowest version first, so a parent is placed before its children
        color = STATUS_COLOR[row.status]
        served = ""
        if row.served:  # QA U: a version on trial was marked served where it serves a share of the calls
            on_trial = row.status == "on_trial"
            served = (" [bold]◀ served[/bold]" if not on_trial else " [bold]◀ served on every call[/bold] (the version "
                      "it is tried against is deprecated)" if alone else f" [bold]◀ served on {share:.0%} of the calls[/bold]")
        elif trial and row.version == against and not alone:
            served = f" [bold]◀ served on the other {1 - share:.0%}[/bold]"
        elif row.version in in_its_place:
            served = (f" [bold]◀ served[/bold] ({why_not_served})" if len(offered) == 1 else
                      f" [bold]◀ offered[/bold] ({why_not_served}: the policy ranks those left)")
        if row.deprecated:
            served += " [dim]deprecated: not offered by selection[/dim]"
        elif row.status == "new manifest version" and pinned and row.version == newest_given:  # QA V: nothing said why it was never tried
            # QA 65b: the hint's rollback also stopped serving the version promoted by hand, an evolved fix
            held = promotion.evolved_version if promotion is not None and promotion.evolved_version != promotion.original_version else None
            stops = f", and stops serving {literal(name)}@{literal(held)}, promoted by hand" if held else ""
            served += f" [dim]waits: `fittest promote` decides (`fittest rollback {literal(name)}` lets it go on trial{stops})[/dim]"
        elif row.status == "new manifest version" and row.version != newest_given:
            served += (f" [dim]a fallback: only the newest manifest version goes on trial (`fittest promote {literal(name)} "
                       f"{literal(row.version)}` serves it)[/dim]")
        breaker = {"open": "  [red]breaker open[/red]", "half_open": "  [yellow]breaker half-open[/yellow]"}.get(row.breaker, "")
        refused = f" (+{row.refused_inputs} refused)" if row.refused_inputs else ""
        label = (f"{literal(row.version)}  [{color}]{literal(row.status)}[/{color}]{served}  "
                 f"quality {row.quality:.2f}  {row.successes}✓ {row.failures}✗{refused}{breaker}  "
                 f"timeout {row.timeout_s:g} s")
        if row.mutation:
            label += f"\n[dim]{literal(row.mutation)}[/dim]"
        node = nodes.get(row.parent, tree).add(label)
        for v in row.variants:
            node.add(f"[dim]description #{literal(v.id)} {literal(v.status)} ({literal(v.environment)}) "
                     f"effectiveness {v.effectiveness:.2f} trials {v.trials} accesses {v.accesses}: "
                     f"{literal(shortened(v.text, 70))}[/dim]")
        nodes[row.version] = node
    console.print(tree)
    print_changelog(name, data.changelog, events)


# Under a table whose long reasons `abridged` cut in the middle (QA 64c-9: a reason cut there, no word where the rest was).
CUT_TOLD = "  [dim]… a long reason's middle is left out here; --json has it whole[/dim]"


def print_changelog(name: str, changelog: list[ChangelogEntry], events: int) -> None:
    """The newest `events` entries of a namespace's changelog, newest last."""
    entries = changelog[-events:] if events else []
    if entries:
        table = Table(title=f"changelog of {literal(name)}")
        for col in ("time", "event", "version", "by", "mutation", "reason"):
            table.add_column(col)
        for e in entries:
            version = e.version or (f"from {e.parent}" if e.parent else "")  # a candidate not installed
            table.add_row(when(e.time), literal(e.event), literal(version), literal(e.by),
                          literal(shortened(e.mutation or "", 60)), literal(abridged(e.reason or "", 150, 150)))
        console.print(table)
        if any(len(e.reason or "") > 300 for e in entries):
            console.print(CUT_TOLD)


def namespace_alone(version_goes: str | None) -> Callable[[str], str]:
    """The check of a command's namespace argument: NAME@VERSION, which `call`, `show` and
    `feedback` take, was told "no tool named 'sort_numbers@1.0.0'" here (QA 60d L1); the refusal
    says where this command takes the version (`version_goes`; None: it takes none)."""
    def check(name: str) -> str:
        namespace, at, version = name.partition("@")
        if at and namespace and version:
            where = (f"the version goes in {version_goes}" if version_goes is not None
                     else "this command takes no version: it acts on the version served")
            raise typer.BadParameter(f"{name!r}: give the tool's name alone ({namespace}); {where}")
        return name
    return check


@app.command()
@needs_redis
def evolve(
    name: Annotated[str, typer.Argument(help="The namespace to evolve.", callback=namespace_alone("--version VERSION"))],
    version: Annotated[Optional[str], typer.Option(help="The version to evolve from (default: the one served).")] = None,
    reason: Annotated[str, typer.Option(help="Why, for the changelog.")] = "evolved by hand",
    timeout: Annotated[float, typer.Option(min=0.1, callback=seconds, help="Seconds to wait for the evolution's report.")] = 600.0,
    json_out: JsonOpt = False,
) -> None:
    """Evolve a tool now and print the evolution's report (exit code 0 when a version was made).

    The workers gather its remembered failures and successes, ask the mutators, verify every
    candidate (static checks, test cases, replay) and put the first verified one on trial."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from evolution.models import EvolutionReport
    from workers.client import CallSender, NotDone
    from workers.settings import get_settings
    from workers.tool_catalog import load_registry

    versions = [m.version for m in versions_of(load_registry(get_settings()), name)]
    if version is not None and version not in versions:
        fail(f"{name} has no version {version!r} (it has {', '.join(versions)})", REFUSED)
    # Sent to be taken within --timeout or never (QA 49: with no worker, it ran once one started,
    # after the command had said to send it again, and a retry evolved twice).
    try:
        with worker_errors_told("prepare_evolution"), waiting_told("selection", timeout):
            answer = CallSender().ask_within("prepare_evolution", timeout, queue="selection",
                                             namespace=name, version=version, reason=reason)
    except NotDone:
        fail(f"no worker took the evolution of {name} within {timeout:g} s: is the selection worker running "
             "(`fittest up`)? Nothing was evolved: send it again once one runs")
    except CeleryTimeout:  # a worker took it, and it goes on (QA 49: told "are they running?")
        from workers.health import ask_workers

        try:
            no_evolver = not any("evolution" in answer.queues for answer in ask_workers(get_settings(), timeout=1.5).values())
        except Exception:  # Redis away meanwhile: what can be said without the workers' answer
            no_evolver = False
        if no_evolver:
            # QA 50d: told it went on, of a job that waited in the evolution queue for an evolver
            fail(f"the evolution of {name} waits in the evolution queue: no evolver runs (`fittest up` starts one, "
                 f"`fittest health` checks them); it runs once one does, and `fittest show {name}` then shows what it makes")
        fail(f"the evolution of {name} goes on in the workers past the {timeout:g} s waited for its report: "
             f"`fittest show {name}` shows the version it makes, and its changelog the outcome")
    report = read_answer(EvolutionReport, answer)
    if json_out:
        print_json(answer)
    if not json_out:
        show_report(report)
    raise typer.Exit(0 if report.status == "evolved" else 1)


def show_report(report: EvolutionReport) -> None:
    color = "green" if report.status == "evolved" else "red"
    console.print(f"evolution of {literal(report.parent)}: [{color}]{literal(report.status)}[/{color}] "
                  f"in {report.elapsed_s:.1f}s — {literal(report.message)}")
    if report.candidates:
        table = Table()
        for col in ("mutator", "mutation", "outcome", "stages", "reason"):
            table.add_column(col)
        unchecked = False
        for c in report.candidates:
            # QA 63e: "tests✓ replay✓" of a tool with side effects and no test cases, where nothing ran
            marks = ["✗" if not s.passed else "✓" if s.checked or s.stage == "static" else "–" for s in c.stages]
            unchecked = unchecked or "–" in marks
            stages = " ".join(f"{s.stage}{mark}" for s, mark in zip(c.stages, marks))
            table.add_row(literal(c.mutator), literal(shortened(c.mutation, 60)), literal(c.outcome), literal(stages),
                          literal(abridged(c.reason or "", 150, 150)))  # whole up to 300 (QA 53a: the twin's cut)
        console.print(table)
        if unchecked:
            console.print("  –: a stage with nothing to check (no test cases; nothing to replay, or a tool with side effects)")
        if any(len(c.reason or "") > 300 for c in report.candidates):
            console.print(CUT_TOLD)
    for note in report.notes:
        console.print(f"  [dim]{literal(note)}[/dim]")


def _unless_deprecated(registry: ToolRegistry, name: str, version: str) -> str:
    """What to add to "is served again" when that version's manifest deprecates it: selection does not
    offer it, and the namespace serves nothing until a version is promoted or the flag is taken out
    (QA recheck N3: a rollback to a deprecated parent said it was served again, and calls naming the
    tool were ranked by their scenario alone)."""
    from selection.manifest import tool_key

    manifest = registry.get(tool_key(name, version))
    if manifest is None or not manifest.deprecated:
        return ""
    return (f", but its manifest deprecates it: selection does not offer it, so no version of {literal(name)} is served "
            f"until one is promoted (`fittest promote {literal(name)} VERSION`) or `deprecated` is taken out")


@app.command()
@needs_redis
def rollback(
    name: Annotated[str, typer.Argument(help="The namespace.", callback=namespace_alone(None))],
    json_out: JsonOpt = False,
) -> None:
    """Roll back the promoted version of a tool: what it replaced is served again.

    For an evolved version that is its parent. A `fittest promote` is undone, one per rollback:
    the version served before it is served again (the original when nothing was promoted), or the
    trial it interrupted goes on. A promote of the version on trial decided that trial: its
    rollback rolls that version back. A manifest's new version that waited while a promote held
    goes on trial."""
    from evolution.served_version import fallback_version
    from evolution.promotions import PromotionChanged, PromotionError, trial_new_manifests
    from evolution.promotions import rollback as do_rollback

    registry, state, ledger = _stores()
    versions_of(registry, name)  # a name nobody serves is refused as such, not as "nothing promoted"
    try:
        promotion = do_rollback(state, ledger, name, registry)
    except PromotionChanged as exc:
        fail(str(exc))
    except PromotionError as exc:  # nothing to roll back: what was asked cannot be done
        fail(str(exc), REFUSED)
    trials = trial_new_manifests(state, ledger, registry, [name])  # one that waited while the promote held (QA V)
    if json_out:
        print_json(promotion.model_dump(mode="json"))
        return
    gone = f"{literal(name)}@{literal(promotion.evolved_version)}"
    restored = promotion.resumes
    if restored is not None:
        back, again = restored.evolved_version, "on trial again" if restored.status == "on_trial" else "served again"
        if restored.status == "on_trial" and promotion.evolved_version == (fallback_version(restored) or restored.original_version):
            # the trial's other side, which goes on serving the rest: undone, not rolled back (QA evolution L4)
            console.print(f"{gone}'s promotion by hand undone; {literal(name)}@{literal(back)} is on trial again "
                          f"against it{_unless_deprecated(registry, name, back)}")
        elif promotion.evolved_version == promotion.original_version:
            # the original is the fallback of every version: not taken out of the calls (QA 56a L1)
            console.print(f"{gone}'s promotion by hand undone; {literal(name)}@{literal(back)} is {again}, and "
                          f"{gone}, the original, stays its fallback{_unless_deprecated(registry, name, back)}")
        else:
            console.print(f"{gone} rolled back; {literal(name)}@{literal(back)} is {again}{_unless_deprecated(registry, name, back)}")
    elif promotion.evolved_version == promotion.original_version and promotion.parent_version is None:
        console.print(f"{gone}'s promotion by hand undone; it is served, as the original"
                      f"{_unless_deprecated(registry, name, promotion.evolved_version)}")
    else:
        back = promotion.parent_version or promotion.original_version
        # QA 63g: the original promoted by hand over a version activated since is undone, and stays a fallback
        undone = promotion.evolved_version == promotion.original_version
        said = f"{gone}'s promotion by hand undone" if undone else f"{gone} rolled back"
        kept = f", and {gone}, the original, stays its fallback" if undone else ""
        console.print(f"{said}; {literal(name)}@{literal(back)} is served again{kept}{_unless_deprecated(registry, name, back)}")
    for trial in trials:
        console.print(f"{literal(name)}@{literal(trial.evolved_version)}, a new manifest version, is on trial")


@app.command()
@needs_redis
def promote(
    name: Annotated[str, typer.Argument(help="The namespace.", callback=namespace_alone("its second argument: NAME VERSION"))],
    version: Annotated[str, typer.Argument(help="The version to serve.")],
    json_out: JsonOpt = False,
) -> None:
    """Serve a version of a tool (active, no trial), whatever is served now."""
    from evolution.promotions import AlreadyPromoted, PromotionChanged, PromotionError, promote_by_hand

    registry, state, ledger = _stores()
    try:
        promotion = promote_by_hand(state, ledger, registry, name, version)
    except PromotionChanged as exc:
        fail(str(exc))
    except AlreadyPromoted as exc:
        if json_out:
            current = state.promotion(name)
            print_json(current.model_dump(mode="json") if current is not None else None)
        else:
            console.print(literal(str(exc)))
        return
    except PromotionError as exc:  # a tool, version it does not know, or a deprecated one
        fail(str(exc), REFUSED)
    if json_out:
        print_json(promotion.model_dump(mode="json"))
    else:
        console.print(f"{literal(name)}@{literal(version)} is served (active)")


@app.command()
@needs_redis
def describe(
    name: Annotated[str, typer.Argument(help="The namespace.", callback=namespace_alone("--version VERSION"))],
    text: Annotated[str, typer.Argument(help="The new description to try.")],
    version: Annotated[Optional[str], typer.Option(help="The version it describes (default: the one serving most calls; "
                                                       "during a trial, the version it is tried against).")] = None,
    environment: Annotated[str, typer.Option(help="Only for calls whose context.environment is this ('any': all).")] = "any",
    json_out: JsonOpt = False,
) -> None:
    """Try a new description of a tool: a variant matched by a share of calls, kept if it does better.

    The variant is on test: FITTEST_AB_TEST_PROBABILITY of the calls are matched by it instead of
    the best active description; after FITTEST_VARIANT_MIN_TRIALS first attempts it is promoted if
    its calls succeed more often, and retired otherwise (`fittest show` then lists it as deprecated)."""
    from evolution.served_version import meant_version
    from selection.manifest import tool_key
    from workers.settings import get_settings

    registry, state, ledger = _stores()
    # As `feedback add` without a version: the one most calls see (QA: during a trial the version on
    # trial, serving 25 % of the calls, got the description)
    version = version or meant_version(state.promotion(name), registry, name, get_settings().trial_share)
    if version is None:
        no_tool_named(registry, name)
    manifest = registry.get(tool_key(name, version))
    if manifest is None:
        fail(f"{name} has no version {version}", REFUSED)
    try:
        variant = ledger.add_variant(manifest.key, text, manifest.description, environment=environment)
    except ValueError as exc:  # no text, too long, or the description itself
        fail(str(exc), REFUSED)
    if json_out:
        print_json(variant.model_dump(mode="json"))
    else:
        console.print(f"description #{variant.id} of {literal(manifest.key)} is on test")

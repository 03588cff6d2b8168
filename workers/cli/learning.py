"""`fittest explain`, `feedback add|show`, `weights`, `recommend`: why selection ranks as it does and
what it learned. What needs the vector memory is asked of the workers (the embedded store belongs
to the memory worker), `recommend` too (people's judgements of outputs are kept there); the
weights are read from Redis directly."""

from __future__ import annotations

import datetime
import enum
import math
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from selection.feedback import TrendPeriod
from selection.learner import FLOOR_WEIGHT
from selection.ports import SelectionWeights
from workers.cli.common import (
    CONTEXT_HELP,
    REFUSED,
    JsonOpt,
    MinSimilarityOpt,
    call_payload,
    console,
    err_console,
    fail,
    literal,
    names_what_no_tool_has,
    needs_redis,
    reads_state,
    print_json,
    read_answer,
    seconds,
    worker_errors_told,
    warn_if_namespace_unranked,
    tool_argument,
    waiting_told,
    when,
)

if TYPE_CHECKING:
    from workers.payloads import ExplainResult

app = typer.Typer()
feedback_app = typer.Typer(no_args_is_help=True)

TimeoutOpt = Annotated[float, typer.Option(min=0.1, callback=seconds, help="Seconds to wait for the workers' answer.")]


class Sentiment(str, enum.Enum):
    positive = "positive"
    negative = "negative"


def _ask(task: str, queue: str, timeout: float, **kwargs: Any) -> dict[str, Any]:
    """Send a task to the workers and wait for its answer, or fail with a message that says why."""
    answer = _ask_or_none(task, queue, timeout, **kwargs)
    if answer is None:
        # its message expires unapplied (CallSender.ask_within): a judgement is not recorded, say
        fail(f"no worker answered fittest.{task} within {timeout:g} s: is the memory worker running (`fittest up`)? "
             "Nothing was done: send it again once one runs")
    return answer


def _ask_or_none(task: str, queue: str, timeout: float, **kwargs: Any) -> dict[str, Any] | None:
    """`_ask`, or None when no worker answered within `timeout`; the task is then never done, as
    nobody waits for its answer any more."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.client import CallSender

    try:
        with worker_errors_told(task), waiting_told(queue, timeout):
            return CallSender().ask_within(task, timeout, queue=queue, **kwargs)
    except CeleryTimeout:
        return None


def _refuse_if_invalid(answer: dict[str, Any]) -> None:
    """Exit 2 with the workers' words when they refused the payload (workers/payloads.py InvalidReply)."""
    if answer.get("status") == "invalid":
        from selection.models import FieldError, joined_errors

        fail(joined_errors([FieldError.model_validate(e) for e in answer.get("errors", [])]) or str(answer.get("message")), REFUSED)


# --------------------------------------------------------------------------------------- explain
@app.command()
@needs_redis
def explain(
    scenario: Annotated[str, typer.Argument(help="The job, in words, as a call would describe it.")],
    input: Annotated[str | None, typer.Option("--input", "-i", help="The input a call would carry, as a JSON object (@PATH, -): its size and nesting count in the complexity, as a call's do.")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Rank as a call to this namespace; NAME@VERSION: that version.")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="Only tools with this tag (repeatable).")] = None,
    context: Annotated[str | None, typer.Option(help=CONTEXT_HELP)] = None,
    max_attempts: Annotated[int, typer.Option(min=1, max=20, help="Attempts the call would allow.")] = 5,
    min_similarity: MinSimilarityOpt = None,
    timeout: TimeoutOpt = 30.0,
    json_out: JsonOpt = False,
) -> None:
    """The ranking a call would get, with every component, without running anything.

    Rows are in the order the call would try them: one draw of the policy, with a namespace's
    served version before its other versions (and --namespace's first; a tool new to the system
    first on a share of the calls), so a row's score may be below the next one's. Columns:
    score, the policy's utility (its scale means nothing); P, the probability with which the policy put the tool in its place (it explores: a call may be
    served in another order); source, why it is a candidate (semantic: its description matches,
    or, with a sim under FITTEST_MIN_SIMILARITY, it succeeded on jobs that match; the namespace's
    original or promoted version, the version asked for); sim, the best cosine of the scenario
    to the tool's description and examples (rounded down, as --min-similarity compares it); quality, its score in Redis (1.00 new, down on
    failures); feedback, its feedback points for this scenario (-50..50); SPARC, the context
    match (0..1, neutral 0.5). The policy is the memory worker's FITTEST_POLICY, named in the
    title (this command's own environment does not choose it). A line per tool then says how the policy weighed it (its
    "semantic N" is the match its prior starts from: 0.8 x sim; a namespace's own version
    starts from 1.00, its original from 0.90).
    """
    payload = call_payload(scenario, input, namespace, tag, context, max_attempts, min_similarity, json_out)  # refused as `call` refuses it
    from workers.payloads import ExplainResult

    answer = _ask("explain", "selection", timeout, **payload)
    explained = read_answer(ExplainResult, answer)
    warn_if_namespace_unranked(payload["namespace"], explained)
    # A version the namespace does not have, or a tag no tool has, is refused, as `fittest call`
    # refuses it (QA AA: exit 0).
    not_there = names_what_no_tool_has(explained)
    if json_out:
        print_json(answer)
        if not_there or explained.status == "invalid":  # QA: a refusal by the workers exited 0 with --json
            raise typer.Exit(REFUSED)
        return
    _refuse_if_invalid(answer)  # refused by the workers: exit 2, as a refusal here (QA V)
    if not_there:  # without an empty table first (QA AB)
        fail(explained.message, REFUSED)
    _show_explained(scenario, explained)


def _show_explained(scenario: str, explained: ExplainResult) -> None:
    """The ranking as a table, a line per tool on how the policy weighed it, and what else to know."""
    if features := explained.context:
        source = features.get("source", {})
        shown = [f"{k} {', '.join(v) if isinstance(v, list) else v if isinstance(v, str) else f'{v:.2f}'}"
                 f" ({source.get(k, 'default')})" for k, v in features.items()
                 if k != "source" and v not in (None, [], "")]
        console.print(f"context as analysed: {literal('; '.join(shown))}")
    from workers.cli.calls import ranked_by

    # A line of its own: as the table's title it folded to the table's width (QA learning F9's weights version).
    by = ranked_by(explained, whose="workers' ")
    console.print(f"ranking for {literal(repr(scenario[:60]))}{literal(by)}", overflow="ignore", crop=False)
    table = Table()
    for col in ("#", "tool", "score", "P", "source", "sim", "quality", "feedback", "SPARC"):
        table.add_column(col, justify="left" if col in ("tool", "source") else "right", no_wrap=col == "tool")
    ranking = explained.ranking
    for i, r in enumerate(ranking, 1):
        b = r.breakdown
        table.add_row(str(i), literal(r.key), f"{r.score:.3g}", f"{r.probability:.2f}", literal(b.source),
                      # rounded down: a 0.7996 shown 0.80 was left out by --min-similarity 0.8 (QA 48)
                      f"{math.floor(b.similarity * 100) / 100:.2f}", f"{b.quality:.2f}", f"{round(b.feedback) or 0:+d}", f"{b.sparc:.2f}")
    console.print(table)
    for i, r in enumerate(ranking, 1):
        sparc = ", ".join(f"{k} {v:.2f}" for k, v in r.breakdown.sparc_components.items())
        console.print(f"{i}. [bold]{literal(r.key)}[/bold]: {literal(r.breakdown.rationale)}"
                      + (f" [dim](SPARC components: {literal(sparc)})[/dim]" if sparc else ""))
    if not ranking:  # as a call would end: no_candidates
        console.print(f"{literal(explained.message or 'no tool matches this scenario, namespace and tags')}: "
                      "a call would end with no_candidates")
    elif explained.held_back:
        console.print(f"held back, their circuit breaker open: {literal(', '.join(explained.held_back))}")
    if ranking and (age := explained.evidence_age_s) is not None:  # QA AD: 1 success nearby where 8 were stored
        console.print(f"[dim]ranked as a call now would be, by searches the selection cache kept for {age:g} s: outcomes "
                      f"since then are not counted yet (FITTEST_SELECTION_CACHE_TTL_S, {explained.cache_ttl_s or 30:g} s)[/dim]")
    for note in explained.degraded:
        console.print(f"[yellow]degraded:[/yellow] {literal(note)}")


# --------------------------------------------------------------------------------------- feedback
@feedback_app.command("add")
@needs_redis
def feedback_add(
    tool: Annotated[str, typer.Argument(help="NAME or NAME@VERSION (NAME: the version it serves; during a trial, the version it is tried against: NAME@VERSION judges the one on trial).")],
    sentiment: Annotated[Sentiment, typer.Argument(help="positive or negative.")],
    scenario: Annotated[str | None, typer.Option(help='The job it was (or was not) good for; default: the --call\'s scenario, else the tool in general (as "" says). One of spaces only is refused.')] = None,
    reason: Annotated[str, typer.Option(help="Why, in a few words.")] = "",
    quality: Annotated[float, typer.Option(min=0.0, max=1.0, help="How strongly (0..1).")] = 1.0,
    call: Annotated[str | None, typer.Option("--call", help="The id of the call whose output this judges: it takes the place of the feedback the call's outcome gave the version. The call must have run TOOL (NAME: the version of it the call ran).")] = None,
    timeout: TimeoutOpt = 30.0,
    json_out: JsonOpt = False,
) -> None:
    """Record a judgement of a tool version; selection weighs it by similarity and age (±50 points).

    What it refuses (a tool or version nobody serves, a call it does not know or that did not run
    TOOL, a blank scenario, a quality that is not a number) ends it with exit code 2, as a refused
    `fittest call` does."""
    from pydantic import ValidationError

    from selection.models import field_errors, joined_errors
    from workers.payloads import FeedbackReply, FeedbackRequest

    name, version = tool_argument(tool)
    try:  # refused here as the workers would refuse it, before asking them
        request = FeedbackRequest(tool=name, version=version, sentiment=sentiment.value, scenario=scenario,
                                  reason=reason, quality=quality, call_id=call)
    except ValidationError as exc:
        fail(joined_errors(field_errors(exc)), REFUSED)
    answer = _ask("record_feedback", "feedback", timeout, **request.model_dump(mode="json"))
    result = read_answer(FeedbackReply, answer)
    if json_out:
        print_json(answer)
    if result.status == "invalid":  # the workers' refusal of what was given
        fail(joined_errors(result.errors), REFUSED)
    if result.status != "recorded" or result.feedback is None:
        fail(joined_errors(result.errors) or "not recorded")
    if not json_out:
        f = result.feedback
        score = result.score_now
        where = ("for that scenario" if scenario else "for the call's scenario" if call else
                 "for a job worded as its description")
        effect = (f"its feedback score {where} is now {score:+.1f}" if score is not None else
                  "the vector memory is unavailable: it is kept and applied when the memory is back")
        if score is not None and not scenario and not call:
            # QA ops: "in general ... -39.0" read as -39 everywhere; the judgement is stored at the
            # description's vector, and a job counts it as far as its words are near (-1 to -4 here).
            effect += "; other jobs count it as far as their words are near the description's"
        value = f.value + 0.0  # QA U: a negative one of --quality 0 printed -0.00
        key = f"{literal(f.tool)}@{literal(f.version)}"
        # QA AC N5: "+0.00" said no more; QA AE: of a call, it gives the output back as it ran
        weight = "" if value else f", quality 0: takes back any judgement of call {call}; its output counts as it ran" \
            if call else ", quality 0: it counts for nothing"
        console.print(f"recorded {sentiment.value} feedback ({value:+.2f}{weight}) for {key}; {effect}")
        if result.first_now is not None:
            # QA selection F1: seven negatives, and nothing said the next call still went to the tool
            first = literal(result.first_now)
            chance = "" if (result.first_probability or 1.0) >= 1.0 else f" on {result.first_probability:.0%} of such calls"
            console.print(f"a call of that scenario now tries {first} first{chance}"
                          + (": a judgement without --call scales its score by at most half, which did not take it "
                             "below the next candidate (`fittest explain` shows what keeps it ahead: its successes on "
                             "such jobs, or its description's match); judging its calls' outputs (--call) counts them "
                             "as failures" if result.first_now == f.key and value < 0 and not call else ""))
        if (trial := result.trial) and trial.decided_before:  # QA 65c-A
            verdict = "activated" if trial.status == "active" else trial.status.replace("_", " ")
            console.print(f"the trial of {literal(trial.namespace)}@{literal(trial.evolved_version)} that counted this call "
                          f"had been decided ({verdict}) before this judgement: it counts in the version's record, not in "
                          f"the verdict" + (f" (`fittest rollback {literal(trial.namespace)}` undoes the activation)"
                                            if trial.status == "active" else ""))
        elif trial := result.trial:  # the call counted in a trial of the version, or of one tried against it
            c = trial.counts
            on_trial = f"{c.evolved_successes}/{c.evolved_successes + c.evolved_failures}"
            parent = f"{c.parent_successes}/{c.parent_successes + c.parent_failures}"
            console.print(f"the trial of {literal(trial.namespace)}@{literal(trial.evolved_version)} now counts "
                          f"{on_trial} successes of the version on trial, {parent} of the version it is tried against: "
                          f"{trial.status.replace('_', ' ')}")
        if not (version or call):  # which version a name alone stood for (QA F8: during a trial it was not plain)
            console.print(f"({literal(name)} alone: {key}, the version it serves)")


@feedback_app.command("show")
@reads_state
def feedback_show(
    tool: Annotated[str, typer.Argument(help="NAME (all its versions) or NAME@VERSION (that version's entries).")],
    limit: Annotated[int, typer.Option(min=1, help="Entries listed, newest first.")] = 20,
    per: Annotated[TrendPeriod, typer.Option(help="The trend's period: hour (the first day of a tool), day or week.")] = "day",
    timeout: TimeoutOpt = 30.0,
    json_out: JsonOpt = False,
) -> None:
    """A tool's feedback entries, newest first, and their trend per day, hour or week (of all its versions).

    Only what counts in selection's scores is shown: a call's outcome entry that a judgement of
    that call replaced (`feedback add --call`) is left out, and so is the negative entry of a
    failure in an outage the tool recovered from (its breaker's probe succeeded), or of a refusal of
    the input of a job it did before (the caller's mistake); the title says how many were. A
    judgement given with --quality 0 is shown, at +0.00: it is stored, and counts for nothing."""
    from selection.feedback import POSITIVE_QUALITY
    from selection.manifest import tool_key
    from workers.cli.evolution import versions_of
    from workers.feedback_store import REPORT_SCAN, FeedbackReport, FeedbackShown
    from workers.settings import get_settings
    from workers.state import open_state_store
    from workers.tool_catalog import load_registry

    name, version = tool_argument(tool)
    known = [m.version for m in versions_of(load_registry(get_settings()), name)]
    if version is not None and version not in known:
        fail(f"{name} has no version {version!r} (it has {', '.join(known)})", REFUSED)
    # One version's entries are picked from all of the tool's that the report reads.
    # `per` only when asked: a worker of an earlier release refuses a key it does not know
    answer = _ask("feedback_report", "feedback", timeout, tool=name, limit=REPORT_SCAN if version else limit,
                  **({} if per == "day" else {"per": per}))
    _refuse_if_invalid(answer)
    report = read_answer(FeedbackReport, answer)
    shown = entries(report.total)
    if version:
        mine = [e for e in report.entries if e.version == version]
        # The version's own entries and counts (QA ops: the tool's were given as its)
        report = report.model_copy(update={"entries": mine[:limit], "replaced": report.replaced_by_version.get(version, 0),
                                           "forgiven": report.forgiven_by_version.get(version, 0)})
        shown = f"{entries(len(mine))} (of the tool's {report.total}; the trend is the tool's)"
    if n := report.replaced:
        shown += f"; {n} outcome {'entry' if n == 1 else 'entries'} left out, replaced by a judgement of {'its' if n == 1 else 'their'} call"
    if n := report.forgiven:
        # QA AF: of the tool that took a refused input, what is left out are successes
        shown += (f"; {entries(n)} left out, of an outage the tool recovered from or of a call whose input "
                  "a tool that does the job refused (the caller's mistake)")
    if len(report.entries) == limit and (len(mine) if version else report.total) > limit:  # QA 56a L4: 20 of 48, unsaid
        shown += f"; the newest {limit} shown (--limit)"
    keys = [tool_key(name, v) for v in ([version] if version else known)]
    quality = {key: stats.quality for key, stats in open_state_store(get_settings()).stats(keys).items()}
    if json_out:  # with each version's quality: under POSITIVE_QUALITY its successes give no entry (QA final)
        print_json(FeedbackShown(**dict(report), quality=quality).model_dump(mode="json"))
        return
    table = Table(title=f"feedback on {literal(tool)}: {shown}")
    for col in ("when", "version", "value", "source", "reason", "scenario"):
        table.add_column(col, justify="right" if col == "value" else "left", overflow="fold")
    for e in report.entries:
        value = e.value + 0.0  # -0.0 (a negative one of quality 0) as +0.00, as `feedback add` prints it
        color = "green" if value > 0 else "red" if value < 0 else "default"
        table.add_row(when(e.timestamp), literal(e.version), f"[{color}]{value:+.2f}[/{color}]",
                      literal(e.source), literal(e.reason), "(in general)" if e.general else literal(e.scenario[:80]))
    console.print(table)
    if report.trend:
        period = report.per  # a worker of an earlier release answers without it: per day, the one it counts
        trend = Table(title=f"trend per {period}", caption="mean vote: each entry as strong as its value (one of quality 0 counts for nothing), a person's as five outcomes', as the scores weigh them")
        for col in (f"{period} (UTC)", "entries", "positive", "negative", "mean vote"):
            trend.add_column(col, justify="left" if col.endswith("(UTC)") else "right")
        for t in report.trend:  # periods are counted in UTC: so are their starts (review: local dates were a day off)
            start = datetime.datetime.fromtimestamp(t.start, datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M" if period == "hour" else "%Y-%m-%d")
            trend.add_row(start, str(t.count), str(t.positive), str(t.negative), f"{t.mean_value + 0.0:+.2f}")
        console.print(trend)
    # QA ops: `tools` counted 49 successes of a version where this listed 23 positive entries, unexplained.
    for key, q in quality.items():
        if q < POSITIVE_QUALITY:
            console.print(f"{literal(key)}'s quality is {q:.2f}: under {POSITIVE_QUALITY}, its successes give no "
                          "entry (the design's rule), its failures still do")


def entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


# What the weights and `recommend` leave out of the learner's window (selection/learner.py
# `ExecutionRecord.forgiven`), said alike (QA 57d L8: forgiven outages were called callers' mistakes);
# `recommend` leaves out a fallback's refusals of another tool's job too (`not_its_job`).
SET_ASIDE = "a caller's mistake, or a failure of an outage its version recovered from"


# --------------------------------------------------------------------------------------- weights
def classifier_alone(w: SelectionWeights, before: SelectionWeights) -> bool:
    """Whether a version of the weights stored a refitted tool classifier and nothing else: a retrain
    that leaves the weights as they were stores a new version for its classifier (QA 63b: v2 to v14
    showed the same weights, and nothing said why their versions moved)."""
    return w.weights == before.weights and bool(w.classifier) and w.classifier != before.classifier


@app.command()
@reads_state
def weights(
    history: Annotated[int, typer.Option(min=0, max=10_000, help="Earlier versions listed, besides the current one (the newest 100 are kept).")] = 10,
    retrain: Annotated[bool, typer.Option("--retrain", help="Retrain them first, now, from the recent records, as the "
                                          "beat does every FITTEST_RETRAIN_INTERVAL_S (one retrain at a time).")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, callback=seconds, help="Seconds to wait for the memory worker's retrain (--retrain).")] = 60.0,
    json_out: JsonOpt = False,
) -> None:
    """The SPARC weights selection uses now, their evidence, and their history (newest first).

    Each version shows the tool classifier stored with it: its revision and the successes it was
    refitted on; "off" when the workers' latest retrain found FITTEST_TOOL_CLASSIFIER false (the
    revision stays stored, for when it is turned on again). Below: each component's correlation
    with success beside the noise of that many records (a component steers only above it), and why
    the last retrain left the weights as they were."""
    from selection.sparc import COMPONENTS
    from workers.payloads import WeightsShown
    from workers.payloads import RetrainResult
    from workers.settings import get_settings
    from workers.state import open_state_store
    from workers.tool_classifier import CLASSIFIER_OFF

    if retrain:  # QA ops: the weights read "never learned" for the beat's first interval, with 500 records stored
        done = read_answer(RetrainResult, _ask("retrain_weights", "learning", timeout))
        said = (f"retrained: weights v{done.version} stored" if done.changed
                else f"retrained: nothing new stored ({done.reason or ('see last_retrain' if json_out else 'see below')})")
        (err_console if json_out else console).print(said, highlight=False)
    state = open_state_store(get_settings())
    current = state.weights()
    # QA AC: the history holds the current version too, so `--history N` listed N - 1 earlier ones
    past = [w for w in state.weights_history(history + 1) if w.version != current.version][:history] if history else []
    note = state.last_retrain()
    if note is not None and note.at <= current.updated_at:  # a later retrain stored these weights
        note = None
    # The workers' setting, as their latest retrain found it, not this shell's (QA 58d N4)
    latest_fit = (note.evidence if note is not None else current.evidence).classifier
    classifier_off = latest_fit is not None and latest_fit.unchanged == CLASSIFIER_OFF
    if json_out:
        print_json(WeightsShown(current=current, history=past, last_retrain=note).model_dump(mode="json"))
        return
    table = Table(title=f"SPARC weights v{current.version}" + ("" if current.version else " (defaults: never learned)"))
    for col in ("version", "updated", *COMPONENTS, "records", "success rate", "classifier", "successes"):
        table.add_column(col, justify="left" if col in ("version", "updated", "classifier") else "right")
    rows = [current, *past]
    for w in rows:
        ev, fit = w.evidence, w.evidence.classifier
        table.add_row(f"v{w.version}", when(w.updated_at) if w.updated_at else "-",
                      *[f"{w.weights.get(c, 0.0):.2f}" for c in COMPONENTS], str(ev.records) if ev.records else "-",
                      f"{ev.success_rate:.2f}" if ev.success_rate is not None else "-",
                      "off" if w is current and classifier_off else literal(w.classifier or "-"),
                      str(fit.successes) if fit is not None and fit.successes is not None else "-")
    console.print(table)
    refits = [f"v{w.version}" for w, before in zip(rows, rows[1:]) if classifier_alone(w, before)]
    if refits:
        console.print(f"the same weights as the version before, with the tool classifier refitted: {', '.join(refits)}")
    if classifier_off:
        console.print(f"tool classifier: {CLASSIFIER_OFF}")
    evidence = current.evidence
    if evidence.correlations:
        corr = ", ".join(f"{c} {r:+.2f}" for c, r in evidence.correlations.items())
        beyond = (f" (noise of {evidence.records} records: {evidence.noise:.2f}; a component above it steers in "
                  f"proportion, one within it keeps {FLOOR_WEIGHT:g}, one below it none)"
                  if evidence.noise is not None else "")  # weights of an earlier release stored none
        console.print(f"correlation of each component with success: {literal(corr)}{literal(beyond)}")
    if evidence.set_aside:  # as recommend says it (QA ops: the two counted the window differently)
        console.print(f"{evidence.set_aside} records set aside ({SET_ASIDE}) left out")
    # QA F9: only --json said why the last retrain left the weights as they were; QA AC: nor did
    # anything when that retrain stored nothing (a classifier refitted is stored with the weights)
    unchanged = (note.evidence if note is not None else evidence).unchanged
    if unchanged:
        aside = f", {note.evidence.set_aside} set aside" if note is not None and note.evidence.set_aside else ""
        ran = f"last retrain ({when(note.at)}, {note.evidence.records} records{aside}): " if note is not None else ""
        # QA 56a L5: v1 to v16 in 20 minutes, each "left as they were": a refitted classifier is a new version
        before = next((w for w in state.weights_history(2) if w.version != current.version), None)
        refit = (f" (v{current.version} stored the classifier it refitted)"
                 if note is None and before is not None and before.weights == current.weights and current.classifier else "")
        console.print(f"{ran}weights left as they were: {literal(unchanged)}{refit}")


# --------------------------------------------------------------------------------------- recommend
@app.command()
@needs_redis
def recommend(
    min_runs: Annotated[int, typer.Option(min=1, help="Attempts a version needs in a context to be judged there.")] = 5,
    max_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="Success rate below which it is listed.")] = 0.5,
    timeout: Annotated[float, typer.Option(min=0.1, callback=seconds, help="Seconds to wait for the memory worker, which applies people's judgements; without its answer the window is read from Redis as the calls ran.")] = 5.0,
    json_out: JsonOpt = False,
) -> None:
    """Tool versions with low success in some context (task type, phase, language, testing status,
    a band of input complexity: 0.0-0.2, 0.2-0.5, 0.5-1.0), with the evidence, from the learner's
    window of recent attempts; contexts with exactly the same runs are one row. An output a person judged wrong
    (`feedback add ... --call`) counts as a failure, `judged_wrong`, as it does for the weights."""
    from selection.recommend import RecommendationReport, recommendation_report
    from workers.settings import get_settings
    from workers.state import open_learning_state
    from workers.tool_catalog import load_registry

    answer = _ask_or_none("recommend", "learning", timeout, min_runs=min_runs, max_rate=max_rate)
    if answer is not None:
        _refuse_if_invalid(answer)
        report = read_answer(RecommendationReport, answer)
    else:  # the learner's window in Redis, as the calls ran
        settings = get_settings()
        recent = open_learning_state(settings).recent()
        report = recommendation_report(recent, min_runs, max_rate, judgements_applied=False,
                                       manifests=load_registry(settings).all())
        err_console.print(f"[yellow]no memory worker answered within {timeout:g} s: the recent attempts are counted "
                          "as they ran, without the judgements people made of their outputs, and with the failures "
                          "of outages a recovery forgave[/yellow]", highlight=False)
    found = report.recommendations
    if json_out:
        print_json(report.model_dump(mode="json"))
        return
    aside = (f"; {report.set_aside} set aside ({SET_ASIDE}, or a refusal of another tool's job) left out"
             if report.set_aside else "")
    if report.not_served:
        aside += f"; {', '.join(report.not_served)} no longer served (removed or deprecated), left out"
    if not found:
        console.print(f"nothing to recommend: no version below {max_rate:.0%} success with {min_runs}+ runs "
                      f"in any context ({report.records} recent records{aside})")
        return
    judged = f", {report.judged_wrong} judged wrong" if report.judged_wrong else ""
    table = Table(title=f"recommendations from {report.records} recent attempts{judged}{aside}")
    for col in ("tool", "context", "runs", "success", "elsewhere", "errors", "advice", "failed on"):
        table.add_column(col, justify="right" if col in ("runs", "success", "elsewhere") else "left", overflow="fold")
    given: dict[str, int] = {}  # advice -> the row that gives it (QA ops: 11 lines repeated on every row)
    for i, r in enumerate(found, 1):
        advice = f"[dim](as in row {given[r.advice]})[/dim]" if r.advice in given else literal(r.advice)
        given.setdefault(r.advice, i)
        context = literal(r.context) + (" [dim](detected)[/dim]" if r.detected else "")
        if r.same_runs:
            context += f" [dim](the same runs: {literal(', '.join(r.same_runs))})[/dim]"
        table.add_row(f"{i}. {literal(r.tool)}", context, str(r.runs), f"{r.success_rate:.0%}",
                      "-" if r.elsewhere_rate is None else f"{r.elsewhere_rate:.0%}",
                      literal(", ".join(f"{k} {v}" for k, v in r.error_classes.items())), advice,
                      literal(" | ".join(s[:60] for s in r.failed_scenarios)))
    console.print(table)


# --------------------------------------------------------------------------------------- forget
FORGOTTEN_LABELS = {"feedback": "feedback entries (a person's judgements of them included)",
                    "executions": "execution records", "failures": "failure records",
                    "recent_successes": "recent successes kept for evolution's replay",
                    "learning_window": "records of the learner's window", "pending_writes": "vector writes waiting for the store",
                    "results": "call results"}


@app.command()
@needs_redis
def forget(
    call_ids: Annotated[list[str], typer.Argument(help="The ids of the calls (as `fittest call` prints them, or as their caller chose them).")],
    timeout: TimeoutOpt = 30.0,
    json_out: JsonOpt = False,
) -> None:
    """Remove every record of these calls that holds what their callers sent: their results, their
    points in the vector store's history (feedback, a person's judgement of them included,
    executions, failures), the recent successes kept for evolution's replay, the learner's window
    and the vector writes waiting for the store; once now and once more a minute later, for records
    that were still on their way. A call still running is left alone: forget it once it ended.

    Kept, as they hold no call's text: the counts the calls added (quality, successes, breakers),
    the weights and the tool classifier, and per-call markers. Not reached by a call's id: the
    changelog's verification notes (`fittest show`) and the evolution patterns, which quote
    failing inputs and tools' error messages (README, "What a call leaves behind")."""
    from pydantic import ValidationError

    from selection.models import field_errors, joined_errors
    from workers.payloads import ForgetReport, ForgetRequest

    try:  # refused here as the workers would refuse it, before asking them
        request = ForgetRequest(call_ids=call_ids)
    except ValidationError as exc:
        fail(joined_errors(field_errors(exc)), REFUSED)
    answer = _ask("forget", "feedback", timeout, **request.model_dump(mode="json"))
    _refuse_if_invalid(answer)
    report = read_answer(ForgetReport, answer)
    if json_out:
        print_json(report.model_dump(mode="json"))
    else:
        if report.call_ids:
            said = "; ".join(f"{n} {FORGOTTEN_LABELS.get(kind, kind)}" for kind, n in report.removed.items())
            console.print(f"forgot {len(report.call_ids)} call(s): removed {said}", highlight=False)
            if report.again_in_s is not None:
                console.print(f"[dim]they are forgotten once more in {report.again_in_s:g} s, for records that were "
                              "still on their way[/dim]", highlight=False)
        if report.running:
            err_console.print(f"[yellow]still running, left alone:[/yellow] {literal(', '.join(report.running))}: forget "
                              "them once they ended", highlight=False)
    if report.store_error:
        fail(f"{report.store_error}; send `fittest forget` again once it answers")
    if report.running:
        raise typer.Exit(1)

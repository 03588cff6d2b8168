"""`fittest call`: send one call and show it attempt by attempt; `fittest result`: show one sent earlier."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table

from workers.cli.common import (
    CONTEXT_HELP,
    NO_WORKER_NOW,
    PING_TIMEOUT_S,
    REFUSED,
    UNREADABLE,
    JsonOpt,
    MinSimilarityOpt,
    RefusedPayload,
    abridged,
    call_payload,
    console,
    fail,
    literal,
    names_what_no_tool_has,
    needs_redis,
    print_json,
    print_output_json,
    queue_taken,
    refuse_payload,
    seconds,
    told_when_stopped,
    warn_if_namespace_unranked,
    warn_of_other_stacks,
)

if TYPE_CHECKING:
    from celery.result import AsyncResult

    from selection.models import AttemptSummary, CallEvolution, CallResult

    from workers.client import CallSender
    from workers.payloads import NoResult

app = typer.Typer()

# The exit codes of `call` and `result` (and REFUSED, every command's; UNREADABLE, common.py's).
SUCCEEDED, DID_NOT_SUCCEED = 0, 1


# --------------------------------------------------------------------------------------- calls
@app.command()
@needs_redis
def call(
    scenario: Annotated[str, typer.Argument(help="What you need done, in words.")],
    input: Annotated[str | None, typer.Option("--input", "-i", help="The tool input as a JSON object; @PATH reads it from a file, - from standard input.")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Serve this namespace's promoted version first; NAME@VERSION: that version.")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="Only tools with this tag (repeatable; all must match).")] = None,
    max_attempts: Annotated[int, typer.Option(min=1, max=20, help="Candidates tried before evolution.")] = 5,
    context: Annotated[str | None, typer.Option(help=CONTEXT_HELP)] = None,
    min_similarity: MinSimilarityOpt = None,
    timeout: Annotated[float, typer.Option(min=0.1, callback=seconds, help="Seconds to wait for the result.")] = 120.0,
    call_id: Annotated[str | None, typer.Option("--call-id", help=(
        "The call's id, chosen by you (letters, digits and _.:- only, at most 128): the same call sent again under it "
        "runs once, and its result answers both; another job under a used id is refused (exit 2)."))] = None,
    json_out: JsonOpt = False,
) -> None:
    """Send one fittest.resilient_tool_call to the workers and print its result.

    The payload is checked before it is sent. Exit code 0 when a tool succeeded; 1 when the call
    did not, or when no result came within --timeout (the call stays queued, and `fittest result
    ID` shows it once a worker has run it); 2 for a payload the workers would refuse (or did:
    a limit of theirs may differ from this machine's settings), or a version or tag no tool has;
    3 when this CLI cannot read the workers' answer (workers of another release: the answer is
    printed as it came); 141 when what reads its output went away (`| head`); 130 and 143 when
    Ctrl-C or SIGTERM stopped the wait (the call stays queued: its id is printed).

    The table shows each attempt; the line under it, the head of the ranking, each version with
    the probability with which the policy put it in its place given the places before it (so a
    later place may read p=1.00: `fittest explain` gives every component)."""
    from workers.client import CallSender, Refused
    from workers.settings import get_settings

    payload = call_payload(scenario, input, namespace, tag, context, max_attempts, min_similarity, json_out, call_id)
    # QA 60a F4: sent under a prefix no stack serves, the call was run by the database's workers and
    # what this CLI recorded of it in flight stayed there, unread, for good
    warn_of_other_stacks(get_settings(), "this call is recorded in flight under this one, where their workers do not look")
    client = CallSender()
    try:
        pending = client.send("resilient_tool_call", **payload)
    except Refused as exc:  # its --call-id names another job
        refuse_payload(RefusedPayload(str(exc), exc.errors), json_out)
    stays = f"the call stays queued, and `fittest result {pending.id}` shows it once a worker has run it"
    # QA 60d M3: stopped while it waited, the command printed nothing of a call that was sent and runs
    with told_when_stopped(pending.id, f"stopped waiting: {stays}", json_out):
        show_when_done(client, pending, timeout, json_out,
                       f"is a selection worker running (`fittest health`)? {stays}", early=lambda: no_selection_worker(client, pending.id, stays),
                       namespace=payload["namespace"], sent_as_call=True)


@app.command()
@needs_redis
def result(
    call_id: Annotated[str, typer.Argument(help="The call's id: the task id of its fittest.resilient_tool_call or fittest.call_tool (the id `fittest call` prints; the call_id its caller chose, for a call sent by fittest's client).")],
    timeout: Annotated[float, typer.Option(min=0.1, callback=seconds, help="Seconds to wait for it when it has not finished yet.")] = 10.0,
    json_out: JsonOpt = False,
) -> None:
    """The result of a call sent earlier, waiting for it if it has not finished; results are kept
    for a day. Exit codes as for `call`; 1 also for a call revoked (Flower, `celery control
    revoke`) or whose task raised in its worker, which have no result."""
    from selection.models import CALL_ID_PATTERN
    from workers.client import CallSender

    if not re.fullmatch(CALL_ID_PATTERN, call_id):
        fail(f"{abridged(call_id)!r} is not a call id (letters, digits and _.:- only, at most 128)", REFUSED)
    client = CallSender()
    show_when_done(client, client.celery.AsyncResult(call_id), timeout, json_out,
                   "it is queued or running, or no call with this id was sent in the last day")


# How often the workers are asked (PING_TIMEOUT_S each time) whether one takes the selection queue
# before a call's wait ends for want of one: after a Redis restart they reconnect after 2 s, then 4 s.
SELECTION_PINGS = 3


def no_selection_worker(client: CallSender, call_id: str, stays: str) -> str | None:
    """Why the call's result cannot come (no worker takes the selection queue), or None. A call a
    worker took (handed on to a later step) had one; else the workers are asked, a few times: QA
    ops M2 saw a call that was running end with this after a Redis restart of 6 s, its one 1 s ping
    sent while the workers were still reconnecting."""
    from workers.health import MEMORY_QUEUE, ask_workers
    from workers.settings import get_settings

    if client.step_of(call_id) not in (None, *SELECTION_STEPS):
        return None
    for _ in range(SELECTION_PINGS):
        answers = ask_workers(get_settings(), timeout=PING_TIMEOUT_S)
        if any(MEMORY_QUEUE in answer.queues for answer in answers.values()):
            return None
        if client.step_of(call_id) not in (None, *SELECTION_STEPS):
            return None
    return f"no worker takes the selection queue (`fittest up` starts them, `fittest health` checks them); {stays}"


# The steps a call is at until a selection worker takes it.
SELECTION_STEPS = ("fittest.resilient_tool_call", "fittest.call_tool")
# What a call in flight is doing at its step, for a user who stopped waiting for it.
def _still_running(client: CallSender, call_id: str) -> str | None:
    """Where a call that has not finished is (`CallSender.whereabouts`), and how to see its end."""
    from workers.health import MEMORY_QUEUE

    where = client.whereabouts(call_id)
    if where is None:
        return None
    said = f"{where} and goes on; `fittest result {call_id}` shows it when it ends"
    if client.step_of(call_id) in (None, *SELECTION_STEPS) and not queue_taken(MEMORY_QUEUE):  # QA 57a M7
        said += f"; {NO_WORKER_NOW.format(queue=MEMORY_QUEUE)}"
    return said


def ended_without_result(client: CallSender, call_id: str) -> tuple[str, NoResult] | None:
    """Why a call's task ended with no result, and the status a script reads for it: revoked (an
    operator's, from Flower or `celery control revoke`), or raised in its worker (a fittest task
    ends calls with a result, so this is a worker's bug, or a task another program stored under
    the id); None when it did not end so, or that cannot be read."""
    try:
        meta = client.celery.backend.get_task_meta(call_id)
    except Exception:  # Redis away, an envelope that does not read: the error at hand says more
        return None
    if meta.get("status") == "REVOKED" and str(meta.get("result")) == "expired":
        # a request sent to be taken within its sender's wait, as `fittest evolve` sends one (QA 49:
        # told "revoked from Flower" of an evolution no worker took in time)
        return (f"task {call_id} expired before a worker took it (its sender waited no longer): nothing ran, "
                "and it has no result", "expired")
    if meta.get("status") == "REVOKED":
        return f"call {call_id} was revoked (by its sender, from Flower or with `celery control revoke`): it has no result", "revoked"
    if meta.get("status") == "FAILURE":
        error = meta.get("result")
        return (f"call {call_id} ended with an error in its worker, not with a result: "
                f"{type(error).__name__}: {str(error).strip()[:300]}", "error")
    return None


def _past_revoke(client: CallSender, call_id: str, deadline: float, revoked: tuple[str, NoResult],
                 no_result: Callable[..., NoReturn]) -> dict[str, Any]:
    """The result of a call revoked while a worker ran its step, which a revoke without terminate
    does not stop (`CallSender.past_revoke`); the end of the command when it ended revoked
    (QA: a revoked call's `fittest result` printed a traceback), or still runs at the deadline."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    try:
        stored = client.past_revoke(call_id, max(deadline - time.monotonic(), 0.0))
    except CeleryTimeout:
        no_result(f"call {call_id} was revoked while a worker ran its step: a revoke without terminate stops only "
                  f"the steps not started yet, so it goes on; `fittest result {call_id}` shows what it ends with "
                  "(`celery control terminate SIGTERM ID` stops it)")
    if stored is None:  # revoked for good, or an error stored over the mark
        no_result(*(ended_without_result(client, call_id) or revoked))
    return stored


def show_when_done(client: CallSender, pending: AsyncResult, timeout: float, json_out: bool, unfinished: str,
                   early: Callable[[], str | None] | None = None, namespace: str | None = None,
                   sent_as_call: bool = False) -> None:
    """Wait for a call's result and print it, exiting with the call's exit code; `unfinished` says
    what a timeout means to the user. A call found nowhere at one of the wait's looks
    (`CallSender.wait_for_call`) ends the command at once, with `--json` as status "unknown", which
    a script must not poll for ever (QA 49). `early`, asked once at the first look, says why no
    result can come although the call is known, or None to wait on. `sent_as_call`: the id is of a
    call this command sent, so an answer that reads as no call's is one of workers of another
    release, not another task's (QA recheck 47: "not a call's id", exit 1)."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.client import NotACall, UnknownCall, UnreadableAnswer, read_call

    def no_result(message: str, status: NoResult = "pending") -> NoReturn:
        """The end of a wait without a result; with --json, as JSON on stdout too, so that a script
        reads the call's id where it reads a result (QA ops: stdout was empty, the id on stderr only)."""
        from workers.payloads import CallWithoutResult

        if json_out:
            print_json(CallWithoutResult.model_validate({"call_id": pending.id, "status": status, "message": message}).model_dump())
        fail(message, DID_NOT_SUCCEED)

    def first_look() -> None:
        if early is not None and (why := early()) is not None:
            no_result(f"no result for call {pending.id}: {why}")

    deadline = time.monotonic() + timeout
    try:
        outcome = client.wait_for_call(pending, timeout, first_look)
    except typer.Exit:
        raise
    except UnknownCall as exc:
        no_result(str(exc), "unknown")
    except CeleryTimeout:
        no_result(f"no result for call {pending.id} within {timeout:g} s: {_still_running(client, pending.id) or unfinished}")
    except Exception as exc:
        from workers.cli import redis_unavailable

        if (cause := redis_unavailable(exc)) is not None:
            # The call was sent and goes on: its id is what finds its result (QA recheck: only "Redis
            # does not answer", and the call, which succeeded, could not be looked up)
            no_result(f"waiting for call {pending.id}: Redis does not answer ({cause}); the call goes on, and "
                      f"`fittest result {pending.id}` shows it once Redis answers")
        ended = ended_without_result(client, pending.id)
        if ended is None:
            raise
        if ended[1] != "revoked":
            no_result(*ended)
        outcome = _past_revoke(client, pending.id, deadline, ended, no_result)
    try:
        result = read_call(pending.id, outcome)
    except NotACall as exc:  # QA: a judgement's id, which Flower lists, was said to be of another release
        if sent_as_call:
            print_json(outcome)
            fail(f"call {pending.id}: the workers' answer does not read as a call's (no call_id and status): "
                 "are this client and the workers the same release?", UNREADABLE)
        no_result(str(exc), "not_a_call")
    except UnreadableAnswer as exc:  # printed as it came, and told from a call that did not succeed
        print_json(outcome)
        fail(str(exc), UNREADABLE)
    warn_if_namespace_unranked(namespace, result)
    if json_out:
        print_json(outcome)  # as the workers stored it: what a script reads from `fittest result` too
    else:
        show_call(result)
    raise typer.Exit(exit_code(result))


def exit_code(result: CallResult) -> int:
    """A call's exit code: a payload the workers refused (status invalid) exits as one refused here,
    and so does a call that named a version its namespace does not have, or a tag no tool has (QA
    AA: exit 1, where every other command refuses such a version with 2)."""
    if result.status == "no_candidates" and names_what_no_tool_has(result):
        return REFUSED
    return {"success": SUCCEEDED, "invalid": REFUSED}.get(result.status, DID_NOT_SUCCEED)


def _attempt_row(table: Table, number: str, a: AttemptSummary, first_refusal: bool = True) -> None:
    """One attempt; `first_refusal`: whether a refusal set aside as the caller's mistake is the
    call's first (by a version that does such jobs, or matches them best; a later one refused the same input)."""
    from selection.manifest import tool_key

    err = f"{a.error_class.value if a.error_class else ''} {a.error_message or ''}".strip()
    marks = " [dim](breaker probe: no attempt used)[/dim]" if a.probe else ""
    marks += " [dim](run isolated)[/dim]" if a.isolated else ""
    mistake = ("" if not a.callers_mistake else " [yellow](taken for the caller's mistake: check the input)[/yellow]"
               if first_refusal else " [dim](the same input, set aside)[/dim]")
    if a.took_a_refused_input:  # QA final: the success set aside read just "success"
        mistake = " [yellow](set aside: it has done no such job; check its output)[/yellow]"
    table.add_row(number, literal(tool_key(a.tool, a.version)) + marks,
                  "[green]success[/green]" if a.outcome == "success" else "[red]failure[/red]",
                  literal(abridged(err)) + mistake, f"{a.execution_time_ms:.0f}")


RANKING_SHOWN = 3


def ranking_line(result: CallResult) -> str:
    """The head of the call's ranking, with what ranked it: the attempts say what ran, not what
    selection thought of the others, nor which weights it read (QA learning F9). `fittest explain`
    gives every component."""
    ranking = result.ranking
    if not ranking:
        return ""
    head = ", ".join(f"{r.key} (p={r.probability:.2f})" for r in ranking[:RANKING_SHOWN])
    more = f", and {len(ranking) - RANKING_SHOWN} more" if len(ranking) > RANKING_SHOWN else ""
    return f"ranked{ranked_by(result)}: {head}{more}"


def evolution_reasons(evolution: CallEvolution) -> list[str]:
    """Why an evolution that made no fix could not: what each mutator said when it proposed
    nothing, the stage each candidate failed at, and why one was skipped. QA 62a: the table said "no mutator could
    propose a version", "1 candidate(s) failed verification", and the why was in --json and
    `fittest show` alone."""
    if evolution.status != "no_fix":
        return []
    from pydantic import TypeAdapter, ValidationError

    from evolution.models import CandidateReport

    extra = evolution.model_extra or {}
    try:
        candidates = TypeAdapter(list[CandidateReport]).validate_python(extra.get("candidates") or [])
        notes = TypeAdapter(list[str]).validate_python(extra.get("notes") or [])
    except ValidationError:  # a report of another release: its message is what there is to show
        return []
    reasons = list(notes)
    for candidate in candidates:
        if candidate.outcome == "skipped":  # e.g. "failed before ...: rolled back by hand" (QA 62a)
            reasons += [f"{candidate.mutation} skipped: {candidate.reason}"] if candidate.reason else []
        elif candidate.outcome == "failed":
            stage = next((s for s in candidate.stages if not s.passed), None)
            why = f"{stage.stage}: {stage.problems[0]}" if stage is not None and stage.problems else candidate.reason
            reasons.append(f"{candidate.mutation} failed {why}" if why else f"{candidate.mutation} failed")
    return reasons


def ranked_by(result: CallResult, whose: str = "") -> str:
    """What ranked a call: " by the {whose}{policy} policy (SPARC weights vN)", or what of it the
    result names (a result stored before the weights version was kept names none: no "v0" is made
    up for it); `explain`'s title says it too."""
    by = f" by the {whose}{result.policy} policy" if result.policy else ""
    weights = f" (SPARC weights v{result.weights_version})" if result.weights_version is not None else ""
    return by + weights


def show_call(result: CallResult) -> None:
    status = result.status
    color = {"success": "green", "failed": "red", "invalid": "yellow"}.get(status, "white")
    title = f"call {literal(result.call_id)}: [{color}]{literal(status)}[/{color}]"
    if result.tool:
        title += f" by {literal(result.tool)}@{literal(result.version)}"
    # A line of its own: as a table's title it wrapped to the table's width, splitting the call id
    # that `fittest result` takes.
    console.print(title, overflow="ignore", crop=False)
    attempts = result.attempts
    evolution = result.evolution
    # A call retried after its evolution carries only the retry's attempts: the round that failed
    # and the evolution come first, so the table tells the whole call. A call whose evolution
    # found nothing to retry with carries that round itself: its attempts, then the evolution.
    before = evolution.failed_attempts if evolution is not None else []
    after = attempts
    if attempts[: len(before)] == before:
        before, after = attempts, []
    if attempts or before or evolution is not None:
        table = Table(show_lines=False)
        table.add_column("#")
        table.add_column("tool", no_wrap=True)
        table.add_column("outcome")
        table.add_column("error")
        table.add_column("ms", justify="right")
        refused = next((a for a in [*before, *after] if a.callers_mistake), None)
        for i, a in enumerate(before, 1):
            _attempt_row(table, str(i), a, a is refused)
        if evolution is not None:
            # an older result may name no parent, or no version
            evolved = " → ".join(part for part in (evolution.parent, evolution.version) if part)
            said = f"{evolved}: {evolution.message}" if evolved else evolution.message
            table.add_row("", "[bold]evolution[/bold]", literal(evolution.status),
                          literal(abridged(said)), f"{evolution.elapsed_s * 1000:.0f}")
        for i, a in enumerate(after, len(before) + 1):
            _attempt_row(table, str(i), a, a is refused)
        console.print(table)
    for reason in evolution_reasons(evolution) if evolution is not None else []:
        console.print(f"  evolution: {literal(abridged(reason))}")
    for e in result.errors:
        console.print(f"  [yellow]{literal(e.field)}[/yellow]: {literal(e.message)}")
    if result.message:
        console.print(f"  {literal(result.message)}")
    if ranked := ranking_line(result):
        console.print(f"  {literal(ranked)}")
    if result.held_back and status != "no_candidates":  # that status's message names them already
        console.print(f"  not tried, their circuit breaker was open: {literal(', '.join(result.held_back))}")
    for note in result.degraded:  # as `explain` says it (QA 57a M2: only --json told a call ranked without its memory)
        console.print(f"  [yellow]degraded:[/yellow] {literal(note)}")
    if status == "success":
        print_output_json(result.output)

"""What every CLI module shares: the console, JSON output, and clear errors."""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError
from rich.console import Console
from rich.markup import escape

from workers.terminal_controls import TERMINAL_CONTROLS, escaped_in_json

if TYPE_CHECKING:
    from pydantic import BaseModel

    from selection.models import CallResult
    from workers.settings import Settings

# Piped or redirected output has no terminal width to follow; 140 columns keep the bench tables
# whole in logs and CI output instead of truncating their numbers to "0.7…".
PIPED_WIDTH = 140
# Emoji codes are off: a tool's output or a scenario that says ":warning:" is printed as it is written.
# The status of a process SIGPIPE stopped, as a shell reports it: what `yes | head` leaves.
BROKEN_PIPE = 128 + signal.SIGPIPE


class ReaderAwareConsole(Console):
    """A console whose reader may go away (`fittest call ... | head`). Rich ends the command with
    status 1 then, which a call's exit code says of a call that did not succeed (QA N10); this one
    ends it as SIGPIPE ends other commands."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # Nothing more reaches the closed pipe: this console's own (rich's default took stdout's).
        os.dup2(os.open(os.devnull, os.O_WRONLY), self.file.fileno())
        raise SystemExit(BROKEN_PIPE)


console = ReaderAwareConsole(width=None if sys.stdout.isatty() else PIPED_WIDTH, emoji=False)
err_console = ReaderAwareConsole(stderr=True, width=None if sys.stderr.isatty() else PIPED_WIDTH, emoji=False)

Command = TypeVar("Command", bound=Callable[..., Any])
Answer = TypeVar("Answer", bound="BaseModel")

# How long a command waits to learn that Redis answers before it starts: long enough for a loaded
# host, far short of the ~30 s of retries that the clients spend riding out a restart.
REDIS_PROBE_TIMEOUT_S = 2.0
REDIS_PROBE_RETRIES = 3  # a Redis that is starting up is waited for

class JsonOutput:
    """Whether this command was asked for JSON, and whether it printed its document yet: a command
    that ends with an error prints one then (`fail`), so that stdout holds one JSON document
    whichever way a --json command ends (QA 60d M2: most printed nothing, a few a document)."""

    asked = False
    printed = False

    @classmethod
    def reset(cls, asked: bool = False) -> bool:
        cls.asked, cls.printed = asked, False
        return asked


JsonOpt = Annotated[bool, typer.Option("--json", callback=JsonOutput.reset, help=(
    "Print machine-readable JSON instead of tables: one document on stdout, also when the command ends with an "
    'error ({"status": "error", "exit_code": N, "message": ...}, the message on stderr too).'))]


def seconds(value: float) -> float:
    """A `--timeout`'s check beside its range, which a NaN passes (QA 50d: a traceback, exit code 1)."""
    if math.isnan(value):
        raise typer.BadParameter("not a number (NaN): give seconds")
    return value


MinSimilarityOpt = Annotated[float | None, typer.Option(min=0.0, max=1.0, help=(
    "Try only the tools whose description (or a past success of theirs that says they do such jobs) is at least "
    "this similar to the scenario "
    "(0..1; see `fittest explain`'s sim): no answer rather than one from a tool that matches the job weakly. The "
    "versions of --namespace are tried whatever their match."))]


def _context_help() -> str:
    from typing import get_args

    from selection.context import Testing
    from selection.manifest import Phase, TaskType

    return ("Call context as a JSON object; @PATH reads it from a file, - from standard input. Keys read: "
            f"phase ({', '.join(get_args(Phase))}), language or languages (a name, names separated by commas, or a list; "
            "python3, py, node, js, ts, golang, c++ and the like read as python, javascript, typescript, go, cpp), "
            "complexity (0..1), "
            f"task_type ({', '.join(get_args(TaskType))}), testing ({', '.join(get_args(Testing))}), "
            "files (paths, or paths to contents), environment; other keys are the caller's own, but one close to a "
            "key read (langauge), or a language close to a known one (pyton), is warned of as a likely typo.")


CONTEXT_HELP = _context_help()  # QA U: the phase names showed only in the error of a wrong one


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    JsonOutput.printed = True


def print_error_json(message: str, code: int) -> None:
    """An error's JSON document, for a --json command that has printed none (`JsonOutput`)."""
    if JsonOutput.asked and not JsonOutput.printed:
        from workers.payloads import CommandError

        print_json(CommandError(exit_code=code, message=message).model_dump())


# C0 control characters, but newline and tab (ESC starts a terminal's escape sequences), and those
# a terminal acts on that JSON leaves as they are (workers/terminal_controls.py).
CONTROL_CHARACTERS = re.compile(rf"[\x00-\x08\x0b-\x1f]|{TERMINAL_CONTROLS.pattern}")


def print_output_json(data: Any) -> None:
    """A tool's output as highlighted JSON, its control characters written as JSON's escapes
    (`\\u009b`): JSON escapes C0 ones only, and a tool's U+009B reached the terminal (QA 64a)."""
    from rich.highlighter import JSONHighlighter

    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    # as Console.print_json renders it, which would read the escapes back into the characters
    rendered = JSONHighlighter()(escaped_in_json(text))
    rendered.no_wrap, rendered.overflow = True, None
    console.print(rendered, soft_wrap=True)


def literal(value: object) -> str:
    """`value` as console markup that prints exactly as written. Rich reads `[...]` in whatever it
    prints (console.print, table titles and cells, tree labels) as markup: a tool's error message,
    a scenario or a feedback reason that holds `[/x]` would crash the command, and `[red]` or
    `[a-z]` would be taken for styles. Every text the CLI did not write itself goes through this.

    Trailing backslashes are doubled and closed by an empty style, so that they print as they are
    whether markup follows them (which they would otherwise escape) or not. Control characters
    other than newline and tab are shown as escapes (`\\x1b`): a tool's message could otherwise
    move the cursor, recolour or clear the operator's terminal (QA)."""
    text = CONTROL_CHARACTERS.sub(lambda m: repr(m.group())[1:-1], str(value))
    body = text.rstrip("\\")
    if len(body) == len(text):
        return escape(text)
    return escape(body) + "\\" * (2 * (len(text) - len(body))) + "[none][/none]"


def when(t: float) -> str:
    """A moment as every command prints it: local time, to the second."""
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def shortened(text: str, width: int) -> str:
    """`text` cut to `width` characters, with "…" where it was cut (QA AA: "and list its most
    frequent words" shown as "and list it" read as the whole text)."""
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def abridged(text: str, head: int = 80, tail: int = 220) -> str:
    """A long error message's start (what failed) and its end: a crash's message carries the
    tool's stderr, whose last lines say why (--json has it whole)."""
    return text if len(text) <= head + tail else f"{text[:head]} … {text[-tail:]}"


# A command's exit code when it refuses what it was given (a tool, version, value or file it cannot
# use): the caller's to mend, told from 1, something outside the command that stopped it.
REFUSED = 2
# The exit code of a command that cannot read the workers' answer (workers of another release).
UNREADABLE = 3


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `message` (plain text, often quoting the user's input or a tool's words: it is printed
    literally) as an error and exit with `code`. On one line, however long: written to a pipe or a
    log, a message folded at the console's 140 columns read as several (QA recheck N5)."""
    print_error_json(message, code)
    err_console.print(f"[red]error:[/red] {literal(message)}", soft_wrap=True)
    raise typer.Exit(code)


class WorkerFailed(Exception):
    """A task the workers ran ended with an error of theirs, not an answer (a bug, or workers of a
    release without the task): one line, not its traceback (QA recheck 47)."""

    def __init__(self, task: str, error: BaseException) -> None:
        super().__init__(f"the workers' fittest.{task} ended with an error, not an answer: {type(error).__name__}: "
                         f"{str(error).strip()[:300]} (are this client and the workers the same release?)")


WAIT_NOTICE_S = 3.0  # how long the workers' answer is waited for before the command says it waits
PING_TIMEOUT_S = 1.5  # how long the workers are given to say which queues they take, each time they are asked


def queue_taken(queue: str) -> bool:
    """Whether a worker takes `queue` now, as the workers answer within PING_TIMEOUT_S (a Redis
    away, which the command's wait tells of itself, counts as yes)."""
    from workers.health import ask_workers
    from workers.settings import get_settings

    try:
        return any(queue in answer.queues for answer in ask_workers(get_settings(), timeout=PING_TIMEOUT_S).values())
    except Exception:
        return True


NO_WORKER_NOW = "no worker takes the {queue} queue now (`fittest up` starts them)"


@contextmanager
def waiting_told(queue: str, timeout: float) -> Iterator[None]:
    """Say, once WAIT_NOTICE_S has passed without the workers' answer, that the command waits for
    it (QA: with no worker running, a command said nothing for its whole timeout), and whether any
    worker takes that queue now (QA 57a M7: `evolve` waited its 600 s with none running, where a
    call is told so within seconds). It waits on all the same: a worker that starts within the
    timeout takes the request, which expires unapplied after it."""

    answered = threading.Event()

    def tell() -> None:
        """Ask the workers first (each is given PING_TIMEOUT_S), so that the notice comes at
        WAIT_NOTICE_S with what they said."""
        started = time.monotonic()
        if answered.wait(WAIT_NOTICE_S - PING_TIMEOUT_S):
            return
        taken = queue_taken(queue)
        if answered.wait(max(0.0, WAIT_NOTICE_S - (time.monotonic() - started))):
            return
        none = "" if taken else f"{NO_WORKER_NOW.format(queue=queue)}; "
        err_console.print(f"{none}waiting for a worker of the {queue} queue to answer (up to {timeout:g} s; "
                          "`fittest health` checks them)…", highlight=False)

    if timeout > WAIT_NOTICE_S:
        threading.Thread(target=tell, name="fittest-waiting-notice", daemon=True).start()
    try:
        yield
    finally:
        answered.set()


@contextmanager
def worker_errors_told(task: str) -> Iterator[None]:
    """Turn what a task raised in its worker into WorkerFailed; a timeout, a Redis away and this
    process's own errors pass as they are."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.cli import redis_unavailable
    from workers.client import NotDone

    try:
        yield
    except (CeleryTimeout, NotDone, typer.Exit):
        raise
    except Exception as exc:
        if redis_unavailable(exc) is not None or not _raised_by_a_worker(exc):
            raise
        raise WorkerFailed(task, exc) from exc


def _raised_by_a_worker(exc: BaseException) -> bool:
    """Whether Celery re-raised `exc` from a task's stored failure: it comes out of `AsyncResult`'s
    `maybe_throw` (celery/result.py), where nothing of this process's own raises but a Redis away."""
    import celery.result

    return exc.__traceback__ is not None and any(
        frame.filename == celery.result.__file__ for frame in traceback.extract_tb(exc.__traceback__))


def read_answer(model: type[Answer], answer: Any) -> Answer:
    """The workers' answer read as this release's `model`; one it cannot read (workers of another
    release) is printed as it came and ends the command with exit code 3, told from a refusal
    (review: `feedback`, `weights --retrain`, `recommend` and `evolve` ended in pydantic's traceback)."""
    from pydantic import ValidationError

    from workers.client import unreadable_message

    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        print_json(answer)
        fail(unreadable_message(model.__name__, exc), UNREADABLE)


def parse_json_option(text: str | None, option: str) -> dict[str, Any]:
    """A JSON-object option: the text itself, `@PATH` for a file's content, or `-` for standard
    input (an input of a megabyte does not fit in a command line). RefusedPayload otherwise, as
    the workers would refuse the payload."""
    def refused(message: str) -> NoReturn:
        from selection.models import FieldError

        raise RefusedPayload(message, [FieldError(field=option.removeprefix("--"), message=message, type="json")])

    if text is None:
        return {}
    if not text.strip():  # QA AA: `--input "$PAYLOAD"` with the variable unset ran the call on {}
        refused(f"{option} is empty: give a JSON object ('{{}}' for none), @FILE or - for standard input")
    source = "it"
    if text == "-":
        text, source = sys.stdin.read(), "standard input"
    elif text.startswith("@"):
        path = text[1:]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            refused(f"{option} {path}: cannot read it ({exc})")
        source = path
    try:
        value = json.loads(text, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        refused(f"{option}: {source} is not valid JSON ({exc})")
    except OutOfRange as exc:
        refused(f"{option}: {source} holds {exc}")
    except RecursionError:  # QA 60d M1: a traceback, at ~1,000 levels
        refused(f"{option}: {source} nests too deeply for JSON this command reads (under {sys.getrecursionlimit() - 100} levels)")
    except ValueError as exc:  # QA 64a: an integer of over 4,300 digits, which Python refuses to read (a traceback)
        refused(f"{option}: {source} holds what JSON this command reads cannot ({exc}): send a long number as text")
    if not isinstance(value, dict):
        refused(f"{option}: {source} must be a JSON object, not {type(value).__name__ if value is not None else 'null'}")
    return value


class OutOfRange(ValueError):
    """A JSON number past a float's range."""


def _finite_float(text: str) -> float:
    """A JSON number as a float, or OutOfRange naming it as written: read as Infinity, it was told as
    "a non-finite number (NaN or Infinity)", which the caller had not written (QA 60d L6)."""
    value = float(text)
    if not math.isfinite(value):
        raise OutOfRange(f"the number {abridged(text, 20, 10)}, out of range (it reads as Infinity)")
    return value


class RefusedPayload(Exception):
    """A call's payload refused before it is sent: the message the command ends with, and the
    fields as the workers' `invalid` result names them."""

    def __init__(self, message: str, errors: list[Any]) -> None:
        super().__init__(message)
        self.message, self.errors = message, errors


def call_payload(scenario: str, input: str | None, namespace: str | None, tags: list[str] | None, context: str | None,
                 max_attempts: int, min_similarity: float | None, json_out: bool = False,
                 call_id: str | None = None) -> dict[str, Any]:
    """A call's payload from the options `call` and `explain` share (`--namespace NAME@VERSION`,
    `--input`/`--context` as JSON, @PATH or -), checked as the workers would check it: a bad one ends
    the command with exit code 2, naming every bad field, and, with `json_out`, printed as the
    workers' `invalid` result is (QA 59a L7: `--json` printed nothing). Keys the caller left unset
    are left out: a worker of an earlier release refuses `min_similarity`, and older ones `version`."""
    try:
        from selection.models import FieldError

        if input == "-" and context == "-":  # QA 60d L6: --context read what --input had left, and said "not valid JSON"
            raise RefusedPayload("--input and --context both read standard input: give one of them as text or @FILE",
                                 [FieldError(field="context", message="standard input is read for --input", type="json")])
        namespace, version = namespace_and_version(namespace)
        payload: dict[str, Any] = {"scenario": scenario, "input": parse_json_option(input, "--input"), "namespace": namespace,
                                   "tags": tags or [], "context": parse_json_option(context, "--context"),
                                   "max_attempts": max_attempts}
        if version is not None:
            payload["version"] = version
        if min_similarity is not None:
            payload["min_similarity"] = min_similarity
        if call_id is not None:
            payload["call_id"] = call_id
        check_call_payload(payload)
    except RefusedPayload as exc:
        refuse_payload(exc, json_out)
    return payload


def refuse_payload(exc: RefusedPayload, json_out: bool) -> NoReturn:
    """End the command for a payload refused before anything ran (exit code 2); with `json_out`,
    printed as the workers' `invalid` result is."""
    if json_out:
        print_json({"status": "invalid", "errors": [e.model_dump() for e in exc.errors], "message": exc.message})
    fail(exc.message, REFUSED)


@contextmanager
def told_when_stopped(call_id: str, message: str, json_out: bool) -> Iterator[None]:
    """Say `message` (and, with `json_out`, the call as pending on stdout) when Ctrl-C or SIGTERM
    stops the command, and end it with 130 or 143 as those signals would: the call was sent and
    runs all the same, so its id must be said."""
    from workers.console_script import sigterm_as_interrupt, stopped_code

    with sigterm_as_interrupt() as stopped_by:
        try:
            yield
        except KeyboardInterrupt:
            from workers.payloads import CallWithoutResult

            if json_out:
                print_json(CallWithoutResult(call_id=call_id, status="pending", message=message).model_dump())
            fail(message, stopped_code(stopped_by))


def check_call_payload(payload: dict[str, Any]) -> None:
    """Check a call's payload as the workers would, before it is sent (or ranked): RefusedPayload
    naming every bad field, whichever command it came to."""
    from pydantic import ValidationError

    from selection.models import CallRequest, field_errors, joined_errors, size_errors
    from workers.settings import get_settings

    try:
        errors = size_errors(CallRequest.model_validate(payload), get_settings().input_limit_bytes)
    except ValidationError as exc:
        errors = field_errors(exc)
    if errors:
        raise RefusedPayload(joined_errors(errors), errors)


def tool_argument(text: str, option: str = "") -> tuple[str, str | None]:
    """NAME or NAME@VERSION given on the command line (`option`: the option that gave it), or the
    command refused, as a refused call is (exit code 2)."""
    from selection.manifest import tool_reference

    try:
        return tool_reference(text)
    except ValueError as exc:
        fail(f"{option} {exc}".strip(), REFUSED)


def namespace_and_version(namespace: str | None) -> tuple[str | None, str | None]:
    """`--namespace NAME` or `NAME@VERSION` (that version, as `feedback add` takes it)."""
    return (None, None) if namespace is None else tool_argument(namespace, "--namespace")


def names_what_no_tool_has(result: CallResult) -> bool:
    """Whether the workers' answer says the call named a tool no tool is named, a version its
    namespace does not have, or a tag no tool has. A result stored by a worker from before
    `no_candidates_reason` (results are kept 24 h) has no such key, and says the first in its
    message only."""
    if "no_candidates_reason" in result.model_fields_set:
        return result.no_candidates_reason in ("no_such_tool", "no_such_version", "no_such_tag")
    return result.status == "no_candidates" and re.match(r"\S+ has no version ", result.message) is not None


def warn_if_namespace_unranked(namespace: str | None, result: CallResult) -> None:
    """A namespace none of whose versions the workers ranked is a typo more often than not (the
    call was ranked by its scenario alone): say so. Read from the answer, not from the tools
    directory, which at 10,000 tools takes seconds to load."""
    from selection.manifest import split_key

    for note in result.notes:  # what the workers say of the call (a namespace no tool has)
        err_console.print(f"[yellow]warning:[/yellow] {literal(note)}")
    if not namespace or result.status == "invalid" or any(split_key(r.key)[0] == namespace for r in result.ranking):
        return
    if result.notes:
        return
    if names_what_no_tool_has(result):  # the namespace exists: no typo; or the message says what does not
        return
    if any(split_key(key)[0] == namespace for key in result.held_back):
        return  # held back by its breaker, not a typo: the workers' note, or the message of a call that ranked nothing, says so
    err_console.print(f"[yellow]warning:[/yellow] no tool named {literal(namespace)} was ranked: the call was ranked "
                      "by its scenario alone")


class RedisRefused(RedisConnectionError):
    """Redis answered, but refused to set the connection up: a database it does not have, or a
    command the user's ACL forbids."""


def check_redis() -> None:
    """Check that Redis answers. The clients retry a refused connection for ~30 s so that workers
    ride out a restart; an operator whose Redis is not running at all would wait that out for every
    command. A Redis that does not answer raises redis-py's connection error, which `main` turns
    into one line naming FITTEST_REDIS_URL."""
    from workers.settings import get_settings
    from workers.redis_connection import probe_client

    client = probe_client(get_settings(), REDIS_PROBE_TIMEOUT_S, REDIS_PROBE_RETRIES)
    try:
        client.ping()
    except ResponseError as exc:  # raised by the connection's own set-up (SELECT, CLIENT SETNAME)
        raise RedisRefused(str(exc)) from exc
    except (AttributeError, TypeError, ValueError) as exc:
        # redis-py's own reading of a greeting it did not expect (QA 57d L2: a POP3 server's "+OK" read
        # as a simple string, then treated as HELLO's map): no Redis answers there
        raise InvalidResponse(f"the server's answer is not Redis's ({type(exc).__name__}: {exc})") from exc
    finally:
        client.close()


def warn_of_other_stacks(settings: Settings, meaning: str = "what is stored under this one is shown") -> None:
    """Warn when no stack is served under this shell's FITTEST_KEY_PREFIX but one is under another
    on the same Redis (QA ops L8: every tool read as untouched, without a word); `meaning`: what
    the prefix means to the command."""
    from workers.redis_connection import probe_client
    from workers.state.stacks import other_stacks

    client = probe_client(settings, REDIS_PROBE_TIMEOUT_S, REDIS_PROBE_RETRIES)
    try:
        others = other_stacks(client, settings.key_prefix)
    finally:
        client.close()
    if others:
        err_console.print(f"[yellow]warning:[/yellow] no memory worker has served FITTEST_KEY_PREFIX "
                          f"{literal(settings.key_prefix)} on this Redis, and one has served "
                          f"{', '.join(literal(o) for o in others)}: is this shell's prefix the workers'? "
                          f"({meaning})")


def needs_redis(command: Command) -> Command:
    """Check that Redis answers (`check_redis`) before the command runs."""

    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> Any:
        check_redis()
        return command(*args, **kwargs)

    return checked  # type: ignore[return-value]  # functools.wraps keeps the signature Typer reads


def reads_state(command: Command) -> Command:
    """`needs_redis`, and the warning of a shell whose FITTEST_KEY_PREFIX no stack serves while
    another is (`warn_of_other_stacks`), for a command that shows what is stored under the prefix
    (QA 57a M6: show, weights, feedback show, report and metrics showed an empty system, without a
    word, where `tools` and `health` warned)."""

    @functools.wraps(command)
    def warned(*args: Any, **kwargs: Any) -> Any:
        from workers.settings import get_settings

        warn_of_other_stacks(get_settings())
        return command(*args, **kwargs)

    return needs_redis(warned)  # type: ignore[return-value]  # functools.wraps keeps the signature Typer reads

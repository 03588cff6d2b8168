"""`fittest`: call tools, watch them, run the stack. Every command's --help is its documentation.

One module per area registers its commands on the root app; `bench` is a sub-app.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from workers.cli import bench, calls, evolution, learning, ops, stack, tools

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # a docstring's paragraphs are wrapped to the terminal, not at its line ends
)


def print_version(asked: bool) -> None:
    """`--version`: the release and the commit of the checkout it runs from (QA 60d L5: an answer
    this CLI cannot read asks for the CLI of the workers' release, which nothing said)."""
    if not asked:
        return
    from importlib.metadata import PackageNotFoundError, version

    from workers.bench.host import checkout_commit

    try:
        release = version("fittest")
    except PackageNotFoundError:
        release = "not installed"
    commit = checkout_commit()
    typer.echo(f"fittest {release}" + (f" (commit {commit})" if commit else ""))
    raise typer.Exit()


@app.callback()
def root(
    show_version: Annotated[bool, typer.Option("--version", is_eager=True, callback=print_version,
                                               help="Print fittest's release and the commit it runs from, and exit.")] = False,
) -> None:
    """fittest: call a tool by what you need done; get the fittest tool that can do it."""
    from workers.cli.common import JsonOutput

    JsonOutput.reset()  # one command's, not the one run before it in this process


for module in (calls, tools, stack, ops, evolution, learning):
    app.registered_commands += module.app.registered_commands
app.add_typer(bench.app, name="bench", help="Benchmarks: each prints a table and writes --json.")
app.add_typer(learning.feedback_app, name="feedback", help="Feedback on tool versions: add a judgement, show a tool's entries and trend.")


def main() -> None:
    """Run the command. What stops it that the operator can mend (a setting or FITTEST_CONFIG that
    is refused; a Redis that does not answer or refuses the URL's credentials or database, found
    before the command starts; workers that do not answer; an embedding model that cannot load; a
    stack that cannot start) ends it with one line that says what, not a traceback.

    A reader that goes away (`fittest call ... | head`) ends it with the status SIGPIPE leaves
    (common.py `ReaderAwareConsole`), where click's own output breaks the pipe too."""
    from workers.cli.common import BROKEN_PIPE, err_console, literal, print_error_json
    from workers.settings import misspelled_variables

    for warning in misspelled_variables():  # QA ops: silently ignored, where FITTEST_CONFIG refuses the same typo
        err_console.print(f"[yellow]warning:[/yellow] {literal(warning)}", highlight=False, soft_wrap=True)
    stdout = sys.stdout
    try:
        app()
    except SystemExit:
        if sys.stdout is not stdout:  # click swapped it for a quiet one: the pipe it wrote to broke (EPIPE)
            sys.exit(BROKEN_PIPE)
        raise
    except Exception as exc:
        message = operator_error(exc)
        if message is None:
            raise
        # unfolded, as `fail` prints: written to a file, a message folded at 140 columns read as
        # several (QA 53a: `up`'s refusal of another stack's database)
        print_error_json(message, 1)
        err_console.print(f"[red]error:[/red] {literal(message)}", highlight=False, soft_wrap=True)
        sys.exit(1)


def operator_error(exc: BaseException) -> str | None:
    """What to tell the operator about `exc`, or None for an error that is a bug (its traceback is
    what to report)."""
    from celery.exceptions import TimeoutError as CeleryTimeout
    from redis.exceptions import AuthenticationError

    from workers.cli.common import RedisRefused, WorkerFailed
    from workers.client import refusal
    from workers.embedder import EmbedderUnavailable
    from workers.settings import get_settings, redact_url, settings_problem
    from workers.stack import StackError

    if isinstance(exc, (EmbedderUnavailable, StackError, WorkerFailed)):
        return str(exc)
    if (problem := settings_problem(exc)) is not None:
        return f"the settings are refused: {problem}"
    if isinstance(exc, CeleryTimeout):
        return ("no answer from the workers within the command's --timeout: are they running? "
                "`fittest health` checks them, `fittest up` starts them")
    cause = redis_unavailable(exc)
    if cause is None:
        return None
    settings = get_settings()
    where = f"FITTEST_REDIS_URL is {redact_url(settings.redis_url)}"
    if settings.backend_url != settings.redis_url:
        where += f", FITTEST_RESULT_BACKEND {redact_url(settings.backend_url)}"
    if isinstance(cause, AuthenticationError):
        return (f"Redis refuses the credentials ({cause}); {where}. Put the user and password it expects "
                "in the URL: redis://user:password@host:port/db.")
    if isinstance(cause, RedisRefused):
        return f"Redis refuses the connection ({cause}); {where}. Does Redis have that database (16 unless configured), and may the URL's user use it?"
    # asked at each URL the command uses (the result backend's may be another: QA 59f F4)
    urls = dict.fromkeys(u for u in (settings.redis_url, settings.backend_url) if u.startswith(("redis://", "rediss://")))
    if (why := next((w for u in urls if (w := refusal(cause, u, settings.redis_tls(u))) is not None), None)) is not None:
        return f"Redis {why} ({cause}); {where}. `fittest health` checks every part."
    return (f"Redis does not answer ({cause}); {where}. Is it running? `fittest up` starts one, and "
            "`fittest health` checks every part.")


def redis_unavailable(exc: BaseException) -> BaseException | None:
    """The connection error behind `exc`, if a Redis that does not answer is what it comes to: redis-py's
    own, kombu's for the broker, or what Celery's result backend raises after its reconnects."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import InvalidResponse, OutOfMemoryError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    seen: BaseException | None = exc
    while seen is not None:
        # InvalidResponse: what answers there is no Redis (QA 57a M1: a traceback of an HTTP port's "<")
        if isinstance(seen, (RedisConnectionError, RedisTimeoutError, OperationalError, OutOfMemoryError, InvalidResponse)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None

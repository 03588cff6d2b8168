"""`fittest up` and `fittest demo`: run the system on this machine."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from workers.cli.common import REFUSED, console, fail
from workers.settings import get_settings

app = typer.Typer()

# --------------------------------------------------------------------------------------- stack
@app.command()
def up(
    without: Annotated[Optional[list[str]], typer.Option(
        help="Procfile role not to start (repeatable): memory, executor, evolver, beat, flower, metrics, toolserver.")] = None,
) -> None:
    """Run the whole stack from the Procfile on this machine (starts Redis when none answers).

    Roles: memory (selection, feedback and learning queues; the model and the vector store),
    executor, evolver, beat, flower (FITTEST_FLOWER_PORT), metrics (FITTEST_METRICS_PORT) and
    toolserver (the example HTTP tool, on FITTEST_EXAMPLE_HTTP_PORT or 8765; an example service
    already answering there is used). When no Redis answers at FITTEST_REDIS_URL, a private
    redis-server with the append-only file on is started on that URL's port, under
    FITTEST_DATA_DIR. A port in use ends `up` before anything starts, with one line naming it.

    A role that ends by itself is started again. An end within 30 s of its start, before a
    worker role said it was ready, is a failed start: the restart waits 1 s, doubled for each
    failed start in the last 5 minutes (up to 30 s), and the sixth failed start within 5 minutes
    stops the stack. A role that had started is restarted after 1 s however often it ends. Ctrl-C, SIGTERM or SIGKILL of `up` stops every
    role and the Redis it started.

    Exit code: the role's when a role ended the stack (128 + the signal for a role a signal
    ended, as a shell says); 1 when the stack could not start (a port in use); 2 for a role the
    Procfile does not have."""
    from workers.procfile import UnknownRole, run_procfile

    try:
        code = run_procfile(get_settings(), without=set(without or []))
    except UnknownRole as exc:
        fail(str(exc), REFUSED)
    raise typer.Exit(code)


@app.command()
def demo(
    calls: Annotated[int, typer.Option(min=1, help="Calls to send.")] = 40,
    fresh: Annotated[bool, typer.Option(help="Forget earlier quality scores and memory first.")] = True,
) -> None:
    """The newcomer's run: start what is needed, load examples/tools, send calls, show what happened.

    Exit code 0 when at least one call succeeded; 1 when none did, or when the demo could not start
    (a model that cannot load, the example HTTP tool's port 8765 held by something else)."""
    from workers.demo import run_demo

    raise typer.Exit(run_demo(get_settings(), calls=calls, fresh=fresh, console=console))

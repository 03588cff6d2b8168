"""`fittest up` and `fittest demo`: run the system on this machine."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from workers.cli.common import console
from workers.settings import get_settings

app = typer.Typer()

# --------------------------------------------------------------------------------------- stack
@app.command()
def up(
    without: Annotated[Optional[list[str]], typer.Option(help="Procfile roles not to start (repeatable).")] = None,
) -> None:
    """Run the whole stack from the Procfile on this machine (starts Redis when none answers)."""
    from workers.stack import run_procfile

    raise typer.Exit(run_procfile(get_settings(), without=set(without or [])))


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



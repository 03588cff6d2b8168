"""`fittest bench …`: each bench prints a table and writes its numbers with --json."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)

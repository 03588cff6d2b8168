"""What every CLI module shares: the console, JSON output, and clear errors."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

# Piped or redirected output has no terminal width to follow; 140 columns keep the bench tables
# whole in logs and CI output instead of truncating their numbers to "0.7…".
PIPED_WIDTH = 140
console = Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else PIPED_WIDTH)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def parse_json_option(text: str | None, option: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{option} is not valid JSON: {exc}")
    if not isinstance(value, dict):
        fail(f"{option} must be a JSON object")
    return value

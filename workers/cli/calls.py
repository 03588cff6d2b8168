"""`fittest call`: send one call and show it attempt by attempt."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from workers.cli.common import JsonOpt, console, parse_json_option, print_json

app = typer.Typer()

# --------------------------------------------------------------------------------------- calls
@app.command()
def call(
    scenario: Annotated[str, typer.Argument(help="What you need done, in words.")],
    input: Annotated[Optional[str], typer.Option("--input", "-i", help="The tool input as a JSON object.")] = None,
    namespace: Annotated[Optional[str], typer.Option("--namespace", "-n", help="Serve this namespace's promoted version first.")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", "-t", help="Only tools with this tag (repeatable; all must match).")] = None,
    max_attempts: Annotated[int, typer.Option(help="Candidates tried before evolution.")] = 5,
    context: Annotated[Optional[str], typer.Option(help="Call context (files, language, phase) as JSON.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the result.")] = 120.0,
    json_out: JsonOpt = False,
) -> None:
    """Send one fittest.resilient_tool_call to the workers and print its result."""
    from workers.client import FittestClient

    payload = {
        "scenario": scenario,
        "input": parse_json_option(input, "--input"),
        "tags": tag or [],
        "namespace": namespace,
        "max_attempts": max_attempts,
        "context": parse_json_option(context, "--context"),
    }
    result = FittestClient().call(**payload, timeout=timeout)
    if json_out:
        print_json(result)
    else:
        show_call(result)
    raise typer.Exit(0 if result.get("status") == "success" else 1)


def show_call(result: dict[str, Any]) -> None:
    status = result.get("status")
    color = {"success": "green", "failed": "red", "invalid": "yellow"}.get(status or "", "white")
    title = f"call {result.get('call_id', '')[:12]}: [{color}]{status}[/{color}]"
    if result.get("tool"):
        title += f" by {result['tool']}@{result['version']}"
    table = Table(title=title, show_lines=False)
    table.add_column("#")
    table.add_column("tool", no_wrap=True)
    table.add_column("outcome")
    table.add_column("error")
    table.add_column("ms", justify="right")
    for i, a in enumerate(result.get("attempts", []), 1):
        err = f"{a.get('error_class') or ''} {a.get('error_message') or ''}".strip()
        table.add_row(str(i), f"{a['tool']}@{a['version']}",
                      "[green]success[/green]" if a["outcome"] == "success" else "[red]failure[/red]",
                      err[:80], f"{a.get('execution_time_ms', 0):.0f}")
    console.print(table)
    if result.get("errors"):
        for e in result["errors"]:
            console.print(f"  [yellow]{e['field']}[/yellow]: {e['message']}")
    if result.get("message"):
        console.print(f"  {result['message']}")
    if status == "success":
        console.print_json(data=result.get("output"))



"""`fittest`: call tools, watch them, run the stack. Every command's --help is its documentation.

One module per area registers its commands on the root app; `bench` is a sub-app.
"""

from __future__ import annotations

import typer

from workers.cli import bench, calls, evolution, learning, ops, stack, tools

app = typer.Typer(
    help="fittest: call a tool by what you need done; get the fittest tool that can do it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # a docstring's paragraphs are wrapped to the terminal, not at its line ends
)
for module in (calls, tools, stack, ops, evolution, learning):
    app.registered_commands += module.app.registered_commands
app.add_typer(bench.app, name="bench", help="Benchmarks: each prints a table and writes --json.")
app.add_typer(learning.feedback_app, name="feedback", help="Feedback on tool versions: add a judgement, show a tool's entries and trend.")


def main() -> None:
    app()

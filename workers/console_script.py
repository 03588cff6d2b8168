"""The `fittest` console script's entry: the CLI's imports take a second, and Ctrl-C (or SIGTERM)
during them ended in a traceback from deep inside an import (QA 60e N6). Nothing was sent then, and
this says so, ending as those signals would."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def sigterm_as_interrupt() -> Iterator[list[int]]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, within the block; the list holds the signal
    that stopped it (empty: Ctrl-C), for the exit code 128 + the signal's number."""
    stopped_by: list[int] = []

    def on_term(signum: int, frame: Any) -> None:
        stopped_by.append(signum)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, on_term)
    try:
        yield stopped_by
    finally:
        signal.signal(signal.SIGTERM, before)


def stopped_code(stopped_by: list[int]) -> int:
    return 128 + (stopped_by[0] if stopped_by else signal.SIGINT)


def main() -> None:
    with sigterm_as_interrupt() as stopped_by:
        try:
            from workers.cli import main as run_command
        except KeyboardInterrupt:
            sys.stderr.write("stopped before the command started: nothing was done\n")
            sys.exit(stopped_code(stopped_by))
    run_command()

"""What an in-process tool prints: kept apart from the worker's own output, capped, and logged once
per run with the tool it came from.

Why: a pool process's stdout and stderr are celery's logging proxies, which log each write as a
WARNING line naming neither the tool nor the call. A Python tool that printed 20,000 lines put
5 MB into the executor's log (QA 51c), where an executable tool's output is capped and its stderr
kept as a tail. Each tool thread's writes go to a buffer of its own, of which the first
PRINT_KEPT_CHARS are logged at INFO once the run ends; everything else the process writes passes on
unchanged. Threads the tool starts write to the process's output, as before.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

PRINT_KEPT_CHARS = 2000


class Printed:
    """What one tool thread wrote: its first PRINT_KEPT_CHARS, and how much in all. Once its run has
    ended (`ended`), what the thread still writes (one abandoned at its timeout) passes on, as before."""

    def __init__(self) -> None:
        self.head = ""
        self.chars = 0
        self.ended = False

    def add(self, text: str) -> None:
        if len(self.head) < PRINT_KEPT_CHARS:
            self.head += text[:PRINT_KEPT_CHARS - len(self.head)]
        self.chars += len(text)


class ByThread:
    """A stream that keeps the writes of a tool's thread apart and hands on the others. Not an
    io.TextIOBase: its `encoding`, `fileno`, `isatty` would shadow the wrapped stream's (review 51)."""

    def __init__(self, passed_on: TextIO) -> None:
        self.passed_on = passed_on
        self.local = threading.local()  # the thread's Printed, gone with the thread

    def write(self, text: str) -> int:
        printed: Printed | None = getattr(self.local, "printed", None)
        if printed is None or printed.ended:
            return self.passed_on.write(text)
        printed.add(text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.passed_on.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, isatty, fileno, buffer: the stream's own
        return getattr(self.passed_on, name)


_installing = threading.Lock()


def _streams() -> tuple[ByThread, ByThread]:
    """This process's stdout and stderr as ByThread streams, put in place at the first tool run."""
    with _installing:
        if not isinstance(sys.stdout, ByThread):
            sys.stdout = ByThread(sys.stdout)
        if not isinstance(sys.stderr, ByThread):
            sys.stderr = ByThread(sys.stderr)
        return sys.stdout, sys.stderr


@contextmanager
def kept_apart(printed: Printed) -> Iterator[None]:
    """In a tool's thread: what it writes to stdout and stderr goes to `printed` until its run ends."""
    out, err = _streams()
    out.local.printed = err.local.printed = printed
    try:
        yield
    finally:
        out.local.printed = err.local.printed = None

"""A bench stopped by a signal unwinds into the removal of its private state: the exit is raised
where the signal lands, but not inside a finalizer, which would print it and drop it."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from workers.cli import bench


def test_an_exit_is_raised_where_the_stop_signal_lands() -> None:
    with pytest.raises(SystemExit) as exited:
        bench.exit_unless_finalizing(130, sys._getframe())
    assert exited.value.code == 130


def test_a_stop_that_lands_in_a_finalizer_is_raised_once_it_has_run() -> None:
    """A clean-clone run of session 58: the SIGTERM landed in redis-py's ConnectionPool.__del__, whose
    SystemExit Python printed as "Exception ignored" and dropped, and the bench streamed on."""

    class Finalized:
        def __del__(self) -> None:
            bench.exit_unless_finalizing(143, sys._getframe())  # as the handler does, interrupting it

    before = signal.signal(signal.SIGTERM, bench._while_removing)  # the handler while the bench stops
    try:
        started = time.monotonic()
        with pytest.raises(SystemExit) as exited:
            Finalized()  # finalized at once
            time.sleep(5)
        assert exited.value.code == 143 and time.monotonic() - started < 4
    finally:
        signal.signal(signal.SIGTERM, before)

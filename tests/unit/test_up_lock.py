"""`fittest up` holds its data directory for its memory worker: QA AA ran a second `up` on the same
directory, whose memory worker could not open the embedded store and served 9 of 12 calls degraded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workers.procfile import hold_data_dir
from workers.settings import Settings
from workers.stack import StackError


def test_a_second_stack_on_the_same_data_directory_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    first = hold_data_dir(settings, ["memory", "executor"])
    assert first is not None
    with pytest.raises(StackError, match=rf"another `fittest up` or `fittest demo` \(pid {os.getpid()}\) runs a memory worker on .*/data"):
        hold_data_dir(settings, ["memory"])
    assert hold_data_dir(settings, ["executor", "evolver"]) is None  # no memory worker: nothing to hold
    assert hold_data_dir(settings.model_copy(update={"qdrant_url": "http://127.0.0.1:6333"}), ["memory"]) is None
    first.close()  # the first stack ended
    again = hold_data_dir(settings, ["memory"])
    assert again is not None
    again.close()

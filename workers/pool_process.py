"""Whether this process is a pool process of a prefork worker, and which is its worker's main
process: noted as the pool process starts (celery's `worker_process_init`), and read by the stop
of a pool process when its group is sent SIGTERM (workers/group_stop.py) and by the accounting of
the deaths of the processes that run attempts (workers/attempt_deaths.py). Each had kept a record
of its own (review 52b).
"""

from __future__ import annotations

import os
from typing import Any

from celery.signals import worker_process_init

_parent: int | None = None  # the worker's main process, in a pool process of a prefork worker


@worker_process_init.connect
def _note_parent(**_: Any) -> None:
    global _parent
    _parent = os.getppid()


def pool_parent() -> int | None:
    """The worker's main process, in a pool process; None in any other process."""
    return _parent


def main_pid() -> int:
    """The pid of this worker's main process (this one, outside a prefork pool)."""
    return _parent if _parent is not None else os.getpid()

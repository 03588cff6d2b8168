"""A lock held as a short lease and renewed while its work runs.

Why: work that takes long (an evolution, up to its 960 s time limit; a classifier refit, minutes
at the largest catalogs) must keep others out while it runs, yet a run killed with SIGKILL must
free the lock soon. A lock taken for the longest run kept the namespace locked that long after a
kill (QA O); one taken for less than the longest run let a second run start beside a slow one
(QA P: the retrain's 120 s against a worst-case refit of ~3 min). So the lock is taken for
`ttl_s` and renewed every third of it by a thread until the work ends, then released.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from selection.ports import Locks

log = logging.getLogger("fittest.locks")


@contextmanager
def renewed(locks: Locks, name: str, owner: str, ttl_s: float) -> Iterator[None]:
    """Renew the lock `name`, which `owner` has just taken for `ttl_s`, until the block ends; then
    release it. A renewal Redis refuses is tried again at the next turn (the lease outlasts two)."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl_s / 3):
            try:
                if not locks.acquire_lock(name, owner, ttl_s, reclaim=True):
                    log.warning("the lock %s of %s was taken by another owner", name, owner)
            except Exception:  # Redis restarting: the next turn tries again
                log.warning("the lock %s of %s could not be renewed", name, owner, exc_info=True)

    renewal = threading.Thread(target=renew, daemon=True, name=f"lease {name}")
    renewal.start()
    try:
        yield
    finally:
        stop.set()
        renewal.join()
        locks.release_lock(name, owner)

"""A lock renewed while its work runs (workers/renewed_lock.py), on the real state store."""

from __future__ import annotations

import time

from workers.renewed_lock import renewed
from workers.runtime import Runtime
from workers.settings import Settings


def test_work_longer_than_the_lease_keeps_the_lock_and_releases_it_at_the_end(settings_env: dict[str, str]) -> None:
    """QA P: the retrain's lock (120 s) was shorter than a worst-case refit, and a second retrain
    could start beside a slow one; a lease renewed while the work runs holds for any length."""
    rt = Runtime(Settings())
    try:
        assert rt.state.acquire_lock("retrain", "first", 0.6)
        with renewed(rt.state, "retrain", "first", 0.6):  # renewed every 0.2 s: a 0.6 s stall would lose it
            for _ in range(6):  # 1.8 s: three leases long
                time.sleep(0.3)
                assert not rt.state.acquire_lock("retrain", "second", 0.6)
        assert rt.state.acquire_lock("retrain", "second", 0.6)  # released at the end
    finally:
        rt.state.clear()
        rt.close()

"""The runtime's properties are opened once per process, by whichever thread asks first, and a
thread holding the runtime's lock (building the selector) never waits on one opening a property."""

from __future__ import annotations

import threading
import time

from workers.runtime import Runtime
from workers.settings import Settings


def test_a_thread_holding_the_runtime_lock_and_one_opening_a_property_do_not_wait_on_each_other(redis_url: str) -> None:
    rt = Runtime(Settings(redis_url=redis_url))
    seen: dict[str, object] = {}
    holding = threading.Event()

    def building_the_selector() -> None:
        with rt._lock:
            holding.set()
            time.sleep(0.3)  # a task thread asks for `redis` meanwhile
            seen["builder"] = rt.redis

    def a_task() -> None:
        holding.wait()
        seen["task"] = rt.redis

    threads = [threading.Thread(target=building_the_selector, daemon=True), threading.Thread(target=a_task, daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "the two threads wait on each other"
    assert seen["builder"] is seen["task"] is rt.redis  # opened once
    rt.redis.close()

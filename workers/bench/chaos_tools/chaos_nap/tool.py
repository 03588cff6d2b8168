"""The chaos bench's tool: takes `ms` milliseconds, so workers can be killed while it runs."""

from __future__ import annotations

import time
from typing import Any


def run(payload: dict[str, Any]) -> dict[str, Any]:
    time.sleep(payload.get("ms", 0) / 1000.0)
    if payload.get("fail"):
        raise RuntimeError("chaos_nap was told to fail")
    return {"n": payload.get("n")}

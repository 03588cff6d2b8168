"""The chaos bench's tool: takes `ms` milliseconds, so workers can be killed while it runs."""

import time


def run(payload):
    time.sleep(payload.get("ms", 0) / 1000.0)
    if payload.get("fail"):
        raise RuntimeError("chaos_nap was told to fail")
    return {"n": payload.get("n")}

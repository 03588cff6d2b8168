"""A tool that takes its time: it logs each run to `input["log"]` (one line: pid), sleeps
`input["ms"]`, then returns, or raises when `input["fail"]` is set. Tests kill workers while it
sleeps and count its runs from the log. With `input["die"]` it kills its own process instead of
returning: "exit" (os._exit(3)), "segfault" (reads address 0) or "parent" (SIGKILL to the process
that started it: in a pool process, the executor's main process); "group" sends SIGTERM to that
process's group (the executor's, its pool processes included), and then returns; "group, then
parent" sends that SIGTERM, then SIGKILL to the same process."""

import ctypes
import os
import signal
import time


def run(payload):
    log = payload.get("log")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    time.sleep(payload.get("ms", 0) / 1000.0)
    if payload.get("die") == "exit":
        os._exit(3)
    if payload.get("die") == "segfault":
        ctypes.string_at(0)
    if payload.get("die") == "parent":  # and returns at once, as if nothing happened
        os.kill(os.getppid(), signal.SIGKILL)
    if payload.get("die") in ("group", "group, then parent"):
        os.killpg(os.getpgid(os.getppid()), signal.SIGTERM)
    if payload.get("die") == "group, then parent":
        time.sleep(0.5)
        os.kill(os.getppid(), signal.SIGKILL)
    if payload.get("fail"):
        raise RuntimeError("nap was told to fail")
    return {"n": payload.get("n"), "pid": os.getpid()}

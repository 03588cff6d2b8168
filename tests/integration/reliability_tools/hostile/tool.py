"""Tools that misbehave on purpose. Only the original (`polite`) may run inside a worker; every
other function is served as an evolved version, which runs in a limited subprocess."""

import json
import os
import sys
import time


def polite(payload):
    return {"ok": True}


def fork_and_sleep(payload):
    """Starts children that would sleep for ten minutes, reports every pid on stderr, then hangs."""
    pids = [os.getpid()]
    for _ in range(payload.get("children", 10)):
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        pids.append(pid)
    sys.stderr.write("pids " + " ".join(map(str, pids)) + "\n")
    sys.stderr.flush()
    time.sleep(600)


def hog_memory(payload):
    chunks = []
    while True:
        chunks.append(bytearray(32 * 1024 * 1024))


def fill_disk(payload):
    with open("big.bin", "wb") as f:
        while True:
            f.write(b"\0" * (1 << 20))


def read_env(payload):
    print("a tool's own print goes to stderr")
    return {"env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid()}


def raise_kind(payload):
    kinds = {"value": ValueError, "connection": ConnectionRefusedError, "runtime": RuntimeError, "exit": SystemExit}
    raise kinds[payload["kind"]]("told to raise")


def returns(payload):
    return {"none": None, "set": {1, 2}, "nan": float("nan"), "tuple": (1, "a")}[payload["what"]]


def say(payload):
    return json.loads(json.dumps(payload))

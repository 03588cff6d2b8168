import time


def run(payload):
    time.sleep(float(payload.get("sleep", 0)))
    if payload.get("fail"):
        raise RuntimeError("brittle was told to fail")
    return {"ok": True}

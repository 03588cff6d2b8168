def run(payload):
    if payload.get("fail"):
        raise RuntimeError("brittle was told to fail")
    return {"ok": True}

def run(payload):
    rows = [line.split(",") for line in payload["text"].splitlines() if line]
    header, body = rows[0], rows[1:]
    if any(len(r) != len(header) for r in body):
        raise RuntimeError("ragged row: strict parser gives up")
    return [dict(zip(header, r)) for r in body]

def run(payload):
    rows = [line.split(",") for line in payload["text"].splitlines() if line]
    header, body = rows[0], rows[1:]
    return [dict(zip(header, r + [""] * (len(header) - len(r)))) for r in body]

"""A flaky HTTP upstream for the evolution bench: currency conversion at POST /convert that
answers 503 to two requests out of three (the `exchange_rate` tool).

Run `python examples/broken/flaky_server.py`; it listens on 127.0.0.1 at the port in
FITTEST_BROKEN_HTTP_PORT (default 8767, the port the manifest names). GET /health answers 200.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_PORT = 8767
RATES_TO_EUR = {"EUR": 1.0, "USD": 1 / 1.08, "GBP": 1.17, "JPY": 1 / 162.0, "CHF": 1.05}
_requests = itertools.count(1)
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(200 if self.path == "/health" else 404, {"ok": self.path == "/health"})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(min(length, 65536))
        with _lock:
            n = next(_requests)
        if n % 3:
            self._answer(503, {"error": "upstream busy, try again"})
            return
        try:
            value = json.loads(raw)
            amount, source, target = float(value["amount"]), value["from"], value["to"]
            rate = RATES_TO_EUR[source] / RATES_TO_EUR[target]
        except (ValueError, KeyError, TypeError) as exc:
            self._answer(400, {"error": f"bad request: {exc}"})
            return
        self._answer(200, {"amount": round(amount * rate, 2), "currency": target})

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    port = int(os.environ.get("FITTEST_BROKEN_HTTP_PORT", "").strip() or DEFAULT_PORT)  # blank: the default, as `up` reads it
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()

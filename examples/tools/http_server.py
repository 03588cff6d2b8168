"""The example HTTP tool service: unit conversion at POST /convert (the `convert_units` tool).

Run `python examples/tools/http_server.py`; it listens on 127.0.0.1 at the port in
FITTEST_EXAMPLE_HTTP_PORT (default 8765, the port the manifest names). Bad input is answered
with 400 and a JSON error, which fittest classifies as bad_input.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_PORT = 8765
MAX_BODY = 64 * 1024

# unit -> (dimension, factor to the dimension's base unit); temperature has its own functions.
LINEAR: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0), "km": ("length", 1000.0), "cm": ("length", 0.01), "mm": ("length", 0.001),
    "mi": ("length", 1609.344), "yd": ("length", 0.9144), "ft": ("length", 0.3048), "in": ("length", 0.0254),
    "kg": ("mass", 1.0), "g": ("mass", 0.001), "mg": ("mass", 1e-6), "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "s": ("time", 1.0), "ms": ("time", 0.001), "min": ("time", 60.0), "h": ("time", 3600.0),
    "day": ("time", 86400.0),
}
TO_KELVIN: dict[str, Callable[[float], float]] = {
    "k": lambda v: v, "c": lambda v: v + 273.15, "f": lambda v: (v - 32) * 5 / 9 + 273.15,
}
FROM_KELVIN: dict[str, Callable[[float], float]] = {
    "k": lambda v: v, "c": lambda v: v - 273.15, "f": lambda v: (v - 273.15) * 9 / 5 + 32,
}


def convert(value: float, source: str, target: str) -> float:
    """Convert or raise ValueError naming what is wrong."""
    for unit in (source, target):
        if unit not in LINEAR and unit not in TO_KELVIN:
            raise ValueError(f"unknown unit {unit!r}")
    if source in TO_KELVIN and target in TO_KELVIN:
        return FROM_KELVIN[target](TO_KELVIN[source](value))
    if source in TO_KELVIN or target in TO_KELVIN:
        raise ValueError(f"cannot convert {source} to {target}")
    (dim_a, fa), (dim_b, fb) = LINEAR[source], LINEAR[target]
    if dim_a != dim_b:
        raise ValueError(f"cannot convert {dim_a} ({source}) to {dim_b} ({target})")
    return value * fa / fb


def handle(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise ValueError("the body must be a JSON object")
    value, source, target = request.get("value"), request.get("from"), request.get("to")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("'value' must be a finite number")
    if not isinstance(source, str) or not isinstance(target, str):
        raise ValueError("'from' and 'to' must be unit names")
    source, target = source.strip().lower(), target.strip().lower()
    return {"value": round(convert(float(value), source, target), 6), "unit": target}


class Handler(BaseHTTPRequestHandler):
    server_version = "fittest-example/1.0"

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/convert":
            self._send(404, {"error": "not found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, {"error": "body too large"})
            return
        try:
            self._send(200, handle(json.loads(self.rfile.read(length) or b"null")))
        except ValueError as exc:  # JSONDecodeError is a ValueError too
            self._send(400, {"error": str(exc)})

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet by default; FITTEST_EXAMPLE_HTTP_LOG=1 logs each request to stderr."""
        if os.environ.get("FITTEST_EXAMPLE_HTTP_LOG") == "1":
            super().log_message(format, *args)


def main() -> None:
    port = int(os.environ.get("FITTEST_EXAMPLE_HTTP_PORT", "").strip() or DEFAULT_PORT)  # blank: the default, as `up` reads it
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"convert_units example service on http://127.0.0.1:{port}/convert", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

"""The `http` runner: POST the input as JSON, take a JSON answer.

Status codes map to failure classes by what they say about the attempt: 5xx, 429 and a refused
or failed connection mean the service is not able to serve now (unavailable, so the call falls
back and a circuit breaker may open); 408 and a response that does not arrive in time are a
timeout; any other 4xx means the service refused this input (bad_input); a 2xx that is not JSON
within the size cap is bad_output. Redirects are not followed: a tool's URL is its identity.

The timeout is one deadline for the whole exchange, checked while the body streams in, because
httpx's own timeouts are per operation and a service dripping bytes would never trip them. The
body is read up to the output cap and no further.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from selection.manifest import HttpImplementation, ToolManifest
from selection.models import FailureClass
from workers.runners.base import DEFAULT_PORTS, RunLimits, RunOutcome, encode_input, is_this_host, judge_json_bytes, preview

CONNECT_TIMEOUT_S = 5.0

_client: httpx.Client | None = None
_client_lock = threading.Lock()


def _shared_client() -> httpx.Client:
    """One connection pool per process, made on first use (after a prefork worker has forked)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(follow_redirects=False, limits=httpx.Limits(max_connections=100))
        return _client


def _classify_status(status: int, body: bytes) -> RunOutcome:
    detail = f"HTTP {status}: {preview(body)}"
    if status == 408:
        return RunOutcome.fail(FailureClass.timeout, detail)
    if status == 429 or status >= 500:
        return RunOutcome.fail(FailureClass.unavailable, detail)
    if status >= 400:
        return RunOutcome.fail(FailureClass.bad_input, detail)
    return RunOutcome.fail(FailureClass.unavailable, f"unexpected {detail} (redirects are not followed)")


def run_http(manifest: ToolManifest, input: dict[str, Any], *, timeout_s: float, limits: RunLimits) -> RunOutcome:
    """Call an http tool; every failure is an outcome, never an exception."""
    impl = manifest.implementation
    assert isinstance(impl, HttpImplementation)
    deadline = time.monotonic() + timeout_s
    cap = limits.output_limit_bytes
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
    headers = {"Content-Type": "application/json", "Accept": "application/json", **impl.headers}
    target = urlsplit(impl.url)
    if (what := limits.own_ports.get(target.port or DEFAULT_PORTS[target.scheme])) and is_this_host(target.hostname):
        return RunOutcome.fail(FailureClass.crash, f"refused: {impl.url} is {what} on this host, which serves fittest "
                                                   "itself: an http tool may not call it")
    try:
        with _shared_client().stream("POST", impl.url, content=encode_input(input), headers=headers, timeout=timeout) as resp:
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > cap:
                return RunOutcome.fail(FailureClass.bad_output, f"response of {declared} bytes exceeds the limit of {cap} bytes")
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > cap:
                    return RunOutcome.fail(FailureClass.bad_output, f"response exceeds the limit of {cap} bytes")
                if time.monotonic() > deadline:
                    return RunOutcome.fail(FailureClass.timeout, f"response not complete within {timeout_s:.3g}s")
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        return RunOutcome.fail(FailureClass.unavailable, f"cannot connect to {impl.url}: {exc}")
    except httpx.TimeoutException as exc:
        return RunOutcome.fail(FailureClass.timeout, f"no response from {impl.url} within {timeout_s:.3g}s: {exc}")
    except httpx.HTTPError as exc:  # the connection broke or the server spoke bad HTTP
        return RunOutcome.fail(FailureClass.unavailable, f"{type(exc).__name__} from {impl.url}: {exc}")
    if not 200 <= resp.status_code < 300:
        return _classify_status(resp.status_code, bytes(body))
    return judge_json_bytes(bytes(body), cap, what="response body")

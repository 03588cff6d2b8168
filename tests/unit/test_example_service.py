"""The example HTTP tool of `fittest demo` and `fittest up`: started when its port is free, used
when it already answers there, and a clear refusal when something else holds the port (a second
server would exit at start: the demo stopped with a bare exit code, and `up` restarted the role
until it gave up the whole stack)."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import free_port
from workers import procfile
from workers.procfile import check_ports, example_service
from workers.settings import Settings
from workers.stack import ROOT, StackError


def example_handler() -> type[BaseHTTPRequestHandler]:
    spec = importlib.util.spec_from_file_location("example_http_server", ROOT / "examples" / "tools" / "http_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Handler


class Stranger(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_free_port_an_example_service_and_a_stranger_are_told_apart() -> None:
    assert example_service(free_port()) == "free"
    with serving(example_handler()) as port:
        assert example_service(port) == "ours"
    with serving(Stranger) as port:
        assert example_service(port) == "other"


def test_up_refuses_an_example_port_held_by_something_else_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procfile, "example_service", lambda: "other")
    with pytest.raises(StackError, match="port 8765 of the example HTTP tool .* --without toolserver"):
        check_ports(Settings(metrics_port=free_port(), flower_port=free_port()), ["memory", "toolserver"])
    check_ports(Settings(), ["memory", "executor"])  # without the role, the port is nobody's business


@pytest.mark.parametrize("addr", ["192.0.2.1", "notanaddress"])
def test_up_refuses_a_metrics_address_not_of_this_host_before_it_starts(addr: str) -> None:
    """QA 58c M2: it passed, and the metrics role's six failed starts stopped every role."""
    with pytest.raises(StackError, match=f"cannot listen on {addr}:.*FITTEST_METRICS_ADDR must be an address of this host"):
        check_ports(Settings(metrics_addr=addr, metrics_port=free_port(), flower_port=free_port()), ["memory", "metrics"])
    check_ports(Settings(metrics_addr=addr), ["memory", "executor"])  # without the role, its address is nobody's business
    for served in ("127.0.0.1", "::1", "localhost"):  # QA 58d N3: `::1` was refused, which `fittest metrics` serves on
        check_ports(Settings(metrics_addr=served, metrics_port=free_port(), flower_port=free_port()), ["metrics"])


def test_the_example_port_up_checks_is_the_one_the_toolserver_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """QA: `up` checked 8765 even with FITTEST_EXAMPLE_HTTP_PORT set, the port the role then served."""
    with serving(Stranger) as port:
        monkeypatch.setenv("FITTEST_EXAMPLE_HTTP_PORT", str(port))
        assert example_service() == "other"
        with pytest.raises(StackError, match=f"port {port} of the example HTTP tool .*FITTEST_EXAMPLE_HTTP_PORT"):
            check_ports(Settings(metrics_port=free_port(), flower_port=free_port()), ["toolserver"])
    monkeypatch.setenv("FITTEST_EXAMPLE_HTTP_PORT", str(free_port()))
    check_ports(Settings(metrics_port=free_port(), flower_port=free_port()), ["toolserver"])  # free: taken


@pytest.mark.parametrize("value", ["abc", "99999", "0"])
def test_a_bad_example_port_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """QA U: FITTEST_EXAMPLE_HTTP_PORT=abc (or 99999) ended `fittest up` with a traceback."""
    monkeypatch.setenv("FITTEST_EXAMPLE_HTTP_PORT", value)
    with pytest.raises(StackError, match="FITTEST_EXAMPLE_HTTP_PORT must be a port number"):
        check_ports(Settings(), ["toolserver"])

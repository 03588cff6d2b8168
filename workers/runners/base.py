"""What every runner shares: the limits of a run, the outcome it yields, and how output is judged.

One judgement of output for all kinds of tool (python, executable, http) means a tool's failure
class depends on what it did, not on how it happens to be implemented.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from selection.models import FailureClass
from workers.settings import Settings, user_ids

MAX_MESSAGE_CHARS = 2000  # error messages travel in task payloads and failure records
STDERR_TAIL_BYTES = 2048
CUT = " …(cut)… "


STALL_S = 2.0  # a pause this long between two looks at a running tool is this process's, not the tool's


class Deadline:
    """A tool's time limit that leaves out the time this process did not run: an executor stopped
    (SIGSTOP) or a paused VM woke to find every running tool past its wall-clock deadline, and
    charged it a timeout that its tool had not caused (QA resilience: a correct tool, 1.00 -> 0.95,
    while the copy of its attempt that the rescue sweep gave another executor succeeded). The
    runner asks `remaining()` at least every fraction of a second while the tool runs; a longer gap
    than STALL_S between two asks is taken as this process's stall, and the deadline moves by it."""

    def __init__(self, seconds: float) -> None:
        self.last = time.monotonic()
        self.end = self.last + seconds
        self.stalled_s = 0.0

    def remaining(self) -> float:
        """Seconds left to the tool, the stalls since the last ask left out (may be negative)."""
        now = time.monotonic()
        gap, self.last = now - self.last, now
        if gap > STALL_S:
            self.end += gap
            self.stalled_s += gap
        return self.end - now

    def settle(self) -> float:
        """The seconds this process was stopped during the run, a stall just before the end included."""
        self.remaining()
        return self.stalled_s


class RunLimits(BaseModel):
    """Limits of one attempt beyond its timeout.

    `output_limit_bytes` applies to every kind of tool; the others bound an executable's process
    (an in-process python tool cannot be limited per call, see `workers.runners.python`).
    """

    output_limit_bytes: int = Field(1_000_000, ge=1)
    memory_mb: int = Field(1024, ge=16)
    cpu_s: int = Field(60, ge=1)
    max_processes: int = Field(64, ge=1)
    max_file_mb: int = Field(64, ge=0)
    max_open_files: int = Field(256, ge=16)
    # The ports of this host that serve fittest itself (port -> what), which an http tool may not
    # call: from a manifest, Flower's API shut a worker down (QA 57c H4).
    own_ports: dict[int, str] = Field(default_factory=dict)
    # The (uid, gid) a tool's process runs as (FITTEST_TOOL_USER); None: the worker's own.
    run_as: tuple[int, int] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> RunLimits:
        """The limits the operator configured; those settings does not offer keep their defaults."""
        return cls(
            output_limit_bytes=settings.output_limit_bytes,
            memory_mb=settings.tool_memory_mb,
            cpu_s=settings.tool_cpu_s,
            own_ports=own_ports(settings),
            run_as=user_ids(settings.tool_user) if settings.tool_user is not None else None,
        )


def is_this_host(host: str | None) -> bool:
    """Whether `host` names this machine, however it is spelled: it resolves (DNS, /etc/hosts, the
    numeric forms `0`, `2130706433`, `::ffff:127.0.0.1`) to a loopback or unspecified address, or to
    one this machine can bind (its own interfaces'). QA 57d reached Flower as `vm`, `0` and the
    host's own IP where only the literal loopback names were refused. A host that does not resolve
    is no one's."""
    if not host:
        return False
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address.is_loopback or address.is_unspecified:
            return True
        try:  # only an address of this machine's own can be bound
            with socket.socket(socket.AF_INET if address.version == 4 else socket.AF_INET6, socket.SOCK_DGRAM) as probe:
                probe.bind((str(address), 0))
            return True
        except OSError:
            continue
    return False


def own_ports(settings: Settings) -> dict[int, str]:
    """The ports of this host that fittest's own services listen on, as the settings give them."""
    return dict(_own_ports(settings.flower_port, settings.metrics_port, settings.redis_url, settings.result_backend,
                           settings.qdrant_url))


@functools.lru_cache(maxsize=8)
def _own_ports(flower: int, metrics: int, redis_url: str, backend: str | None, qdrant: str | None) -> tuple[tuple[int, str], ...]:
    """`own_ports`, resolved once per process for the same settings: the limits are built for every
    attempt, and a service's host name may need a DNS lookup."""
    ports = {flower: "Flower (FITTEST_FLOWER_PORT)", metrics: "the metrics endpoint (FITTEST_METRICS_PORT)"}
    for url, what in ((redis_url, "Redis (FITTEST_REDIS_URL)"), (backend, "Redis (FITTEST_RESULT_BACKEND)"),
                      (qdrant, "Qdrant (FITTEST_QDRANT_URL)")):
        parts = urlsplit(url or "")
        if parts.hostname is not None and is_this_host(parts.hostname):
            ports[parts.port or DEFAULT_PORTS.get(parts.scheme, 0)] = what
    return tuple(ports.items())


DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "http": 80, "https": 443}


class RunOutcome(BaseModel):
    """The result of one attempt: an output, or a failure class and a message saying why."""

    success: bool
    output: Any = None
    error_class: FailureClass | None = None
    error_message: str | None = None
    elapsed_ms: float = 0.0
    stalled_s: float = 0.0  # of the run's time, what this process spent stopped (`Deadline`): not the tool's

    @classmethod
    def ok(cls, output: Any) -> RunOutcome:
        return cls(success=True, output=output)

    @classmethod
    def fail(cls, error_class: FailureClass, message: str) -> RunOutcome:
        """A failure; a message too long to travel keeps its start (what failed) and its end
        (the last lines of stderr, where a tool says why)."""
        if len(message) > MAX_MESSAGE_CHARS:
            keep = MAX_MESSAGE_CHARS - len(CUT)
            head = keep // 4
            message = message[:head] + CUT + message[-(keep - head):]
        return cls(success=False, error_class=error_class, error_message=message)


# Deeper outputs are refused: the call's plan and outcome, which carry the output a few levels down,
# must stay within pydantic's serialization depth (255).
MAX_OUTPUT_DEPTH = 64


def encode_input(input: dict[str, Any]) -> bytes:
    """The input as the UTF-8 JSON a tool receives; raises TypeError or ValueError if it is not JSON."""
    return json.dumps(input, allow_nan=False, ensure_ascii=False).encode("utf-8")


def judge_output(value: Any, limit_bytes: int) -> RunOutcome:
    """Accept a tool's return value only if it is non-null JSON within the size cap.

    The value is returned as it reads back from its JSON text, so the caller sees exactly what a
    consumer of the Celery result (JSON) will see, tuples and all.
    """
    if value is None:
        return RunOutcome.fail(FailureClass.bad_output, "empty output (null)")
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        return RunOutcome.fail(FailureClass.bad_output, f"output is not JSON-serialisable: {exc}")
    except RecursionError:  # the tool ran and returned; what it returned is unusable (QA resilience: "crash")
        return RunOutcome.fail(FailureClass.bad_output, "output is nested too deeply to encode as JSON")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate (QA 49: a crash blamed on the runner)
        return RunOutcome.fail(FailureClass.bad_output, f"output is not UTF-8 text: {exc}")
    if size > limit_bytes:
        return RunOutcome.fail(FailureClass.bad_output, f"output of {size} bytes exceeds the limit of {limit_bytes} bytes")
    output = json.loads(text)
    if (depth := nesting(output)) > MAX_OUTPUT_DEPTH:
        # QA recheck: 400-900 levels passed here and broke the recording of the call's outcome (the
        # call's result was a stored "Maximum serialization depth exceeded", its success lost).
        return RunOutcome.fail(FailureClass.bad_output, f"output is nested {depth} levels deep; the limit is {MAX_OUTPUT_DEPTH}")
    return RunOutcome.ok(output)


def nesting(value: Any) -> int:
    """How deeply JSON arrays and objects nest in `value` (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def judge_json_bytes(data: bytes, limit_bytes: int, what: str = "output") -> RunOutcome:
    """Parse a JSON document received from a process or a service, then judge it as output."""
    if len(data) > limit_bytes:
        return RunOutcome.fail(FailureClass.bad_output, f"{what} exceeds the limit of {limit_bytes} bytes")
    if not data.strip():
        return RunOutcome.fail(FailureClass.bad_output, f"empty output ({what} is empty)")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return RunOutcome.fail(FailureClass.bad_output, f"{what} is not JSON ({exc}): {preview(data)}")
    except RecursionError:  # QA recheck: 5,000 levels were a "crash" of the runner
        return RunOutcome.fail(FailureClass.bad_output, f"{what} is nested too deeply to decode as JSON")
    return judge_output(value, limit_bytes)


def preview(data: bytes | str, limit: int = 200) -> str:
    """The start of some text, for a message that shows what came back without flooding logs."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "…")


def tail(data: bytes, limit: int = STDERR_TAIL_BYTES) -> str:
    """The end of a process's stderr: where a traceback puts the line that explains it."""
    text = data[-limit:].decode("utf-8", errors="replace").strip()
    return ("…" + text) if len(data) > limit else text


def with_stderr(message: str, stderr: bytes) -> str:
    return f"{message}; stderr: {tail(stderr)}" if stderr.strip() else message

"""`fittest up`: every role of the Procfile under honcho, Redis started first when none answers.

honcho (the Procfile's process manager) stops every role as soon as one ends; `Supervisor`, a
subclass of its Manager, restarts the role instead, and stops the stack with one line once a role
ends too often. Each role runs through a `RoleRelay`, whose output `LossyOutput` passes on without
ever blocking the roles on a terminal that reads slowly or has gone.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import queue
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlparse

import httpx
from honcho.manager import KILL_WAIT, SIGNALS, Manager
from honcho.printer import Printer
from honcho.process import Process as HonchoProcess

from workers.health import model_files_problem
from workers.logging import says_ready
from workers.settings import Settings, redact_url
from workers.stack import PATIENT_ASK_S, PROCFILE, ROOT, Stack, StackError, die_with_parent


def flower_env(settings: Settings) -> dict[str, str]:
    """Flower's basic auth when FITTEST_FLOWER_PASSWORD is set, as Flower's own FLOWER_BASIC_AUTH
    variable: in the environment of the Flower process only, never on its command line, which
    every user of the machine can read (`ps`). Without a password Flower listens on the loopback
    address only (FLOWER_ADDRESS): it shows every call's input, and QA (new user) read them from
    another host through the machine's external address. Its API is then open as its pages are
    (FLOWER_UNAUTHENTICATED_API): Flower refuses every /api/ request without auth unless told so,
    which left a script on this machine nothing to read (QA ops: 401 for /api/tasks)."""
    if settings.flower_password is None:
        return {"FLOWER_ADDRESS": "127.0.0.1", "FLOWER_UNAUTHENTICATED_API": "true"}
    # The Procfile's line listens on FLOWER_ADDRESS, 127.0.0.1 when unset: `honcho start` run on the
    # Procfile alone, without a password, put Flower on every interface (QA live F5).
    return {"FLOWER_BASIC_AUTH": f"{settings.flower_user}:{settings.flower_password.get_secret_value()}",
            "FLOWER_ADDRESS": "0.0.0.0"}


def port_taken(port: int, addr: str = "0.0.0.0") -> bool:
    """Whether a server could not listen on `addr`:`port` now (as Flower's and the metrics'
    servers bind it, with SO_REUSEADDR): checked before `up` starts them, since a role that cannot
    bind its port fails again at every restart."""
    return bind_refusal(port, addr) is not None


def bind_refusal(port: int, addr: str = "0.0.0.0") -> OSError | None:
    """Why a server could not listen on `addr`:`port` now (a port in use, an address not of this
    host, a name that does not resolve); None when it could. An IPv6 address is bound as such (QA
    58d N3: `::1` was refused, which `fittest metrics` serves on)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(address)
    except OSError as exc:  # socket.gaierror too
        return exc
    return None


EXAMPLE_SERVICE_PORT = 8765  # the port examples/tools/convert_units/tool.yaml names


def example_service_port() -> int:
    """The port the toolserver role serves the example HTTP tool on: FITTEST_EXAMPLE_HTTP_PORT, as
    examples/tools/http_server.py reads it (for a tools directory whose manifest names another).
    One that is no port is refused in one line, as a FITTEST_ setting is (QA U: `abc` and `99999`
    ended `fittest up` with a ValueError's and an OverflowError's traceback)."""
    raw = os.environ.get("FITTEST_EXAMPLE_HTTP_PORT", "").strip() or str(EXAMPLE_SERVICE_PORT)
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise StackError(f"FITTEST_EXAMPLE_HTTP_PORT must be a port number (1-65535), not {raw!r}")
    return port


def example_service(port: int | None = None) -> Literal["free", "ours", "other"]:
    """Whether the example HTTP tool's port is free, held by that service already (an earlier demo's,
    or one started by hand: the demo uses it), or held by something else, which the demo's own
    service could not displace (it would exit at start, and the demo with a bare exit code)."""
    port = example_service_port() if port is None else port
    if not port_taken(port, "127.0.0.1"):
        return "free"
    try:
        answer = httpx.post(f"http://127.0.0.1:{port}/convert", json={"value": 1, "from": "km", "to": "m"},
                            timeout=2.0)
        return "ours" if answer.status_code == 200 and answer.json() == {"value": 1000.0, "unit": "m"} else "other"
    except (httpx.HTTPError, ValueError):
        return "other"


def check_ports(settings: Settings, roles: Iterable[str]) -> None:
    """One line naming the setting to change, instead of the role's traceback, for a port in use."""
    ports = {"flower": ("Flower", settings.flower_port, "FITTEST_FLOWER_PORT"),
             "metrics": ("the metrics endpoint", settings.metrics_port, "FITTEST_METRICS_PORT")}
    for role in roles:
        if role in ports and port_taken(ports[role][1]):
            what, port, variable = ports[role]
            raise StackError(f"port {port} of {what} is in use: set {variable} to a free port, "
                             f"or leave the role out with --without {role}")
    # QA 58c M2: an address not of this host passed, and the metrics role's six failed starts then
    # stopped every role, the workers serving calls with them.
    if "metrics" in roles and (refused := bind_refusal(settings.metrics_port, settings.metrics_addr)) is not None:
        raise StackError(f"the metrics endpoint cannot listen on {settings.metrics_addr}:{settings.metrics_port} "
                         f"({refused.strerror or refused}): FITTEST_METRICS_ADDR must be an address of this host "
                         "(0.0.0.0: every interface), or leave the role out with --without metrics")
    if "toolserver" in roles and example_service() == "other":
        raise StackError(f"port {example_service_port()} of the example HTTP tool (FITTEST_EXAMPLE_HTTP_PORT; the "
                         f"example convert_units manifest names {EXAMPLE_SERVICE_PORT}) is in use by something else: stop it, set "
                         "FITTEST_EXAMPLE_HTTP_PORT to the port your manifest names, or leave the role out with "
                         "--without toolserver")


def root_tools_risk(settings: Settings, roles: Sequence[str]) -> str | None:
    """What running tools as root risks, or None: the kernel ignores RLIMIT_NPROC for root, so a tool
    could fork until the machine has no process id left, and it can read the workers' environment
    (QA 59d M2: 600 processes of a tool capped at 64, and nothing said so)."""
    if os.geteuid() != 0 or settings.tool_user is not None or not {"executor", "evolver"} & set(roles):
        return None
    return ("the workers run as root and FITTEST_TOOL_USER is unset: tools run as root, with no cap on their "
            "processes (the kernel ignores RLIMIT_NPROC for root) and the workers' environment readable; set "
            "FITTEST_TOOL_USER to a user of their own (README: What tools and callers can do)")


def hold_data_dir(settings: Settings, roles: Iterable[str]) -> IO[str] | None:
    """Take the data directory for this stack's memory worker (an exclusive lock on its `up.lock`,
    held while the returned file stays open): the embedded vector store is opened by one process
    at a time. A second `fittest up` on the same directory started a memory worker that could not
    open it, and served its share of the calls degraded (QA AA: 9 of 12). None: nothing to hold (a
    Qdrant server, or no memory worker)."""
    if settings.qdrant_url or "memory" not in roles:
        return None
    data_dir = settings.data_dir.resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = (data_dir / "up.lock").open("a+", encoding="utf-8")
    except OSError as exc:  # QA 57a M8: a traceback of NotADirectoryError
        raise StackError(f"FITTEST_DATA_DIR ({data_dir}) cannot hold the stack's data: {exc.strerror or exc}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise StackError(f"another `fittest up` or `fittest demo` (pid {holder}) runs a memory worker on {data_dir}, "
                         "whose embedded vector store one process opens at a time: stop it, give this stack its own "
                         "FITTEST_DATA_DIR, or leave the role out with --without memory") from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


class UnknownRole(StackError):
    """A role the Procfile does not have: the operator's words to mend, refused as a bad argument."""


def run_procfile(settings: Settings, without: set[str] | None = None) -> int:
    """`fittest up`: every Procfile role under honcho, with Redis started first when needed."""
    from honcho.environ import parse_procfile

    procfile = parse_procfile(PROCFILE.read_text())
    unknown = (without or set()) - set(procfile.processes)
    if unknown:
        raise UnknownRole(f"no Procfile role named {', '.join(sorted(unknown))} (roles: {', '.join(procfile.processes)})")
    roles = [name for name in procfile.processes if name not in (without or set())]
    held = hold_data_dir(settings, roles)  # first: a second `up` here is told so, not that its ports are taken (QA AB)
    out = LossyOutput(sys.stdout)
    if "toolserver" in roles and example_service() == "ours":  # a second one could not bind its port
        roles.remove("toolserver")
        print(f"fittest up: the example HTTP tool already answers on port {example_service_port()}: not starting another",
              file=out, flush=True)
    check_ports(settings, roles)
    stack = Stack(settings)
    if not settings.tools_dir.is_dir():
        print(f"fittest up: FITTEST_TOOLS_DIR ({settings.tools_dir.resolve()}) is not a directory: no tool will be "
              "served until it is (a relative path is read from the directory you run fittest in)", file=out, flush=True)
    if settings.tool_user is not None and {"executor", "evolver"} & set(roles):
        from workers.runners import RunLimits
        from workers.runners.executable import python_refused

        if (refused := python_refused(RunLimits.from_settings(settings))) is not None:
            print(f"fittest up: FITTEST_TOOL_USER ({settings.tool_user}) cannot run this Python with fittest's packages "
                  f"({refused}): every {{python}} tool, evolved python version and verification will fail until it can",
                  file=out, flush=True)
    if (risk := root_tools_risk(settings, roles)) is not None:
        print(f"fittest up: {risk}", file=out, flush=True)
    if "evolver" in roles and (risk := settings.short_visibility()) is not None:
        print(f"fittest up: {risk}", file=out, flush=True)
    if "memory" in roles and (problem := model_files_problem(settings)) is not None:  # QA 57a M3: told by health only
        print(f"fittest up: {problem}: every call will be served degraded (ranked without similarity, feedback or "
              "failure memory) until it is mended and the memory worker restarted", file=out, flush=True)
    url = stack.ensure_redis()
    manager = Supervisor(printer=Printer(out), data_dir=settings.data_dir.resolve())
    manager._process_ctor = RoleRelay  # honcho's own hook for the class that runs each role
    manager.tick = lambda: stack.revive_redis(lambda line: print(f"fittest up: {line}", file=out, flush=True))

    def hang_up(signum: int, _frame: Any) -> None:
        """The terminal closed. honcho starts each role in a session of its own, which the hang-up
        does not reach, and stops them on SIGINT and SIGTERM only: without this they outlived `up`."""
        if manager.returncode is None:
            manager.returncode = 128 + signum
        manager.terminate()

    try:
        if "redis" not in stack.procs:
            print(f"fittest up: Redis at {redact_url(url)}", file=out, flush=True)
        else:
            print(f"fittest up: no Redis answered at {redact_url(settings.redis_url)}; started one at {redact_url(url)} "
                  f"(append-only file in {(settings.data_dir / 'redis').resolve()}), stopped with the stack",
                  file=out, flush=True)
            if urlparse(url).port != (urlparse(settings.redis_url).port or 6379):  # not "localhost" against 127.0.0.1 (QA 50e)
                print(f"fittest up: its port was taken: other shells need FITTEST_REDIS_URL={redact_url(url)}",
                      file=out, flush=True)
        node_suffix = ""  # after the host in the workers' node names
        def waiting(answered: int, bound: int) -> None:
            print(f"fittest up: {answered} of the {bound} workers with a mailbox on this Redis database answered; asking "
                  f"again for up to {PATIENT_ASK_S:g} s (a busy or restarting worker answers late, one killed outright never) …",
                  file=out, flush=True)

        if others := stack.workers_answering(waiting=waiting):  # more workers of one stack, or another stack's
            # Named apart from those already running (QA 50: both stacks' executors were executor@vm, and
            # Flower, `celery inspect` and `fittest health` saw one of each name).
            node_suffix = f"-{os.getpid()}"
            if theirs := sorted({prefix for prefix in others.values() if prefix not in (None, settings.key_prefix)}):
                # QA 49: warned, its workers took the other stack's calls at once, and recorded them
                # under this stack's prefix, where the other stack's never looked.
                raise StackError(
                    f"workers already take this Redis database's calls ({', '.join(others)}), of another stack: they "
                    f"serve FITTEST_KEY_PREFIX {', '.join(theirs)}, not {settings.key_prefix}.\n"
                    "  Each stack's workers would run the other's calls. Give this stack its own database "
                    f"(FITTEST_REDIS_URL=redis://HOST:PORT/N), or join the other stack (FITTEST_KEY_PREFIX={theirs[0]}).")
            # (any of them: one of an older release, which says no prefix, may sort first: review 51)
            owner = next((node for node, prefix in sorted(others.items())
                          if node.startswith("memory@") and prefix == settings.key_prefix), None)
            if owner is not None and "memory" in roles and settings.qdrant_url is None:
                # Review 50: a second memory worker kept a store of its own, and the stack's feedback,
                # failures and learning were split between the two by which took each message.
                raise StackError(
                    f"a memory worker of this stack ({owner}) already runs, and the vector memory is embedded in its "
                    "data directory: another would keep a store of its own. Start more workers without it "
                    "(`fittest up --without memory`), or give the stack a Qdrant server (FITTEST_QDRANT_URL) for several")
            if all(prefix == settings.key_prefix for prefix in others.values()):  # more workers of this stack
                print(f"fittest up: workers of this stack (FITTEST_KEY_PREFIX {settings.key_prefix}) already take this "
                      f"Redis database's calls ({', '.join(others)}): these join them", file=out, flush=True)
            else:  # workers of a release that does not say which stack they serve
                print(f"fittest up: workers already take this Redis database's calls ({', '.join(others)}); if they are "
                      "another stack's (another FITTEST_KEY_PREFIX), each will run the other's calls: give each stack its "
                      "own database (FITTEST_REDIS_URL=redis://HOST:PORT/N)", file=out, flush=True)
        elif theirs := stack.others_served_here():
            print(f"fittest up: this Redis database served another stack before (FITTEST_KEY_PREFIX {', '.join(theirs)}), "
                  f"never this one's ({settings.key_prefix}); none of its workers answers now. Its calls still queued "
                  "here will run on this stack's tools, and when it starts again each stack will run the other's "
                  "calls: give each stack its own database (FITTEST_REDIS_URL=redis://HOST:PORT/N)", file=out, flush=True)
        if "redis" not in stack.procs and (other_up := stack.redis_of_another_up()) is not None:
            print(f"fittest up: the Redis at {redact_url(url)} was started by the `fittest up` of FITTEST_DATA_DIR {other_up}, "
                  "and keeps its data there: it stops when that stack stops, and this stack's calls with it. Give "
                  "stacks that share a Redis one of its own (redis-server, or a service)", file=out, flush=True)
        if "redis" not in stack.procs and (kept := stack.own_redis_data_unused()) is not None:
            print(f"fittest up: {kept} holds the data of a Redis an earlier `fittest up` started, but another Redis answers "
                  f"at {redact_url(url)}, and its state is the one served. To serve the state kept there (a restored "
                  "data directory's), stop that Redis or point FITTEST_REDIS_URL at a port nothing answers on",
                  file=out, flush=True)  # QA 60c F6: its promotions and quality went unserved, untold
        if "flower" in roles and settings.flower_password is None:
            print(f"fittest up: Flower at http://127.0.0.1:{settings.flower_port}, for this machine only: set "
                  "FITTEST_FLOWER_PASSWORD to serve it on every interface, behind its basic auth", file=out, flush=True)
        env = dict(stack.env)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        # The Procfile's Flower line reads its port from FITTEST_FLOWER_PORT.
        flower = {**env, "FITTEST_FLOWER_PORT": str(settings.flower_port), **flower_env(settings)}
        for name in roles:
            command = re.sub(r"(-n \S+@%h)(?=\s|$)", rf"\g<1>{node_suffix}", procfile.processes[name])  # a node name at the line's end too
            manager.add_process(name, command, env=flower if name == "flower" else env, cwd=str(ROOT))
        signal.signal(signal.SIGHUP, hang_up)
        manager.loop()
    finally:
        stack.stop_all()
        if held is not None:
            held.close()
    return manager.returncode or 0


# A role that ends while `up` runs is started again after RESTART_BACKOFF_S, doubled for each of
# its failed starts in the last RESTART_WINDOW_S, up to RESTART_BACKOFF_MAX_S. A failed start is an
# end within STARTED_AFTER_S of the role's start, before a worker role said it consumes its queues
# (workers/logging.py `WORKER_READY`: QA 48 saw an executor that took a message and was killed
# 11 s after its restart counted); an end past RESTART_LIMIT of them in that window
# stops the stack: a role that cannot run (bad settings, a missing binary) is told of within a
# minute or so (1+2+4+8+16 s of waits, and its failed starts). A role that ran longer, or said it
# was ready, had started, and is restarted after RESTART_BACKOFF_S however often it is ended (a tool that kills its executor, the OOM killer: QA
# recheck 47 saw three calls of such a tool stop the stack), as supervisord's `startsecs` does. A
# beat waits out a Redis restart of up to a minute (workers/app.py); the workers ride it out.
RESTART_LIMIT = 5
RESTART_WINDOW_S = 300.0
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
STARTED_AFTER_S = 30.0


def ended_by(rc: int, data_dir: Path | None = None) -> str:
    """What a role's return code says beyond its number: the signal that ended it (its shell reports
    128 + the signal, honcho a negative one), and for SIGBUS the free space of FITTEST_DATA_DIR, where
    the embedded store's memory-mapped files raise it once their filesystem is full (QA Q: the
    memory worker ended with a bare "Bus error" six times and the stack stopped, nothing said why)."""
    try:
        sig = signal.Signals(rc - 128 if rc > 128 else -rc)
    except ValueError:  # an exit status, not a signal
        return ""
    if sig is not signal.SIGBUS or data_dir is None:
        return f", {sig.name}"
    try:
        free = shutil.disk_usage(data_dir).free / 2**20
    except OSError:
        return f", {sig.name}"
    return f", {sig.name}: a memory-mapped file could not be written; {free:.1f} MB free in FITTEST_DATA_DIR ({data_dir})"


class Supervisor(Manager):
    """honcho's Manager, which stopped every role as soon as one ended (a worker killed by the OOM
    killer, a beat that lost Redis), restarting the role instead: one line per restart, and the
    whole stack stopped, with one line saying why, once a role fails to start too often
    (RESTART_LIMIT). SIGINT, SIGTERM and `terminate()` stop every role as honcho does, none restarted."""

    def __init__(self, printer: Printer, limit: int = RESTART_LIMIT, window_s: float = RESTART_WINDOW_S,
                 backoff_s: float = RESTART_BACKOFF_S, backoff_max_s: float = RESTART_BACKOFF_MAX_S,
                 clock: Callable[[], float] = time.monotonic, data_dir: Path | None = None,
                 started_after_s: float = STARTED_AFTER_S) -> None:
        super().__init__(printer=printer)
        self.data_dir = data_dir  # whose free space a role ended by SIGBUS is told with
        self.limit, self.window_s, self.started_after_s = limit, window_s, started_after_s
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self._now = clock
        self._ends: dict[str, deque[float]] = {}  # role -> when it failed to start, within the window
        self._started: dict[str, float] = {}  # role -> when it last started
        self._ready: set[str] = set()  # the roles that said they consume their queues since they last started
        self._due: dict[str, float] = {}  # role -> when it is started again
        self.tick: Callable[[], None] | None = None  # called every 0.1 s while the stack runs (`up`'s own Redis)

    def loop(self) -> None:
        """honcho's loop (start the roles, print their lines, stop them all on SIGINT/SIGTERM,
        SIGKILL what is left KILL_WAIT s later), where a role that ends is handed to _ended."""
        def _terminate(signum: int, _frame: Any) -> None:
            self._system_print(f"{SIGNALS[signum]['name']} received\n")
            self.returncode = SIGNALS[signum]["rc"]
            self.terminate()

        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGINT, _terminate)
        self._start()
        kill_at: float | None = None
        done = False
        while True:
            try:
                self._handle(self.events.get(timeout=0.1))
            except queue.Empty:
                if done:  # every role stopped and nothing left to print
                    break
            if self._terminating:
                self._due.clear()
                done = self._all_started() and self._all_stopped()
                kill_at = kill_at if kill_at is not None else self._now() + KILL_WAIT
                if self._now() > kill_at:
                    self.kill()
                    kill_at = float("inf")  # once: a role SIGKILL left is gone
            else:
                if self.tick is not None:
                    self.tick()
                for name, at in list(self._due.items()):
                    if self._now() >= at:
                        del self._due[name]
                        self._restart(name)

    def _handle(self, msg: Any) -> None:
        if msg.type == "line":
            if msg.name not in self._ready:
                text = msg.data.decode("utf-8", "replace") if isinstance(msg.data, bytes) else msg.data
                if says_ready(text):
                    self._ready.add(msg.name)
            self._printer.write(msg)
            return
        role = self._processes[msg.name]
        if msg.type == "start":
            role["pid"] = msg.data["pid"]
            self._started[msg.name] = self._now()
            self._ready.discard(msg.name)
            self._system_print(f"{msg.name} started (pid={msg.data['pid']})\n")
            if self._terminating:  # restarted as the stack began to stop: it stops too
                self._procmgr.terminate(msg.data["pid"])
        elif msg.type == "stop":
            role["returncode"] = msg.data["returncode"]
            if self._terminating:
                self._system_print(f"{msg.name} stopped (rc={msg.data['returncode']})\n")
                if self.returncode is None:
                    self.returncode = msg.data["returncode"]
            else:
                self._ended(msg.name, msg.data["returncode"])

    def _ended(self, name: str, rc: int) -> None:
        """A role ended while the stack runs: start it again after its backoff, or, when it has
        failed to start more than `limit` times within the window, stop the stack."""
        now = self._now()
        ran_s = now - self._started.get(name, now)  # a role whose start was not seen: a failed start
        ends = self._ends.setdefault(name, deque())
        ready = name in self._ready  # a worker that consumed its queues had started, however soon it ended
        failed_start = not ready and ran_s < self.started_after_s
        if failed_start:
            ends.append(now)
        while ends and ends[0] < now - self.window_s:
            ends.popleft()
        how = f"rc={rc}{ended_by(rc, self.data_dir)}"
        if len(ends) > self.limit:
            self._system_print(f"{name} stopped ({how}) within {self.started_after_s:g} s of its start, {len(ends)} times "
                               f"in {self.window_s:g} s: giving up, stopping every role\n")
            self.returncode = rc if rc > 0 else 128 - rc if rc < 0 else 1  # a signal's end, as a shell tells it
            self.terminate()
            return
        # a role that had started comes back at once (QA 48 recheck: 16 s, the failed starts' backoff)
        delay = min(self.backoff_max_s, self.backoff_s * 2 ** (len(ends) - 1)) if failed_start else self.backoff_s
        self._due[name] = now + delay
        counted = (f"it ran {ran_s:.0f} s: failed start {len(ends)} of {self.limit} allowed in {self.window_s:g} s"
                   if failed_start else f"it ran {ran_s:.0f} s{', ready' if ready else ''}: not a failed start")
        self._system_print(f"{name} stopped ({how}): restarting it in {delay:g} s ({counted})\n")

    def _restart(self, name: str) -> None:
        """A new relay for the role, as honcho's _start makes them; starting it also reaps the
        relay that ended (multiprocessing reaps its finished children whenever it starts one)."""
        role = self._processes[name]
        del role["returncode"], role["pid"]
        role["process"] = multiprocessing.Process(name=name, target=role["obj"].run, args=(self.events, True))
        role["process"].start()

    def _killall(self, force: bool = False) -> None:
        """honcho's, leaving out a role whose relay has not said its pid yet (it is restarting):
        its start message, when it comes, has it stopped (_handle)."""
        for name, role in self._processes.items():
            if "returncode" in role or "pid" not in role:
                continue
            self._system_print(f"sending {'SIGKILL' if force else 'SIGTERM'} to {name} (pid {role['pid']})\n")
            if force:
                self._procmgr.kill(role["pid"])
            else:
                self._procmgr.terminate(role["pid"])


def one_command(line: str) -> bool:
    """Whether a Procfile line is one simple command, which `exec` may start in the shell's place:
    no list, pipe, compound command or subshell. (A restart hands the relay its line as it ran,
    `exec` already in front.)"""
    return not re.search(r"[;&|()\n`]|^\s*(if|for|while|until|case|\{|!)\s", line)


OUTPUT_DRAIN_S = 1.0  # how long a role's last output is relayed after it ended


class RoleRelay(HonchoProcess):
    """honcho's relay of one role: a fork of `up` that starts the role's shell in a session of its
    own and passes its output on. It ignores SIGTERM and SIGINT, and nothing told it when `up` was
    killed (SIGKILL, the OOM killer), so the role outlived `up`. Here the kernel tells it, and it
    stops its role's session as `up` would have: SIGTERM, which lets a worker finish its tasks."""

    UP_DIED = signal.SIGUSR1

    def __init__(self, cmd: str, *args: Any, **kwargs: Any) -> None:
        # The shell honcho starts a one-command line in becomes the role's process (`exec`): the
        # pid `up` prints is the role's, and a kill of it is seen as the role's end and restarted
        # (QA new user: killing the printed pid, the shell's, left the worker running, unwatched).
        super().__init__(f"exec {cmd}" if one_command(cmd) and not cmd.startswith("exec ") else cmd, *args, **kwargs)
        self._up = os.getpid()

    def run(self, events: Any = None, ignore_signals: bool = False) -> None:
        """honcho's run, but the role's end is its process's exit, not the end of its output: a
        process it forked (a python tool's child) keeps its output open, and the relay, reading it
        to the end first, saw the role end only when that child did (QA resilience: a killed
        executor, a zombie meanwhile, was restarted 47 s and 107 s later, and every call waited)."""
        signal.signal(self.UP_DIED, self._stop_role)
        die_with_parent(self.UP_DIED, parent=self._up)
        self._events = events
        self._child = self._child_ctor(self.cmd, env=self.env, cwd=self.cwd)
        self._send_message({"pid": self._child.pid}, type="start")
        if ignore_signals:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        relay = threading.Thread(target=self._relay_output, name="fittest-role-output", daemon=True)
        relay.start()
        self._child.wait()
        relay.join(OUTPUT_DRAIN_S)  # what the role wrote before it ended; not what a child of it writes on
        self._send_message({"returncode": self._child.returncode}, type="stop")

    def _relay_output(self) -> None:
        for line in iter(self._child.stdout.readline, b""):
            if not self.quiet:
                self._send_message(line)

    def _stop_role(self, _signum: int, _frame: Any) -> None:
        self._events = None  # nobody reads them any more
        if self._child is None:  # `up` died before this relay started its role
            os._exit(1)
        try:
            os.killpg(self._child.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


class LossyOutput:
    """Standard output for honcho's printer that drops what can no longer be written (the terminal
    closed, the pipe to `head` gone): a failed print would end the loop that stops the roles, and
    leave them running."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            pass

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except (OSError, ValueError):
            return False

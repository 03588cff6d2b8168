"""The stack's processes on one machine: a private Redis when none answers, and the worker roles
as child processes, started and stopped by `fittest demo`, the benches and the pipeline tests
(`Stack`). `fittest up` runs the Procfile's roles under honcho instead (workers/procfile.py), with
this module's Redis.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote, urlparse

import redis
from kombu.exceptions import OperationalError

from workers.prctl import PR_SET_PDEATHSIG, prctl
from workers.redis_connection import CLOSES, LOADING, NOT_REDIS, SLOW, redis_refusal
from workers.settings import Settings, config_file, redact_url

ROOT = Path(__file__).resolve().parent.parent
PROCFILE = ROOT / "Procfile"
# kombu's Redis transport keeps each exchange's bindings in a set under this key: a worker's
# remote-control mailbox is bound to the `celery.pidbox` fanout while it runs.
PIDBOX_BINDINGS = "_kombu.binding.celery.pidbox"
PATIENT_ASK_S = 5.0
LOADING_WAIT_S = 60.0  # how long `up` waits for a Redis that is reading its data set back
PROBE_S = 2.0  # how long a check `up` makes of the Redis before it starts the roles may take


class StackError(RuntimeError):
    pass


def redis_answers(url: str, timeout: float = 1.0, tls: dict[str, Any] | None = None) -> bool:
    """Whether Redis at `url` answers PING."""
    return redis_refusal(url, timeout, tls) is None


def find_redis_server() -> str:
    """redis-server from PATH, or from a pip-installed `redis-server` package's binary."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redis_server

        return str(redis_server.REDIS_SERVER_PATH)
    except ImportError as exc:
        raise StackError(
            "no Redis answers at FITTEST_REDIS_URL and no redis-server binary was found: install "
            "redis-server (apt) or the `redis-server` PyPI package, or set FITTEST_REDIS_URL"
        ) from exc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_private_redis(data_dir: Path, port: int | None = None,
                        password: str | None = None) -> tuple[subprocess.Popen, str]:
    """A redis-server with the append-only file on, keeping its data under the data directory, on
    `port` (a free one when None), asking for `password` when one is given."""
    workdir = data_dir / "redis"
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    auth = ["--requirepass", password] if password else []
    proc = subprocess.Popen(
        [find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--appendonly", "yes",
         "--save", "", "--dir", str(workdir.resolve()), *auth],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    credentials = f":{quote(password, safe='')}@" if password else ""
    url = f"redis://{credentials}127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if redis_answers(url, 0.2):
            return proc, url
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise StackError(f"the private redis-server on port {port} did not start")


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """The calling process gets `sig` when the process that started it dies, even by SIGKILL, so a
    killed demo, test run or `fittest up` leaves no workers behind (Linux; elsewhere a no-op). Run
    it in the child; `parent` (the starter's pid) catches a starter that died before it ran."""
    if not prctl(PR_SET_PDEATHSIG, sig):
        return
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)


@dataclass(frozen=True)
class Role:
    name: str
    command: list[str]


@cache
def worker_roles() -> dict[str, Role]:
    """The Procfile's Celery worker roles as the benches, the pipeline tests and `fittest demo` start
    them: run by this interpreter (`python -m celery`), without honcho's shell, so the Procfile is
    the one place their command lines are written. Read when first asked, not at import: an
    installed copy of fittest (the Docker image) has no Procfile beside this module."""
    from honcho.environ import parse_procfile

    roles = {}
    for name, line in parse_procfile(PROCFILE.read_text()).processes.items():
        words = shlex.split(line)
        if words[:1] == ["celery"] and "worker" in words:
            roles[name] = Role(name, [sys.executable, "-m", *words])
    return roles


def absolute_paths(settings: Settings) -> dict[str, str]:
    """The settings' paths (and FITTEST_CONFIG's file) as absolute FITTEST_* variables. The stack's
    processes run in the repository, whose files the Procfile's commands name; a relative path
    given in the shell that started them must still mean what it meant there, as it does for the
    CLI commands run beside them."""
    env = {f"FITTEST_{name.upper()}": str(value.resolve())
           for name in Settings.model_fields if isinstance(value := getattr(settings, name), Path)}
    if config := config_file():
        env["FITTEST_CONFIG"] = str(Path(config).resolve())
    return env


REDIS_RETRY_S = 5.0  # between starts of `up`'s own Redis that failed (its port taken meanwhile)


@dataclass
class Stack:
    """Child processes of one run; a context manager that stops them all, Redis last."""

    settings: Settings
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    log_dir: Path | None = None
    _redis_retry_at: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.env = {**os.environ, **absolute_paths(self.settings), **self.env}
        # a URL someone chose (the environment, a settings file), not the default one; a blank
        # variable is none, as the settings read it (QA 58d N1: `up` looked for a Redis at "")
        if not self.env.get("FITTEST_REDIS_URL", "").strip():
            self.env.pop("FITTEST_REDIS_URL", None)
        self.chosen_url = "FITTEST_REDIS_URL" in self.env or "redis_url" in self.settings.model_fields_set
        self.env.setdefault("FITTEST_REDIS_URL", self.settings.redis_url)

    @property
    def redis_url(self) -> str:
        return self.env["FITTEST_REDIS_URL"]

    def _refuse_if_full(self) -> None:
        """A Redis that answers but refuses writes (past its maxmemory) is said at once, as `fittest
        health` says it: every role started on it ended on its first write, and `up` gave up on the
        stack a minute later with no word of Redis (QA 59d H1)."""
        from workers.health import redis_memory

        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=2.0, socket_timeout=2.0,
                                      **self.settings.redis_tls(self.redis_url))
        try:
            status, detail = redis_memory(client, self.settings.key_prefix)
        except redis.RedisError:  # what it refuses besides is for the workers, and `fittest health`, to tell
            return
        finally:
            client.close()
        if status == "fail":
            raise StackError(f"{detail} (FITTEST_REDIS_URL {redact_url(self.redis_url)}): nothing was started")

    def ensure_redis(self) -> str:
        """The Redis URL the stack uses: FITTEST_REDIS_URL when it answers; else, for a URL on this
        machine, a private redis-server started on that URL's port, with its password and database,
        so that commands run elsewhere with the same settings reach it. A port something else
        holds gets a free one instead (the URL changes; `fittest up` prints the one in use)."""
        refused = redis_refusal(self.redis_url, tls=self.settings.redis_tls(self.redis_url))
        waited_until = time.monotonic() + LOADING_WAIT_S
        while refused in (LOADING, SLOW) and time.monotonic() < waited_until:  # a Redis restarted a moment ago
            time.sleep(0.5)
            refused = redis_refusal(self.redis_url, tls=self.settings.redis_tls(self.redis_url))
        if refused is None:
            self._refuse_if_full()
            return self.redis_url
        if refused == LOADING:
            raise StackError(f"Redis at FITTEST_REDIS_URL ({redact_url(self.redis_url)}) was still loading its data set "
                             f"into memory after {LOADING_WAIT_S:g} s: start again once it answers")
        if refused == SLOW:  # waited for, as a Redis slow to start (QA 59e); silent still, a port something else holds
            refused = ""
        # Someone else's Redis on the default URL is not ours to mend: one of our own starts beside it
        # (review 51: `fittest up` and `demo` refused, naming a FITTEST_REDIS_URL nobody had set).
        if refused in (NOT_REDIS, CLOSES) and self.chosen_url:
            said = "is not what answers" if refused == NOT_REDIS else "does not answer"
            raise StackError(f"Redis {said} at FITTEST_REDIS_URL ({redact_url(self.redis_url)}): "
                             f"{refused}; point it at a Redis, or at a free port for one of fittest's own")
        if refused and self.chosen_url:
            raise StackError(f"Redis at FITTEST_REDIS_URL ({redact_url(self.redis_url)}) refuses the connection ({refused}): "
                             "mend its password or database")
        wanted = urlparse(self.redis_url)
        if self.chosen_url and wanted.hostname not in ("127.0.0.1", "localhost"):
            raise StackError(f"Redis at FITTEST_REDIS_URL ({redact_url(self.redis_url)}) does not answer")
        password = unquote(wanted.password) if wanted.password else None
        try:
            proc, url = start_private_redis(self.settings.data_dir, wanted.port or 6379, password)
        except StackError:  # the port is taken by something that is not this Redis
            proc, url = start_private_redis(self.settings.data_dir, password=password)
        database = wanted.path if wanted.path not in ("", "/") else "/0"
        url = f"{url.rpartition('/')[0]}{database}"
        self.procs["redis"] = proc
        self.env["FITTEST_REDIS_URL"] = url
        return url

    def revive_redis(self, say: Callable[[str], None]) -> None:
        """Start the private Redis again when it ended under a running stack (killed, the OOM
        killer, `redis-cli shutdown`), on its port, from its append-only file: the roles wait out a
        Redis restart and go on. Without it `up` said nothing, and the roles waited for a Redis that
        never came back (QA L). A start that fails is tried again every REDIS_RETRY_S."""
        proc = self.procs.get("redis")
        if proc is None or proc.poll() is None or time.monotonic() < self._redis_retry_at:
            return
        wanted = urlparse(self.redis_url)
        say(f"the Redis it started ended (rc={proc.returncode}); starting it again on port {wanted.port}, "
            "from its append-only file")
        try:
            self.procs["redis"], _ = start_private_redis(self.settings.data_dir, wanted.port,
                                                         unquote(wanted.password) if wanted.password else None)
        except StackError as exc:
            say(f"{exc}; trying again in {REDIS_RETRY_S:g} s")
            self._redis_retry_at = time.monotonic() + REDIS_RETRY_S

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        log: AbstractContextManager[int | IO[bytes]] = nullcontext(subprocess.DEVNULL)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = open(self.log_dir / f"{name}.log", "ab")
        # The child writes to its own copy of the log file; ours is closed once it started (review
        # 57b F1: each restart of a role, as the chaos bench does, left one more open).
        with log as out:
            proc = subprocess.Popen(command, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=die_with_parent)
        self.procs[name] = proc
        return proc

    def start_roles(self, roles: Iterable[str]) -> None:
        for role in roles:
            self.start(role, worker_roles()[role].command)

    def workers_answering(self, timeout: float = 1.0, patient_timeout: float = PATIENT_ASK_S,
                          waiting: Callable[[int, int], None] = lambda answered, bound: None) -> dict[str, str | None]:
        """The workers that answer on this stack's broker (their node names), each with the key
        prefix of the stack it serves (None: a worker that does not say, of an older release):
        before this stack starts its own, another stack's. FITTEST_KEY_PREFIX keeps fittest's keys
        apart, not Celery's queues and results, so two stacks on one Redis database take each
        other's calls (QA new user: `fittest demo` beside `fittest up` had its calls run by up's workers).

        Asked for `timeout`; when fewer answer than the broker has workers' mailboxes bound (a
        worker binds its own as it starts and unbinds it as it stops), asked again, a second at a
        time, for up to `patient_timeout` or until as many answer: a busy host's worker may answer
        later than a second (CI: `up` took another stack's database, whose memory worker ran, for
        its own), and one starting again after a crash hears only the questions asked once it
        listens (QA 53a: one longer question missed a stack whose workers had all been killed and
        were restarting). A worker killed outright leaves its mailbox bound, and each later
        question waits the longer time. `waiting(answered, bound)` is told when it begins."""
        from workers.app import make_app

        from kombu import pools

        app = make_app(self.settings.model_copy(update={"redis_url": self.redis_url, "result_backend": None}))
        try:
            replies = app.control.inspect(timeout=timeout).conf(with_defaults=False) or {}
            patient_until = time.monotonic() + patient_timeout
            if len(replies) < (bound := self._mailboxes_bound()) and patient_timeout > 0:
                waiting(len(replies), bound)  # what the command says while it waits (QA 53a: nothing)
            while len(replies) < self._mailboxes_bound() and time.monotonic() < patient_until:
                replies |= app.control.inspect(timeout=min(1.0, patient_until - time.monotonic())).conf(with_defaults=False) or {}
        except (redis.RedisError, OSError, OperationalError):
            return {}
        finally:
            app.close()
            # The inspect's connections sit in kombu's global pools, which close themselves again in
            # every process forked after (an after-fork hook): each role's relay, a fork of `up`,
            # waited there for a reply on the broker's socket, 15 s (its timeout), before it started
            # its role (QA ops: a killed role "restarting it in 1 s" came back 14-17 s later).
            pools.reset()
        return {host: (conf or {}).get("fittest_stack_prefix") for host, conf in sorted(replies.items())}

    def others_served_here(self) -> list[str]:
        """The key prefixes of other stacks that were served on this Redis database, when this
        stack's never was: with their workers stopped, `workers_answering` finds nothing, and this
        stack's workers would run the calls waiting for theirs (QA 60a F1)."""
        from workers.state.stacks import other_stacks

        client = self._probe()
        try:
            return other_stacks(client, self.settings.key_prefix) or []
        except redis.RedisError:
            return []
        finally:
            client.close()

    def _probe(self) -> redis.Redis:
        """A client for the checks `up` makes before it starts the roles: with the URL's TLS
        settings, and failing within PROBE_S rather than riding out a stalled Redis (review 60f)."""
        from workers.redis_connection import probe_client

        return probe_client(self.settings.model_copy(update={"redis_url": self.redis_url}), PROBE_S)

    def _redis_dir(self) -> Path | None:
        """The working directory of the Redis at this stack's URL (None: CONFIG refused, or said none)."""
        client = self._probe()
        try:
            said = str(client.config_get("dir").get("dir", ""))
        except redis.RedisError:
            return None
        finally:
            client.close()
        return Path(said).resolve() if said else None

    def redis_of_another_up(self) -> Path | None:
        """The data directory of the `fittest up` that started the Redis this stack uses, when it is
        another's: that Redis stops when that stack stops, and this one's calls with it (QA 60a F2).
        Known by the directory such a Redis keeps its append-only file in (DATA_DIR/redis, beside
        that stack's up.lock); None when it is this stack's, not one `up` started, or its CONFIG
        cannot be read."""
        workdir = self._redis_dir()
        if workdir is None or workdir.name != "redis" or not (workdir.parent / "up.lock").exists():
            return None
        return None if workdir.parent == self.settings.data_dir.resolve() else workdir.parent

    def own_redis_data_unused(self) -> Path | None:
        """This stack's DATA_DIR/redis when it holds the append-only file of a Redis an earlier `up`
        started here, and another Redis answers at the URL: a restored data directory's whole state
        is in that file, and `up` started none, as one answered (QA 60c F6). None otherwise, or when
        the answering Redis's directory cannot be read."""
        kept = (self.settings.data_dir / "redis").resolve()
        if not any(kept.glob("appendonly*")):
            return None
        workdir = self._redis_dir()
        return None if workdir is None or workdir == kept else kept

    def _mailboxes_bound(self) -> int:
        """How many workers' remote-control mailboxes kombu's Redis transport has bound on this
        database (the members of its fanout exchange's binding set, `celery.pidbox`: one a node)."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            return int(client.scard(PIDBOX_BINDINGS))
        finally:
            client.close()

    def wait_for_workers(self, names: Iterable[str], timeout: float = 60.0) -> None:
        """Block until every named worker answers a ping (so no test races a starting worker)."""
        from workers.app import make_app

        app = make_app(self.settings.model_copy(update={"redis_url": self.redis_url, "result_backend": None}))
        wanted = set(names)
        deadline = time.monotonic() + timeout
        seen: set[str] = set()
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None and name != "redis":
                    raise StackError(f"{name} exited with code {proc.returncode} while starting")
            try:
                replies = app.control.ping(timeout=0.5) or []
            except (redis.RedisError, OSError, OperationalError):  # the broker is restarting: ask again
                time.sleep(0.5)
                continue
            seen = {host.split("@")[0] for reply in replies for host in reply}
            if wanted <= seen:
                return
        raise StackError(f"workers {sorted(wanted - seen)} did not answer within {timeout:.0f}s")

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Stop a role: SIGKILL goes to its whole process group (a crash); any other signal to its
        main process only, as `docker stop` does, so that a worker's warm shutdown lets its pool
        finish the running tasks (a pool process that got SIGTERM itself would die mid-task).
        After `timeout`, or once the main process is gone, whatever is left of the group is killed."""
        proc = self._signal(name, sig)
        if proc is not None:
            _reap(proc, timeout)

    def stop_all(self, timeout: float = 15.0) -> None:
        """Stop every role at once (their warm shutdowns take ~3 s each and overlap), Redis last,
        once no worker still needs it to finish its tasks."""
        roles = [name for name in self.procs if name != "redis"]
        signalled = [proc for proc in map(self._signal, roles) if proc is not None]
        deadline = time.monotonic() + timeout
        for proc in signalled:
            _reap(proc, max(0.0, deadline - time.monotonic()))
        if "redis" in self.procs:
            self.stop("redis")

    def _signal(self, name: str, sig: int = signal.SIGTERM) -> subprocess.Popen | None:
        """Forget the role and send it `sig`; its process, or None when it had already ended. A
        role whose main process ended on its own can have left processes in its group (a worker's
        pool when the worker crashed): those are killed, while the unreaped main process still
        holds the group's id. One reaped earlier is left alone: its id may belong to another
        process group by now (pids wrap at 32,768 here)."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        if proc.returncode is None and _ended_unreaped(proc.pid):
            _kill_group(proc.pid)
        if proc.poll() is not None:
            return None
        try:
            if sig == signal.SIGKILL:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
        except ProcessLookupError:
            return None
        return proc

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


def _reap(proc: subprocess.Popen, timeout: float) -> None:
    """Wait up to `timeout` for a signalled role to end, kill whatever is left of its group while
    its main process is still unreaped (so the group's id is still the role's), then reap it."""
    deadline = time.monotonic() + timeout
    while proc.returncode is None and not _ended_unreaped(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if proc.returncode is None:  # else it was reaped elsewhere and its id is no longer the role's
        _kill_group(proc.pid)
    proc.wait(timeout=5)


def _ended_unreaped(pid: int) -> bool:
    """Whether our child `pid` has ended, without reaping it: until it is reaped its pid, and with
    it its process group's id, cannot be given to another process."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False


def _kill_group(pgid: int) -> None:
    """SIGKILL to what is left of a role's process group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass

"""The `executable` runner: a program started from an argv list, JSON on stdin, JSON on stdout.

Never a shell. Each argv entry is a template: `{tool_dir}`, `{evolved_file}`, `{python}` (this
worker's interpreter) and `{<key>}` (str() of a top-level key of the input) are substituted
within that one entry, so a value full of spaces, quotes, `;` or `$(...)` reaches the program as
one literal argument. An unknown placeholder is refused (bad_input), never replaced by '';
`{{` and `}}` stand for literal braces. The built-in names win over input keys of the same name.

Isolation, and why each part is there:
- a fresh temporary working directory, also HOME and TMPDIR: the tool sees no other run's files
  and leaves nothing behind; one whose worker process was killed mid-run, which could not remove
  it, is removed by the next worker process that starts (`remove_left_behind`: its name holds
  the pid of the process that made it);
- an environment reduced to an allow-list: the worker's secrets (`FITTEST_*`, broker URLs, API
  keys) are never passed to tools (one running as the worker's user may still read them from the
  worker's /proc/<pid>/environ: QA 57c H1, the README's "What tools and callers can do");
- a new session and process group: the whole tree the tool starts can be killed as one;
- resource limits set in the child before exec (`preexec_fn`): CPU seconds, address space, file
  size, open files, and processes. `preexec_fn` is documented as unsafe with threads because
  the child may need a lock another thread held at fork; ours only calls `setrlimit` with
  precomputed values and a prctl looked up beforehand, which take no such lock. RLIMIT_NPROC counts every process of the user,
  not of the tool, and the kernel ignores it for root; so it is set only when the worker does not
  run as root, and a dedicated user for workers is what makes it meaningful.
  These limits stop accidents (runaway loops, memory, disk), not a hostile tool running as root,
  which could raise them again: that needs a container;
- the tool's process is killed (SIGKILL, PR_SET_PDEATHSIG) when the worker process that started it
  dies: the timeout and the group kill below are this process's doing, so a tool whose worker was
  killed with SIGKILL ran on past its timeout, beside its attempt's redelivery (QA R: a tool that
  sleeps 200 s with a 15 s timeout, still running 29 s after its executor was killed; an evolver
  killed mid-verification went on running the candidate on its remaining test cases). What the tool
  started itself is not covered: the kernel clears the setting in a fork's child;
- a hard timeout after which the process group is killed with SIGKILL and the leader reaped.
  The group is killed after every run, not only on timeout: no process of a tool outlives its
  attempt. Nor does one that left the group (setsid, a daemon's double fork): while the run is
  in flight this process is a child subreaper, so such orphans become its children instead of
  init's, and after the run they are killed with all below them and reaped (workers/runners/
  reaper.py). The group's killed members are reaped here too. Run workers under an init that
  reaps all the same (`docker run --init`, tini): orphans of anything else go to it.

Exit status convention: 0 with one JSON document on stdout is success; 65 (EX_DATAERR from
sysexits.h) means "the input was bad" (bad_input); 69 (EX_UNAVAILABLE) means "something the tool
needs could not be reached" (unavailable); any other exit or a signal is a crash, except SIGXCPU
(CPU limit) which is a timeout.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import selectors
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selection.manifest import ExecutableImplementation, ToolManifest
from selection.models import FailureClass
from workers.dying import pid_alive
from workers.prctl import PR_SET_PDEATHSIG, prctl_call
from workers.runners.base import Deadline, RunLimits, RunOutcome, encode_input, judge_json_bytes, with_stderr
from workers.runners.reaper import Run

INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
READ_CHUNK = 65536
POLL_S = 0.05  # how often the exchange looks whether the tool has exited


class ArgvError(ValueError):
    """An argv template that cannot be filled in for this input."""


def build_argv(manifest: ToolManifest, input: dict[str, Any]) -> list[str]:
    """Fill each argv template strictly: one template, one argument, every placeholder known."""
    impl = manifest.implementation
    assert isinstance(impl, ExecutableImplementation)
    builtins: dict[str, str | None] = {
        "tool_dir": manifest.tool_dir,
        "evolved_file": _evolved_path(manifest),
        "python": sys.executable,
    }
    argv: list[str] = []
    for template in impl.argv:  # each one parses, with plain placeholders only: the manifest checked it
        arg: list[str] = []
        for literal, name, _, _ in string.Formatter().parse(template):
            arg.append(literal)
            if name is None:
                continue
            if name in builtins:
                value = builtins[name]
                if value is None:
                    raise ArgvError(f"placeholder {{{name}}} has no value for {manifest.key}")
            elif name in input:
                value = str(input[name])
            else:
                raise ArgvError(f"unknown placeholder {{{name}}} in {template!r}: not a built-in and not an input key")
            arg.append(value)
        text = "".join(arg)
        if "\0" in text:
            raise ArgvError(f"argument from {template!r} contains a NUL byte")
        argv.append(text)
    return argv


def _evolved_path(manifest: ToolManifest) -> str | None:
    if manifest.evolved_file is None or manifest.tool_dir is None:
        return manifest.evolved_file
    return os.path.join(manifest.tool_dir, manifest.evolved_file)


def tool_env(workdir: str) -> dict[str, str]:
    """The whole environment a tool gets: the allow-list, with home and temp in its workdir."""
    env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(
        HOME=workdir,
        TMPDIR=workdir,
        PYTHONDONTWRITEBYTECODE="1",  # tool directories may be read-only and are shared
        PYTHONIOENCODING="utf-8",  # JSON is UTF-8 whatever the locale
    )
    return env


def _rlimits(limits: RunLimits) -> list[tuple[int, int]]:
    """(resource, limit) pairs, each capped at the worker's own hard limit (which only root may raise)."""
    mb = 1024 * 1024
    wanted = [
        (resource.RLIMIT_AS, limits.memory_mb * mb),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * mb),
        (resource.RLIMIT_NOFILE, limits.max_open_files),
    ]
    if os.geteuid() != 0 or (limits.run_as is not None and limits.run_as[0] != 0):  # counted for the tool's user
        wanted.append((resource.RLIMIT_NPROC, limits.max_processes))
    capped = []
    for res, value in wanted:
        hard = resource.getrlimit(res)[1]
        capped.append((res, value if hard == resource.RLIM_INFINITY else min(value, hard)))
    return capped


def _limiter(limits: RunLimits) -> Any:
    """The `preexec_fn`: sets precomputed limits and the signal of the worker's death, nothing else
    (see the module docstring)."""
    pairs = _rlimits(limits)
    set_attribute, worker = prctl_call(), os.getpid()
    cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    cpu = limits.cpu_s if cpu_hard == resource.RLIM_INFINITY else min(limits.cpu_s, cpu_hard)
    # SIGXCPU at the soft limit (the tool may report it), SIGKILL one second later.
    cpu_pair = (cpu, cpu + 1 if cpu_hard == resource.RLIM_INFINITY else cpu_hard)

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, cpu_pair)
        for res, value in pairs:
            resource.setrlimit(res, (value, value))
        if set_attribute(PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() != worker:
            os.kill(os.getpid(), signal.SIGKILL)  # the worker died before the setting was made

    return apply


@dataclass
class _Exchange:
    """What passed between the worker and the tool's process."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    timed_out: bool = False
    overflow: bool = False


def _exited(pid: int) -> bool:
    """Whether the leader has exited, without reaping it: a zombie leader keeps its process-group
    id reserved, so the group can still be killed safely after this says True."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return info is not None


def _exchange(proc: subprocess.Popen[bytes], data: bytes, deadline: Deadline, limits: RunLimits) -> _Exchange:
    """Write stdin and read stdout/stderr together (no pipe can fill and block the tool), until
    the leader exits, the deadline passes, or stdout exceeds the cap."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    result = _Exchange()
    sel = selectors.DefaultSelector()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        os.set_blocking(stream.fileno(), False)
    pending = memoryview(data)
    if pending:
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    sel.register(proc.stdout, selectors.EVENT_READ, result.stdout)
    sel.register(proc.stderr, selectors.EVENT_READ, result.stderr)

    def read(key: selectors.SelectorKey) -> bool:
        """Read one chunk; False when the pipe had nothing (yet) or reached its end."""
        try:
            chunk = os.read(key.fd, READ_CHUNK)
        except BlockingIOError:
            return False
        if not chunk:
            sel.unregister(key.fileobj)
            return False
        buf: bytearray = key.data
        buf += chunk
        if key.fileobj is proc.stderr and len(buf) > 2 * READ_CHUNK:
            del buf[: len(buf) - READ_CHUNK]  # only the tail of stderr is ever shown
        if key.fileobj is proc.stdout and len(buf) > limits.output_limit_bytes:
            result.overflow = True
        return True

    try:
        while not result.overflow:
            remaining = deadline.remaining()
            if remaining <= 0:
                result.timed_out = True
                break
            if not sel.get_map():  # all pipes closed, the tool may still be running
                if _exited(proc.pid):
                    break
                time.sleep(min(POLL_S / 5, remaining))
                continue
            for key, _ in sel.select(timeout=min(POLL_S, remaining)):
                if key.fileobj is not proc.stdin:
                    read(key)
                    continue
                try:
                    pending = pending[os.write(key.fd, pending[:READ_CHUNK]) :]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    pending = pending[:0]  # a tool may ignore its input; its exit status will tell
                if not pending:
                    sel.unregister(proc.stdin)
                    proc.stdin.close()
            if _exited(proc.pid):
                # Take what is already in the pipes; a straggler holding them open is not waited for.
                for key in [k for k in sel.get_map().values() if k.fileobj is not proc.stdin]:
                    while not result.overflow and read(key):
                        pass
                break
    finally:
        sel.close()
    return result


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the tool's whole process group, then reap the leader."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


# The last line of a Python traceback that read a key of the input it was not given.
_MISSING_KEY = re.compile(rb"^KeyError: '([^'\n]{1,200})'\s*$")


def _missing_key(stderr: bytes, input: dict[str, Any]) -> str | None:
    """The input key a python executable's traceback says it lacked, if the input lacks it: the
    refusal of an input shaped for another tool, as a python tool's KeyError is (bad_input). As a
    crash it was charged in full to a fallback whose description was near the job (QA recheck: a
    text tool 0.57 similar to a headline job, 10 crashes, quality 0.00)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    found = _MISSING_KEY.match(lines[-1]) if lines else None
    key = found.group(1).decode("utf-8", "replace") if found else None
    return key if key is not None and key not in input else None


def _classify_exit(returncode: int, ex: _Exchange, limits: RunLimits, input: dict[str, Any]) -> RunOutcome:
    stderr = bytes(ex.stderr)
    if returncode == 0:
        outcome = judge_json_bytes(bytes(ex.stdout), limits.output_limit_bytes, what="stdout")
        if not outcome.success and outcome.error_message is not None:
            outcome.error_message = with_stderr(outcome.error_message, stderr)
        return outcome
    if returncode == 1 and (key := _missing_key(stderr, input)) is not None:
        return RunOutcome.fail(FailureClass.bad_input, with_stderr(f"the tool read {key!r}, which the input lacks", stderr))
    if returncode == os.EX_DATAERR:
        return RunOutcome.fail(FailureClass.bad_input, with_stderr(f"the tool refused its input (exit {os.EX_DATAERR})", stderr))
    if returncode == os.EX_UNAVAILABLE:
        return RunOutcome.fail(FailureClass.unavailable, with_stderr(f"the tool could not reach what it needs (exit {os.EX_UNAVAILABLE})", stderr))
    if returncode == -signal.SIGXCPU:
        return RunOutcome.fail(FailureClass.timeout, with_stderr(f"CPU time limit of {limits.cpu_s}s exceeded", stderr))
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return RunOutcome.fail(FailureClass.crash, with_stderr(f"killed by {name}", stderr))
    return RunOutcome.fail(FailureClass.crash, with_stderr(f"exit status {returncode}", stderr))


WORKDIR_PREFIX = "fittest-run-"  # then the pid of the process that made it, then tempfile's own part


def remove_left_behind(tmp: Path | None = None) -> list[Path]:
    """Remove the working directories of runs whose process is gone (killed mid-run, its
    `TemporaryDirectory` never cleaned up: QA 49 found them in /tmp after killed workers); the
    ones removed. Another stack's, of a live process, are left alone."""
    removed = []
    for workdir in (tmp or Path(tempfile.gettempdir())).glob(f"{WORKDIR_PREFIX}*-*"):
        pid = workdir.name.removeprefix(WORKDIR_PREFIX).partition("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)) and workdir.is_dir():
            shutil.rmtree(workdir, ignore_errors=True)
            removed.append(workdir)
    return removed


class CannotSwitchUser(RuntimeError):
    pass


def _as_user(limits: RunLimits) -> dict[str, Any]:
    """Popen's arguments that start the tool as FITTEST_TOOL_USER (`limits.run_as`): none without
    one, or in a process that runs as that user already (the verification sandbox's, whose
    candidates it runs); CannotSwitchUser in any other process that is not root. The credentials
    change before `preexec_fn` runs, so its limits and its death signal hold for the tool."""
    if limits.run_as is None or os.geteuid() == limits.run_as[0]:
        return {}
    if os.geteuid() != 0:
        raise CannotSwitchUser(f"FITTEST_TOOL_USER (uid {limits.run_as[0]}) is set, and this worker does not run as root, "
                               "which alone may start a process as another user")
    uid, gid = limits.run_as
    return {"user": uid, "group": gid, "extra_groups": []}


PYTHON_PROBE = ToolManifest(name="fittest_python_probe", description="whether the tool user can run fittest's Python",
                            implementation={"kind": "executable", "argv": ["{python}", "-c", "import workers.sandbox; print(dict())"]})


def python_refused(limits: RunLimits) -> str | None:
    """Why a tool subprocess cannot run this Python with fittest's packages, as FITTEST_TOOL_USER
    (`limits.run_as`) would run it; None when it can, or no such user is set. The `{python}`
    tools, the evolved python versions and the verification sandbox all need it (QA 57d M1: with
    the interpreter under /root, every one failed as its tool's own fault, and nothing said why)."""
    if limits.run_as is None:
        return None
    ran = run_executable(PYTHON_PROBE, {}, timeout_s=60, limits=limits)
    return None if ran.success else ran.error_message or "it failed"


def run_executable(manifest: ToolManifest, input: dict[str, Any], *, timeout_s: float, limits: RunLimits,
                   env: Mapping[str, str] | None = None) -> RunOutcome:
    """Run an executable tool; every failure is an outcome, never an exception. `env`: variables
    fittest gives this run beside the allow-list (an evolved http tool's parent settings)."""
    try:
        argv = build_argv(manifest, input)
    except ArgvError as exc:
        return RunOutcome.fail(FailureClass.bad_input, str(exc))
    data = encode_input(input)
    deadline = Deadline(timeout_s)
    try:
        as_user = _as_user(limits)
    except CannotSwitchUser as exc:
        return RunOutcome.fail(FailureClass.unavailable, str(exc))
    with tempfile.TemporaryDirectory(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-", ignore_cleanup_errors=True) as workdir, Run() as run:
        if as_user:
            os.chown(workdir, as_user["user"], as_user["group"])  # its home and temp: the one place it writes
        try:
            proc = run.start(
                lambda: subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=workdir,
                    env={**tool_env(workdir), **(env or {})},
                    start_new_session=True,
                    preexec_fn=_limiter(limits),
                    close_fds=True,
                    **as_user,
                )
            )
        except OSError as exc:  # program missing, not executable, or limits refused
            if exc.errno == errno.E2BIG:  # an argument filled from the input is past what exec takes: the input's doing
                longest = max(len(a.encode()) for a in argv)
                return RunOutcome.fail(FailureClass.bad_input, f"cannot start {argv[0]!r}: {exc.strerror or exc} "
                                                               f"(its longest argument, filled from the input, has {longest} bytes)")
            return RunOutcome.fail(FailureClass.unavailable, f"cannot start {argv[0]!r}: {exc.strerror or exc}")
        try:
            ex = _exchange(proc, data, deadline, limits)
        finally:
            _kill_group(proc)  # then, leaving `run`, what left the group (workers/runners/reaper.py)
    stderr = bytes(ex.stderr)
    if ex.timed_out:
        outcome = RunOutcome.fail(FailureClass.timeout, with_stderr(f"no result within {timeout_s:.3g}s; process group killed", stderr))
    elif ex.overflow:
        outcome = RunOutcome.fail(
            FailureClass.bad_output,
            with_stderr(f"stdout exceeded the limit of {limits.output_limit_bytes} bytes; process group killed", stderr),
        )
    else:
        outcome = _classify_exit(proc.returncode, ex, limits, input)
    # Not `outcome.stalled_s`: the tool's process ran on while this one was stopped, so its run took
    # the wall time, as far as anyone can tell (QA recheck: a 1.6 s run was recorded as 11 ms, and
    # run times set the adaptive timeout). Only its deadline moved by the stop.
    return outcome

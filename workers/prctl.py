"""Linux's prctl(2) through ctypes: a process asks the kernel to signal it when its parent dies
(`fittest up`'s roles, the tests' redis-servers, a tool's process) or to adopt its orphans (the
tool runner)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl_call() -> Callable[[int, int], bool]:
    """prctl looked up now, to be called later: in a child between fork and exec (a `preexec_fn`)
    looking it up is unsafe, as dlopen takes the loader's lock, which another thread of the parent
    may have held at the fork. The call returns False where prctl does not exist (not Linux), which
    callers take as "this guard is not there" rather than as an error."""
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda option, arg: False
    return lambda option, arg: int(function(option, arg, 0, 0, 0)) == 0


def prctl(option: int, arg: int) -> bool:
    """Set one process attribute; False where prctl does not exist (not Linux)."""
    return prctl_call()(option, arg)

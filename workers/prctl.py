"""Linux's prctl(2) through ctypes: a process asks the kernel to signal it when its parent dies
(`fittest up`'s roles, the tests' redis-servers) or to adopt its orphans (the tool runner)."""

from __future__ import annotations

import ctypes

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, arg: int) -> bool:
    """Set one process attribute; False where prctl does not exist (not Linux), which callers
    take as "this guard is not there" rather than as an error."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False

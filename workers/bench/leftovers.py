"""What a selection bench killed outright (SIGKILL, the OOM killer) leaves behind, removed by the
next one: the keys of its private state in a Redis it shares, and the temporary directories of its
vector store and private redis-server. A bench that ends any other way removes its own
(workers/bench/selection.py); one killed could not, and nothing did (QA 51b L10: a run killed
after 300 queries left ~2,400 keys in the machine's Redis for good).

A running bench is told from a dead one without guessing from ages: its private key prefix holds
an `alive` key, naming its host and process, that it renews while it runs (ALIVE_TTL_S), and each
directory holds the id of the process that made it (OWNER_FILE). A prefix without the key, or
whose key names a process of this host that is gone, and a directory whose process is gone,
belong to no running bench.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel
from redis import Redis

from workers.dying import pid_alive
from workers.state.redis import RedisStateStore

PREFIX = re.compile(r"^(bench[0-9a-f]{10}:)")  # workers/bench/selection.py `_private_settings`
ALIVE_KEY = "bench:alive"
ALIVE_TTL_S = 120  # renewed every RENEW_S: a bench stopped longer than this (SIGSTOP) counts as dead
RENEW_S = 30.0
OWNER_FILE = "bench.pid"
DIR_PATTERN = "fittest-bench-*"  # its store's directory, and its private redis-server's (fittest-bench-redis-*)


class Leftovers(BaseModel):
    """What a sweep removed: the keys under these prefixes, and these directories."""

    prefixes: list[str] = []
    directories: list[str] = []

    def told(self) -> str:
        """One line for the bench's notice ("" when nothing was removed)."""
        parts = []
        if self.prefixes:
            parts.append(f"the keys under {', '.join(self.prefixes)}")
        if self.directories:
            parts.append(f"{len(self.directories)} directories ({', '.join(self.directories)})")
        return f"removed what benches killed before their clean-up left: {'; '.join(parts)}" if parts else ""


def mark_alive(client: Redis, prefix: str) -> None:
    """Say that the bench owning `prefix` runs, for ALIVE_TTL_S."""
    client.set(f"{prefix}{ALIVE_KEY}", f"{socket.gethostname()} {os.getpid()}", ex=ALIVE_TTL_S)


def mark_owner(directory: Path) -> None:
    """Write this process's id into a directory a bench made."""
    (directory / OWNER_FILE).write_text(str(os.getpid()))


def sweep(client: Redis, tmp: Path | None = None) -> Leftovers:
    """Remove the keys of every bench prefix whose `alive` key is gone or names a process gone, and
    every bench directory whose owner process is gone."""
    found = Leftovers()
    for prefix in sorted(_prefixes(client)):
        if not _owner_gone(client.get(f"{prefix}{ALIVE_KEY}")):
            continue
        RedisStateStore(client, prefix).clear()  # as the bench's own clean-up does
        found.prefixes.append(prefix)
    root = tmp or Path(tempfile.gettempdir())
    for directory in sorted(root.glob(DIR_PATTERN)):
        if directory.is_dir() and _directory_owner_gone(directory):
            shutil.rmtree(directory, ignore_errors=True)
            found.directories.append(directory.name)
    return found


def _prefixes(client: Redis) -> Iterator[str]:
    """The private key prefixes of the selection benches that have keys in this Redis."""
    seen: set[str] = set()
    for key in client.scan_iter(match="bench*:*", count=1000):
        text = key.decode() if isinstance(key, bytes) else str(key)
        if (m := PREFIX.match(text)) is not None and m.group(1) not in seen:
            seen.add(m.group(1))
            yield m.group(1)


def _owner_gone(alive: bytes | str | None) -> bool:
    """Whether the bench an `alive` key's value names has ended: no key (expired), or a process of
    this host that is gone. One of another host is alive while its key is."""
    if alive is None:
        return True
    text = alive.decode(errors="replace") if isinstance(alive, bytes) else alive
    host, _, pid = text.rpartition(" ")
    return host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))


def _directory_owner_gone(directory: Path) -> bool:
    """Whether the process named in the directory's OWNER_FILE has ended. A directory without one
    (made by an older release, or in the instant before the file was written) is left alone."""
    try:
        pid = int((directory / OWNER_FILE).read_text().strip())
    except (OSError, ValueError):
        return False
    return not pid_alive(pid)

"""What the Redis stores of this package share: their Lua scripts, one `.lua` file each in `lua/`
headed by its KEYS, ARGV and what it does atomically, which every store loads by name here (a
script is read from disk once per process, and no store registers another's), and their keys, all
under one prefix."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from redis import Redis
from redis.commands.core import Script

LUA_DIR = Path(__file__).parent / "lua"


@cache
def script_text(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text()


def load_scripts(client: Redis, *names: str) -> dict[str, Script]:
    """The scripts `names` registered on `client` (sent by hash, loaded again where Redis lost them)."""
    return {name: client.register_script(script_text(name)) for name in names}


class PrefixedStore:
    """A store whose keys all start with `prefix`: the prefix keeps deployments and tests that share
    a Redis apart, and what clears a store deletes by it, so it may not be empty."""

    def __init__(self, client: Redis, prefix: str) -> None:
        if not prefix:
            raise ValueError(f"a {type(self).__name__} needs a non-empty key prefix")
        self.client = client
        self.prefix = prefix

    def _k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

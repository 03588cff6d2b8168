"""The Redis Lua scripts of the stores in this package: one `.lua` file each in `lua/`, headed by its
KEYS, ARGV and what it does atomically. Every store loads the scripts it runs by name, here, so a
script is read from disk once per process and no store registers another's."""

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

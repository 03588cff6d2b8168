"""What the Redis stores of this package share: their Lua scripts, one `.lua` file each in `lua/`
headed by its KEYS, ARGV and what it does atomically, which every store loads by name here (a
script is read from disk once per process, and no store registers another's), and their keys, all
under one prefix."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.commands.core import Script as RedisScript
from redis.exceptions import NoScriptError

from workers.state.pipelined import execute_scripts

LUA_DIR = Path(__file__).parent / "lua"
# How long an applied id (an attempt's, an outcome's) is remembered, by every store: a redelivery
# comes within minutes, a replay of old messages within days.
IDEMPOTENCY_TTL_S = 7 * 24 * 3600


def as_text(value: Any) -> str:
    """A reply of Redis as text, whether the client decodes replies or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


@cache
def script_text(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text()


class Script(RedisScript):
    """A script sent by hash that runs whatever happens to Redis's script cache meanwhile.

    redis-py's own Script, called on its own, answers NOSCRIPT with SCRIPT LOAD and one more
    EVALSHA; when the cache is emptied again between those two (a second SCRIPT FLUSH, or Redis
    restarting twice in a row), that EVALSHA's NoScriptError ends the call (QA: a SCRIPT FLUSH every
    0.2 s under a stream of calls ended 1 call of 300 with NoScriptError from stats_and_breakers).
    NOSCRIPT means the script did not run, so it is then sent once more as EVAL, with its text,
    which no cache can miss. In a pipeline the script is only queued here: workers/state/pipelined.py
    sends such a pipeline again."""

    def __call__(self, keys: Sequence[Any] | None = None, args: Iterable[Any] | None = None,
                 client: Any = None) -> Any:
        keys, args = list(keys or []), list(args or [])
        try:
            return super().__call__(keys, args, client)
        except NoScriptError:
            target = client if client is not None else self.registered_client
            text = self.script if isinstance(self.script, str) else bytes(self.script).decode()
            return target.eval(text, len(keys), *keys, *args)


def load_scripts(client: Redis, *names: str) -> dict[str, Script]:
    """The scripts `names` registered on `client` (sent by hash, loaded again where Redis lost them)."""
    return {name: Script(client, script_text(name)) for name in names}


def push_recent(client: Redis, script: Script, pushes: Sequence[tuple[str, str, str]], cap: int) -> list[bool]:
    """Push each (list key, idempotency key, record JSON) onto its list of recent records, kept to
    the newest `cap`, in one round trip (`script`: push_recent.lua, loaded on `client`); True for
    each record pushed now, False for one whose idempotency key was set before. One place for what
    the recent successes and the learner's window both need: a redelivered attempt is not pushed
    twice, and a batch costs one round trip however long it is."""
    if not pushes:
        return []

    def queue(pipe: Pipeline) -> None:
        for list_key, applied_key, record in pushes:
            script(keys=[list_key, applied_key], args=[IDEMPOTENCY_TTL_S, record, cap], client=pipe)

    return [bool(pushed) for pushed in execute_scripts(client, queue)]


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

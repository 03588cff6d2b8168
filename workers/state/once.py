"""Writes that apply once, however often they are sent.

The state client sends a command again after a timeout or a broken connection (workers/state/
__init__.py: 20 times, ~30 s), which rides out a restart. A command that timed out may still have
run, though: a Redis that stalls past the 5 s socket timeout (paused, swapping, a long fork) runs
the first copy when it wakes and then the copy sent again (QA T; seen with a SIGSTOPped server: one
RPUSH, two items). The effects of an attempt are keyed by its attempt id already; the writes that
are not carry a token made once per batch, which the script that applies them sets with SET NX
first, so every copy after the first finds it and changes nothing. Plain commands (a run's
duration, the metrics' counters and series, a changelog entry) are queued on a pipeline as usual
and sent through lua/apply_once.lua; the scripts that write such state themselves take the token
as a key of their own (attempt_died.lua, promote.lua, set_weights.lua, changelog_unless_repeated.lua).
"""

from __future__ import annotations

import uuid

from redis import Redis
from redis.client import Pipeline

from workers.state.base import Script

# A batch's copies come within the client's retries (~30 s of backoff, 5 s per timed-out try) or
# its writer's next flushes.
ONCE_TTL_S = 300
MAX_ARGS = 7000  # per command: Lua's unpack takes at most ~8,000 values


def new_token() -> str:
    return uuid.uuid4().hex


def once_call(queued: Pipeline, token_key: str) -> tuple[list[str], list[object]]:
    """The KEYS and ARGV of lua/apply_once.lua that run the commands queued on `queued` (a pipeline
    never executed: it only records them) once for `token_key`. Each command must take its key as
    its first argument; scripts cannot be nested this way."""
    keys: list[str] = [token_key]
    args: list[object] = [ONCE_TTL_S]
    for command, _options in queued.command_stack:
        name, key, *rest = command
        if str(name).upper() in ("EVAL", "EVALSHA", "MULTI", "EXEC"):
            raise ValueError(f"{name} cannot run inside apply_once")
        if len(rest) > MAX_ARGS:
            raise ValueError(f"{name} {key!r} has {len(rest)} arguments; send at most {MAX_ARGS} per command")
        keys.append(key)
        args += [name, len(rest), *rest]
    queued.reset()
    return keys, args


def apply_once(script: Script, queued: Pipeline, token_key: str, client: Redis | None = None) -> bool:
    """Run the commands queued on `queued` once for `token_key`, through `client` (default: the
    script's); False when a copy ran before."""
    keys, args = once_call(queued, token_key)
    return bool(script(keys=keys, args=args, client=client))

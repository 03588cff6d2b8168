"""Which worker holds which broker message, and whether that worker is still alive.

Why this exists: a worker whose main process dies (SIGKILL, the OOM killer, a lost machine) leaves
the messages it held in kombu's `unacked` hash, and the Redis transport gives them back only after
the visibility timeout, which must outlast the longest step (an evolution: ~16 min by default). So
every call that worker held, running or prefetched, waited that long. Here each worker beats every
few seconds with the delivery tags it holds, and claims each message as it receives it (sent by a
background thread at once), and the rescue sweep (workers/rescue.py) gives back the messages
of a worker that has not beaten for `FITTEST_WORKER_LEASE_S`: it takes them once (`take`), and
kombu's own `restore_by_tag` puts each back on its queue, the way the visibility timeout would.

Keys, under the key prefix: `holders:beats` (sorted set: holder -> Redis time of its last beat) and
`holders:held:<holder>` (set of delivery tags; lua/holder_beat.lua, lua/holder_take.lua). The
times are Redis's, so the hosts' clocks do not have to agree.
"""

from __future__ import annotations


import redis
from redis.client import Pipeline

from workers.buffered import BufferedWrites
from workers.state.base import as_text, load_scripts

FLUSH_INTERVAL_S = 0.1

# Tags a worker received since its last flush, by holder: added to its set, not replacing it.
_Claims = dict[str, set[str]]


class MessageHolders(BufferedWrites[_Claims]):
    """Claims are buffered (workers/buffered.py): a message is received on the worker's hot path, so
    its claim is sent by the flusher's thread, woken at once rather than within FLUSH_INTERVAL_S. A
    worker killed before its claim reached Redis has that message back only after the visibility
    timeout, as before: at the interval alone, an executor killed as its tool started (the moment
    an out-of-memory kill comes) lost the claim of the attempt it ran in 1 run of 4 of the lease
    test on a busy machine (killed 90 ms after the claim, which waited for the next flush)."""

    name = "holders"

    def __init__(self, client: redis.Redis, prefix: str, keep_s: float, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.prefix = prefix
        self.keep_s = round(keep_s)  # how long a holder's set outlives its last write: past the visibility timeout
        self.beats_key = f"{prefix}holders:beats"
        scripts = load_scripts(client, "holder_beat", "holder_take")
        self._beat, self._take = scripts["holder_beat"], scripts["holder_take"]
        super().__init__(client, flush_interval_s)

    def held_key(self, holder: str) -> str:
        return f"{self.prefix}holders:held:{holder}"

    def _new_buffer(self) -> _Claims:
        return {}

    def _write(self, pipe: Pipeline, buffer: _Claims) -> None:
        for holder, tags in buffer.items():
            pipe.sadd(self.held_key(holder), *tags)
            pipe.expire(self.held_key(holder), self.keep_s)

    def claim(self, holder: str, tag: str) -> None:
        """`holder` has just received the message with delivery tag `tag`."""
        with self._buffer(urgent=True) as pending:
            pending.setdefault(holder, set()).add(tag)

    def beat(self, holder: str, tags: list[str] | None) -> float:
        """`holder` is alive and holds exactly `tags` (None: it cannot tell now, its claims stand);
        returns the beat's Redis time."""
        args: list[str | int] = [holder, self.keep_s, int(tags is not None), *(tags or [])]
        return float(self._beat(keys=[self.beats_key, self.held_key(holder)], args=args))

    def silent(self, lease_s: float) -> list[str]:
        """The holders whose last beat is older than `lease_s` by Redis's clock."""
        seconds, micros = self.client.time()
        raw = self.client.zrangebyscore(self.beats_key, "-inf", seconds + micros / 1e6 - lease_s)
        return [as_text(h) for h in raw]

    def take(self, holder: str, lease_s: float) -> list[str] | None:
        """The tags of `holder` if it is still silent for `lease_s`, taken so that no other sweep
        gets them; None when it beat meanwhile or another sweep took them."""
        raw = self._take(keys=[self.beats_key, self.held_key(holder)], args=[holder, lease_s])
        if raw is None:
            return None
        return [as_text(t) for t in raw]

    def unclaimed(self, tags: list[str]) -> list[str]:
        """Those of `tags` no holder with a beat recorded claims."""
        holders = [as_text(h) for h in self.client.zrange(self.beats_key, 0, -1)]
        if not holders or not tags:
            return list(tags)
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            for holder in holders:
                pipe.sismember(self.held_key(holder), tag)
        claimed = pipe.execute()
        n = len(holders)
        return [tag for i, tag in enumerate(tags) if not any(claimed[i * n:(i + 1) * n])]

    def forget(self, holder: str) -> None:
        """`holder` ended cleanly: it holds nothing, and nobody is to judge its silence."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self.beats_key, holder)
        pipe.delete(self.held_key(holder))
        pipe.execute()

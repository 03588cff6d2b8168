"""The beat's scheduler: redbeat's, made to ride out a Redis that restarts, even empty.

redbeat keeps the schedule entries and its lock in Redis and writes the entries only when beat
starts. A Redis that came back empty (restarted without its data, FLUSHALL) took them all: beat
then had nothing to send, and `fittest.retrain_weights` never ran again; it had also taken the
lock, whose extension at the next tick raised LockNotOwnedError and ended beat. At each tick
(every BEAT_MAX_INTERVAL_S at least, workers/app.py) this scheduler writes the entries again when
their schedule, or one of them, is gone, and takes a lost lock again when no other beat holds it.
"""

from __future__ import annotations

import time
from typing import Any

from celery.utils.log import get_logger
from redbeat import RedBeatScheduler
from redbeat.schedulers import get_redis
from redis.exceptions import LockNotOwnedError

from workers.redis_connection import write_refusal

logger = get_logger("celery.beat")

REFUSED_RETRY_S = 1.0  # how often a beat whose Redis refuses writes tries one again
REFUSED_SAY_EVERY_S = 60.0


class Scheduler(RedBeatScheduler):
    """RedBeatScheduler that restores its lock and its schedule entries after Redis lost them."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        # Redis first, with a command of redbeat's client, which redbeat retries (workers/app.py,
        # `retry_period`): a tick during a Redis restart waits for Redis instead of ending beat.
        # redbeat retries the client's own commands only, not what a pipeline of it sends: the
        # schedule's check below (a pipeline) went first before, met a Redis that refused
        # connections and ended beat (QA: six Redis restarts of 12 s within 3 minutes ended beat
        # six times, and `fittest up` then stopped the whole stack).
        get_redis(self.app).ping()
        self._wait_for_writes()
        self._keep_schedule()
        self._keep_lock()
        return float(super().tick(*args, **kwargs))

    def _wait_for_writes(self) -> None:
        """Wait while Redis refuses writes (past its maxmemory under `noeviction`; a replica made
        read-only): the tick's first write ended beat, each restart of it ended again within
        seconds, and `fittest up`, counting them as failed starts, stopped the whole stack within a
        minute, the workers that rode the outage out with it (QA 59d H1). Said once, then every
        minute; the tick goes on once a write is taken."""
        client, probe = get_redis(self.app), f"{self.app.redbeat_conf.key_prefix}write-probe"
        since: float | None = None
        said = 0.0
        while True:
            if (exc := write_refusal(client, probe)) is not None:
                now = time.monotonic()
                if now - said >= REFUSED_SAY_EVERY_S:
                    logger.warning("beat: Redis refuses writes (%s); waiting for it to take them", exc)
                    said = now
                since = since or now
                time.sleep(REFUSED_RETRY_S)
                continue
            if since is not None:
                logger.warning("beat: Redis takes writes again, after %.0f s", time.monotonic() - since)
            return

    def _keep_lock(self) -> None:
        """Take the lock again when it is gone (Redis restarted empty, or it expired while Redis
        was down); redbeat's extension would end beat. Another beat holding it by now ends this
        one: only one beat may send the schedule."""
        if self.lock is None or self.lock.owned():
            return
        if not self.lock.acquire(blocking=False):
            raise LockNotOwnedError(f"beat: another beat holds {self.lock_key}")
        logger.warning("beat: the lock %s was gone (Redis lost its data, or it expired while Redis was down); took it again",
                       self.lock_key)

    def _keep_schedule(self) -> None:
        """Write the schedule entries again when their sorted set is gone, or the key of one of them
        is: redbeat writes them only at start, reads nothing else to know what is due, and drops for
        good, from the sorted set, an entry whose key it cannot load (QA Q: a Redis evicting under
        `maxmemory-policy allkeys-lru` took the key of retrain-weights alone, and the weights were
        never retrained again while the other entry kept the sorted set alive)."""
        conf = self.app.redbeat_conf
        if not conf.schedule:
            return
        keys = [conf.schedule_key, *(self.Entry.generate_key(self.app, name) for name in conf.schedule)]
        with get_redis(self.app).pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.exists(key)
            gone = [key for key, there in zip(keys, pipe.execute()) if not there]
        if gone:
            logger.warning("beat: %s gone (Redis lost its data, or evicted keys under a maxmemory policy); "
                           "writing the schedule again", ", ".join(gone))
            self.setup_schedule()

"""The beat on a Redis that loses its data: it writes its schedule and takes its lock again, so
`fittest.retrain_weights` keeps running; a beat that died leaves a lock that soon expires."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from celery import Celery
from redbeat.schedulers import acquire_distributed_beat_lock, get_redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.broker import queued_messages
from tests.conftest import RedisServer, free_port, start_redis
from workers.app import BEAT_LOCK_TIMEOUT_S, BEAT_MAX_INTERVAL_S, make_app
from workers.beat import Scheduler
from workers.settings import Settings
from workers.stack import die_with_parent


def started_beat(app: Celery) -> Scheduler:
    """The scheduler as `celery beat` starts it: schedule written, then the lock taken (beat_init)."""
    scheduler = Scheduler(app=app)
    acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))
    return scheduler


def retrains_sent(client: redis.Redis) -> int:
    """fittest.retrain_weights messages waiting on the learning queue (the beat's other entry,
    fittest.prune_history, goes there too)."""
    return sum(m["headers"]["task"] == "fittest.retrain_weights" for _, m in queued_messages(client, "learning"))


def retrains_once_due(beat: Scheduler, client: redis.Redis, interval: float, within_s: float = 20.0) -> int:
    """Tick as beat's loop would, every interval and a bit, until a retrain is sent; how many are
    then queued: 1 where the entry was kept (a tick sends it once at most), 0 where it was lost.
    Which tick sends it is left open: an entry written again is due an interval later, and on a
    busy machine the tick that wrote it may reach its sending only then, and send it at once."""
    deadline = time.monotonic() + within_s
    while not (sent := retrains_sent(client)) and time.monotonic() < deadline:
        time.sleep(interval + 0.1)
        assert beat.tick() <= BEAT_MAX_INTERVAL_S  # the beat goes on
    return sent


def test_beat_writes_its_schedule_and_takes_its_lock_again_after_redis_lost_its_data(private_redis: RedisServer) -> None:
    interval = 0.5
    app = make_app(Settings(redis_url=private_redis.url, retrain_interval_s=interval))
    client = redis.Redis.from_url(private_redis.url)
    beat = started_beat(app)
    try:
        # A beat killed now leaves its lock for 50 s (README), not redbeat's 25 min.
        assert 0 < client.pttl(beat.lock_key) <= 50_000
        time.sleep(interval + 0.1)
        beat.tick()
        assert retrains_sent(client) == 1

        client.flushall()  # Redis restarted without its data
        # redbeat's own tick raised LockNotOwnedError here, and never wrote the entries again
        assert beat.tick() <= BEAT_MAX_INTERVAL_S
        assert beat.lock.owned()
        assert client.exists(app.redbeat_conf.schedule_key)
        assert retrains_once_due(beat, client, interval) == 1  # the beat goes on, and the weights are retrained again
    finally:
        beat.close()


def test_a_beat_whose_lock_another_beat_took_stops(private_redis: RedisServer) -> None:
    app = make_app(Settings(redis_url=private_redis.url))
    client = redis.Redis.from_url(private_redis.url)
    beat = started_beat(app)
    try:
        client.set(beat.lock_key, "another beat's token", px=BEAT_LOCK_TIMEOUT_S * 1000)
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            beat.tick()
        assert client.get(beat.lock_key) == b"another beat's token"
    finally:
        beat.lock = None  # not ours to release
        beat.close()


def test_beat_writes_its_schedule_again_when_redis_evicted_one_entry(private_redis: RedisServer) -> None:
    """QA Q: under `maxmemory-policy allkeys-lru` Redis evicted the key of retrain-weights alone;
    redbeat dropped the entry from its sorted set ("Failed to load ..., removing"), which the other
    entry kept alive, so the weights were never retrained again until beat restarted."""
    interval = 0.5
    app = make_app(Settings(redis_url=private_redis.url, retrain_interval_s=interval))
    client = redis.Redis.from_url(private_redis.url)
    beat = started_beat(app)
    try:
        client.delete(Scheduler.Entry.generate_key(app, "retrain-weights"))  # evicted
        # redbeat removed the entry at the first tick it was due, and no later tick sent it
        assert retrains_once_due(beat, client, interval) == 1
    finally:
        beat.close()


def test_a_tick_during_a_redis_restart_waits_for_redis(tmp_path: Path) -> None:
    """QA: six Redis restarts of 12 s within 3 minutes ended beat six times (a ConnectionError from
    the schedule's check, a pipeline, which redbeat's retry does not cover), and `fittest up` then
    stopped every role. redis-py's own three retries of a connection, a few seconds drawn at
    random, are taken away here so that the outcome does not depend on their draw: what waits for
    Redis is redbeat's retry (60 s)."""
    port, workdir = free_port(), tmp_path / "redis"
    proc, url = start_redis(workdir, port, appendonly=True)
    app = make_app(Settings(redis_url=url))
    beat = started_beat(app)
    get_redis(app).wrapped_connection.set_retry(Retry(NoBackoff(), 0))
    later = None
    try:
        beat.tick()
        proc.send_signal(signal.SIGTERM)  # Redis writes its append-only file and exits
        proc.wait(timeout=20)
        # The same server started again 2 s from now, on its append-only file (started from this
        # thread, which die_with_parent ties it to, while the tick waits).
        later = subprocess.Popen(["sh", "-c", f"sleep 2; exec {shutil.which('redis-server')} --port {port} "
                                  f"--bind 127.0.0.1 --save '' --appendonly yes --dir {workdir}"],
                                 preexec_fn=die_with_parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.monotonic()
        assert beat.tick() <= BEAT_MAX_INTERVAL_S  # ended beat with a ConnectionError before
        assert time.monotonic() - started >= 2.0  # it waited for Redis
        assert beat.lock.owned()
    finally:
        for _ in range(100):  # the restarted Redis answers before the beat releases its lock there
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        beat.close()
        for p in [proc, later]:
            if p is not None:
                p.terminate()
                p.wait(timeout=10)


def test_a_tick_while_redis_refuses_writes_waits_for_it(private_redis: RedisServer) -> None:
    """QA 59d H1: a Redis past its maxmemory (noeviction) ended the beat at its tick's first write,
    every restart of it again within seconds, and `fittest up`, counting failed starts, stopped the
    whole stack within a minute. The tick waits until Redis takes writes, and the beat goes on."""
    import threading

    app = make_app(Settings(redis_url=private_redis.url, retrain_interval_s=0.5))
    client = redis.Redis.from_url(private_redis.url)
    beat = started_beat(app)
    try:
        beat.tick()
        client.config_set("maxmemory", max(int(client.info("memory")["used_memory"]) - 100_000, 1))
        room = threading.Timer(3.0, lambda: redis.Redis.from_url(private_redis.url).config_set("maxmemory", 0))
        room.start()
        started = time.monotonic()
        assert beat.tick() <= BEAT_MAX_INTERVAL_S  # raised OutOfMemoryError before: beat ended
        assert time.monotonic() - started >= 2.5  # it waited for Redis to take writes
        assert beat.lock.owned()
        assert retrains_once_due(beat, client, 0.5) >= 1  # and goes on sending
    finally:
        client.config_set("maxmemory", 0)
        beat.close()


def test_health_says_whether_a_beat_holds_its_lock_and_when_it_last_sent_the_retrain(private_redis: RedisServer) -> None:
    """QA ops: a beat stopped for 60 s, its lock gone, and `fittest health` said healthy: without it
    nothing retrains the weights or prunes the history."""
    from workers.health import check_beat

    interval = 0.5
    settings = Settings(redis_url=private_redis.url, retrain_interval_s=interval)
    client = redis.Redis.from_url(private_redis.url)
    none = check_beat(settings, timeout=2)
    assert none.status == "fail" and "no beat holds its lock" in none.detail and "not sent yet" in none.detail, none
    # The entry as redbeat creates it, before its first run: a last_run_at, no run count (QA selection F6)
    import datetime
    import json

    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedulers import RedBeatSchedulerEntry, ensure_conf

    from workers.app import RETRAIN_ENTRY
    created = json.dumps({"last_run_at": datetime.datetime.now(datetime.timezone.utc)}, cls=RedBeatJSONEncoder)
    ensure_conf(entry_app := make_app(settings))
    client.hset(RedBeatSchedulerEntry.generate_key(entry_app, RETRAIN_ENTRY), "meta", created)
    assert "not sent yet" in check_beat(settings, timeout=2).detail
    app = make_app(settings)
    beat = started_beat(app)
    try:
        assert retrains_once_due(beat, client, interval) == 1
        held = check_beat(settings, timeout=2)
        assert held.status == "ok" and "a beat holds its lock" in held.detail, held
        assert "fittest.retrain_weights last sent" in held.detail and "(every 0.5 s)" in held.detail, held
        # the beat's interval, not the one the shell asking has (QA learning F5)
        asked = check_beat(settings.model_copy(update={"retrain_interval_s": 300.0}), timeout=2)
        assert "(every 0.5 s)" in asked.detail, asked
    finally:
        beat.close()  # releases its lock, as a beat that stops does
    gone = check_beat(settings, timeout=2)
    assert gone.status == "fail" and "last sent" in gone.detail, gone


def test_the_metrics_say_whether_a_beat_holds_its_lock(private_redis: RedisServer) -> None:
    """QA 61c-4: no metric said the beat was down, and Flower's flower_worker_online sees only the
    Celery workers: a scrape reads the lock a running beat holds."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from workers.metrics import scrape_registry

    settings = Settings(redis_url=private_redis.url)

    def beat_up() -> float:
        text = generate_latest(scrape_registry(settings)).decode()
        return next(s.value for family in text_string_to_metric_families(text) for s in family.samples
                    if s.name == "fittest_beat_up")

    assert beat_up() == 0
    beat = started_beat(make_app(settings))
    try:
        assert beat_up() == 1
    finally:
        beat.close()  # a beat stopped gives its lock back
    assert beat_up() == 0

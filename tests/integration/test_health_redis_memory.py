"""`fittest health` against a Redis past its maxmemory: it answers PING but refuses writes."""

from __future__ import annotations

import redis

from tests.conftest import RedisServer
from workers.health import health
from workers.settings import Settings


def test_health_names_a_redis_that_refuses_writes_past_its_maxmemory(private_redis: RedisServer) -> None:
    """QA Q: with Redis at maxmemory (noeviction) the redis check said ok and the workers' check
    ended the command with a traceback (OutOfMemoryError from the broadcast's queue declare)."""
    client = redis.Redis.from_url(private_redis.url)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)  # its data grew past it
    report = health(Settings(redis_url=private_redis.url), ["redis", "workers"], ["memory"], timeout=2.0)
    checks = {c.name: c for c in report.checks}
    assert not report.healthy
    assert checks["redis"].status == "fail" and "Redis refuses writes" in checks["redis"].detail
    assert "maxmemory" in checks["redis"].detail
    assert checks["workers"].status == "fail" and checks["workers"].detail.startswith("not asked")
    assert "Redis refuses writes" in checks["workers"].detail

    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) * 4)  # room again,
    client.config_set("maxmemory-policy", "allkeys-lru")  # and past it Redis would evict keys fittest keeps
    report = health(Settings(redis_url=private_redis.url), ["redis", "workers"], ["memory"], timeout=2.0)
    checks = {c.name: c for c in report.checks}
    # a warning, as the README says (QA 57a L1: "ok"), which leaves the other checks asked (QA 57a H1:
    # a warning of the redis check failed them all "not asked", and every probe of a healthy stack)
    assert checks["redis"].status == "warn" and "evicts keys fittest keeps" in checks["redis"].detail
    assert not checks["workers"].detail.startswith("not asked"), checks["workers"]
    assert "memory" in checks["workers"].detail  # asked, and told which worker did not answer

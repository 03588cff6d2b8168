"""A real stack for pipeline tests: Celery workers on the private Redis broker, real Qdrant Edge
under a temporary data directory, real fastembed with the shipped model."""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fittest.client import FittestClient
from workers.settings import Settings

TEST_TOOLS = Path(__file__).parent / "tools"


@contextmanager
def runtime_in_use(runtime: Any) -> Iterator[Any]:
    """A test's own Runtime, its Redis keys, collections and clients removed afterwards."""
    try:
        yield runtime
    finally:
        runtime.state.clear()
        runtime.memory.drop_all()
        runtime.close()


@dataclass
class Pipeline:
    env: dict[str, str]
    settings: Settings
    stack: Any
    client: FittestClient

    def call(self, timeout: float = 60.0, **payload: Any) -> dict[str, Any]:
        """Send `fittest.resilient_tool_call` as a foreign service would (no check of the payload
        here: the workers' refusals are tested too) and return its result as a dict."""
        sent = self.client.send("resilient_tool_call", **{**payload, "input": payload.get("input") or {}})
        return self.client.wait(sent, timeout)

    def state(self):
        from workers.state import open_state_store

        return open_state_store(self.settings)

    def settled(self, timeout: float = 30.0) -> None:
        """Wait until the broker is idle: every message taken and acknowledged, so the bookkeeping
        of the calls made so far (outcomes and learning are batched) has been applied. Idle at
        three looks in a row: kombu pops a message before it records it as unacknowledged, and a
        look in between saw an outcome nowhere (a restart then found its tool never run)."""
        from workers.metrics import reader_for

        idle, looks = reader_for(self.settings).broker_idle, []

        def steadily_idle() -> bool:
            looks.append(idle())
            return looks[-3:] == [True] * 3

        self.wait_for(steadily_idle, timeout=timeout)

    def close(self) -> None:
        """Stop the workers, and close the client."""
        self.client.close()
        self.stack.stop_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError("condition not reached in time")


def purge_queues(settings: Settings) -> None:
    """Drop the messages an earlier module's workers left on the session's broker (feedback,
    learning batches, evolutions not yet taken when they stopped): this pipeline's workers would
    otherwise apply them under its own keys and collections."""
    from workers.app import QUEUES
    from workers.redis_connection import redis_client

    client = redis_client(settings)  # honours the TLS settings of a rediss:// URL
    try:
        names = [k for q in QUEUES for k in client.scan_iter(match=f"{q}*") if client.type(k) == b"list"]
        client.delete(*names, "unacked", "unacked_index")
    finally:
        client.close()


@contextmanager
def pipeline_running(tmp: Path, redis_url: str, model_path: Path, tools_dir: Path,
                     roles: tuple[str, ...] = ("memory", "executor", "evolver"), **extra: str) -> Iterator[Pipeline]:
    """`start_pipeline` for a test or a module: its workers stopped (its client first, see
    Pipeline.close) and its Redis keys removed afterwards."""
    p = start_pipeline(tmp, redis_url, model_path, tools_dir, roles, **extra)
    try:
        yield p
    finally:
        p.close()
        p.state().clear()


def start_pipeline(tmp: Path, redis_url: str, model_path: Path, tools_dir: Path,
                   roles: tuple[str, ...] = ("memory", "executor", "evolver"), **extra: str) -> Pipeline:
    from workers.stack import Stack

    prefix = f"t{uuid.uuid4().hex[:8]}_"
    env = {
        "FITTEST_REDIS_URL": redis_url,
        "FITTEST_KEY_PREFIX": f"{prefix}:",
        "FITTEST_COLLECTION_PREFIX": prefix,
        "FITTEST_DATA_DIR": str(tmp / "data"),
        "FITTEST_TOOLS_DIR": str(tools_dir),
        "FITTEST_EMBEDDING_MODEL_PATH": str(model_path),
        **extra,
    }
    fields: dict[str, Any] = {k.removeprefix("FITTEST_").lower(): v for k, v in env.items()}
    settings = Settings(**fields)
    purge_queues(settings)
    stack = Stack(settings, env=env, log_dir=tmp / "logs")
    stack.start_roles(roles)
    stack.wait_for_workers(roles)
    return Pipeline(env=env, settings=settings, stack=stack, client=FittestClient(settings=settings))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    with pipeline_running(tmp_path_factory.mktemp("pipeline"), redis_url, model_path, TEST_TOOLS) as p:
        yield p

"""The services one worker process holds, opened on first use and kept for the process's life.

Loading the model, opening the vector store or a Redis pool per task would dominate the cost of
a call; and execution or evolution workers must never open the embedder or the embedded store,
so each is opened only when a task that needs it first runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from workers.heap import settle as settle_heap
from workers.settings import Settings, get_settings

if TYPE_CHECKING:
    from redis import Redis

    from evolution.ports import EvolutionLedger
    from selection.ports import Embedder, StateStore, VectorMemory
    from selection.registry import ToolRegistry
    from workers.metrics import MetricsRecorder
    from workers.selector import Selector
    from workers.state.holders import MessageHolders
    from workers.state.inflight import InflightCalls
    from workers.state.run_marks import RunMarks
    from workers.state.learning import LearningState


log = logging.getLogger("fittest.runtime")

T = TypeVar("T")


class once(Generic[T]):  # noqa: N801 - used as a decorator, like functools.cached_property
    """A property of the runtime computed once, under the runtime's own (reentrant) lock.

    functools.cached_property (Python 3.11) holds a lock of its own per property while it computes
    one, so a getter that takes the runtime's lock inside it could deadlock against a thread that
    holds the runtime's lock and asks for that property: the memory worker's warm-up, building the
    selector (runtime lock held), waited for `redis` while a task thread computing `redis` waited
    for the runtime lock. With the one lock for every property, no two threads can wait on each
    other. Once set, the value is read from the instance's dict without any lock."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, runtime: None, owner: type | None = None) -> once[T]: ...

    @overload
    def __get__(self, runtime: Runtime, owner: type | None = None) -> T: ...

    def __get__(self, runtime: Runtime | None, owner: type | None = None) -> once[T] | T:
        if runtime is None:
            return self
        with runtime._lock:
            if self.name not in runtime.__dict__:
                runtime.__dict__[self.name] = self.compute(runtime)
            return runtime.__dict__[self.name]


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.RLock()
        self._memory: VectorMemory | None = None
        self._memory_ready = False  # opened, and after an outage the tool index synced again
        self._memory_error = ""  # why the last open failed; "" when it did not
        self._memory_retry_at = 0.0

    @once
    def redis(self) -> Redis:
        """The process's Redis client (one connection pool for the state store and the metrics)."""
        from workers.redis_connection import redis_client

        return redis_client(self.settings)

    @once
    def state(self) -> StateStore:
        from workers.state import open_state_store

        return open_state_store(self.settings, client=self.redis)

    @once
    def evolution(self) -> EvolutionLedger:
        """Changelog, trials, recent successes and description variants (workers/state/evolution.py)."""
        from workers.state.evolution import EvolutionState

        return EvolutionState(self.redis, self.settings.key_prefix)

    @once
    def learning(self) -> LearningState:
        """The window of recent execution records the weights are learned from (workers/state/learning.py)."""
        from workers.state import open_learning_state

        return open_learning_state(self.settings, self.redis)

    @once
    def inflight(self) -> InflightCalls:
        """The step each call was last handed on to (workers/state/inflight.py, workers/rescue.py)."""
        from workers.state.inflight import InflightCalls

        return InflightCalls(self.redis, self.settings.key_prefix)

    @once
    def run_marks(self) -> RunMarks:
        """Which message a pool process runs a tool for, to count its whole worker's death (workers/state/run_marks.py)."""
        from workers.state.run_marks import RunMarks

        return RunMarks(self.redis, self.settings.key_prefix)

    @once
    def effects(self) -> InflightCalls:
        """The messages in flight that carry a call's effects: failure marks, outcomes, learner
        records (workers/rescue.py `send_recorded`)."""
        from workers.state.inflight import EFFECTS, InflightCalls

        return InflightCalls(self.redis, self.settings.key_prefix, space=EFFECTS)

    @once
    def holders(self) -> MessageHolders:
        """Which worker holds which broker message, and whether it beats (workers/state/holders.py)."""
        from workers.state.holders import MessageHolders
        from workers.state.inflight import STEP_MARGIN_S

        return MessageHolders(self.redis, self.settings.key_prefix, keep_s=self.settings.visibility_timeout + STEP_MARGIN_S)

    @once
    def metrics(self) -> MetricsRecorder:
        from workers.metrics import MetricsRecorder

        return MetricsRecorder(self.redis, self.settings.key_prefix)

    @once
    def embedder(self) -> Embedder:
        from workers.embedder import open_embedder

        return open_embedder(self.settings)

    @property
    def memory(self) -> VectorMemory:
        """The vector memory, opened on first use. A failure to open it is not kept for the
        process's life: for FITTEST_MEMORY_RETRY_S the same error is raised at once (callers
        degrade: workers/degraded.py, workers/pending.py), then opening is tried again. Each open
        replays the vector writes kept meanwhile, and one that follows a failure brings the tool
        index up to date."""
        if self._memory_ready:
            return self._memory  # type: ignore[return-value]
        from workers.memory import VectorMemoryUnavailable, open_vector_memory
        from workers.app import MEMORY_QUEUE
        from workers.routing import may_open_store, served_queues

        with self._lock:  # reentrant: the sync below uses the memory from this thread
            if self._memory is not None:
                return self._memory
            if self._memory_error and time.monotonic() < self._memory_retry_at:
                raise VectorMemoryUnavailable(self._memory_error)
            try:
                if self.settings.qdrant_url is None and not may_open_store():
                    raise VectorMemoryUnavailable(f"this worker serves {', '.join(sorted(served_queues() or ()))}: the embedded "
                                                  f"vector store is the memory worker's, which serves {MEMORY_QUEUE}")
                memory = open_vector_memory(self.settings)
            except Exception as exc:
                self._memory_error = str(exc) or type(exc).__name__
                self._memory_retry_at = time.monotonic() + self.settings.memory_retry_s
                raise
            recovered, self._memory_error, self._memory = bool(self._memory_error), "", memory
            if recovered and "selector" in self.__dict__:  # other threads wait: none sees a half-built index
                self._sync_tools_after_outage()
            self._memory_ready = True
        threading.Thread(target=self._replay_pending, args=(memory,), name="fittest-pending-replay", daemon=True).start()
        return memory

    def _sync_tools_after_outage(self) -> None:
        from workers.store_failures import is_store_failure

        try:
            synced = self.selector.index.sync()
        except Exception as exc:
            if not is_store_failure(exc):
                raise
            log.warning("tool index not synced, the vector memory failed again: %s", exc)
            return
        log.info("vector memory open again: %d tool texts indexed", synced, extra={"event": "memory_recovered", "synced": synced})

    def _replay_pending(self, memory: VectorMemory) -> None:
        """Writes kept while the store was down, replayed beside the calls: with clients of its own,
        never this runtime's properties, whose lock the thread that opened the store may still hold."""
        from workers.embedder import open_embedder
        from workers.pending import PendingWrites
        from workers.redis_connection import redis_client

        client = redis_client(self.settings)
        try:
            PendingWrites(client, self.settings.key_prefix).replay(memory, lambda texts: open_embedder(self.settings).embed(texts))
        finally:
            client.close()

    @once
    def registry(self) -> ToolRegistry:
        from workers.tool_catalog import load_registry

        return load_registry(self.settings)

    @once
    def selector(self) -> Selector:
        from redis.exceptions import RedisError

        from workers.selector import Selector
        from workers.store_failures import is_store_failure

        selector = Selector(self)
        try:
            selector.index.sync()
        except Exception as exc:  # served degraded; synced when the store is back (`memory`)
            if not is_store_failure(exc):
                raise
            log.warning("tool index not synced, the vector memory is unavailable: %s", exc)
        try:
            selector.variants.snapshot()  # their texts are in the word index, built next
        except Exception as exc:  # read, and the index rebuilt, at the first plan instead
            if not (is_store_failure(exc) or isinstance(exc, RedisError)):
                raise
            log.warning("description variants not read, a store is unavailable: %s", exc)
        selector.lexical_index()  # built here rather than in the first call's selection
        settle_heap()  # what the selector loaded stays for the process's life
        return selector

    def close(self) -> None:
        with self._lock:
            if self._memory is not None:
                self._memory.close()
            self._memory, self._memory_ready = None, False  # a later use opens the store again


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime, built from the settings the first time it is asked for."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(get_settings())
        return _runtime

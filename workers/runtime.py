"""The services one worker process holds, opened on first use and kept for the process's life.

Loading the model, opening the vector store or a Redis pool per task would dominate the cost of
a call; and execution or evolution workers must never open the embedder or the embedded store,
so each is opened only when a task that needs it first runs.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

from workers.settings import Settings, get_settings

if TYPE_CHECKING:
    from selection.ports import Embedder, StateStore, VectorMemory
    from selection.registry import ToolRegistry
    from workers.selector import Selector


class Runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.RLock()

    @cached_property
    def state(self) -> StateStore:
        from workers.state import open_state_store

        with self._lock:
            return open_state_store(self.settings)

    @cached_property
    def embedder(self) -> Embedder:
        from workers.embedder import open_embedder

        with self._lock:
            return open_embedder(self.settings)

    @cached_property
    def memory(self) -> VectorMemory:
        from workers.memory import open_vector_memory

        with self._lock:
            return open_vector_memory(self.settings)

    @cached_property
    def registry(self) -> ToolRegistry:
        from workers.tool_catalog import load_registry

        with self._lock:
            return load_registry(self.settings)

    @cached_property
    def selector(self) -> Selector:
        from workers.selector import Selector

        with self._lock:
            selector = Selector(self)
            selector.sync_tools()
            return selector

    def close(self) -> None:
        if "memory" in self.__dict__:
            self.memory.close()


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime, built from the settings the first time it is asked for."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(get_settings())
        return _runtime


def reset_runtime() -> None:
    """Forget the process's services (tests, and after a fork)."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            _runtime.close()
        _runtime = None

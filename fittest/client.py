"""The Python client for services that install fittest (`pip install fittest`).

    from fittest.client import FittestClient

    with FittestClient("redis://redis:6379/0") as fittest:
        result = fittest.run("convert 3 miles to km", input={"value": 3, "from": "mi", "to": "km"})
        if result.status == "success":
            print(result.output, "by", result.tool, result.version)

It sends by task name and imports no task code, exactly as a service without fittest installed
would with Celery's `send_task` (see the README); what it adds is the payload validation before
sending, the record of each call as in flight once it is sent (so that the workers send it again
if the worker that took it off its queue is killed before recording it as taken) and the typed
`CallResult` after.
"""

from __future__ import annotations

import gc
from typing import Any, Self

from celery.result import AsyncResult

from selection.models import CallRequest, CallResult
from workers.client import CallToolPayload, payload_schemas
from workers.client import FittestClient as _BaseClient
from workers.settings import Settings, get_settings

__all__ = ["CallRequest", "CallResult", "CallToolPayload", "FittestClient", "payload_schemas"]


class FittestClient(_BaseClient):
    """Send `fittest.resilient_tool_call` / `fittest.call_tool` and get a `CallResult` back.

    `redis_url` is the broker (and the result backend unless `result_backend` is given); without
    either, the FITTEST_* settings of this process are used."""

    def __init__(self, redis_url: str | None = None, *, result_backend: str | None = None,
                 settings: Settings | None = None) -> None:
        settings = settings or get_settings()
        if redis_url is not None:
            settings = settings.model_copy(update={"redis_url": redis_url, "result_backend": result_backend})
        super().__init__(settings)

    def submit(self, scenario: str, input: dict[str, Any] | None = None, **options: Any) -> AsyncResult:
        """Enqueue a call and return at once; `result()` waits for it. The payload is checked
        here, so a bad field fails in the caller, not later in a worker."""
        request = CallRequest.model_validate({"scenario": scenario, "input": input or {}, **options})
        return self.send("resilient_tool_call", **request.model_dump(mode="json", exclude_unset=True))

    def submit_tool(self, name: str, input: dict[str, Any] | None = None, **options: Any) -> AsyncResult:
        """Enqueue a call of namespace `name` (its promoted version, or the original)."""
        payload = CallToolPayload.model_validate({"name": name, "input": input or {}, **options})
        return self.send("call_tool", **payload.model_dump(mode="json", exclude_unset=True))

    def result(self, pending: AsyncResult, timeout: float = 120.0) -> CallResult:
        return CallResult.model_validate(self.wait(pending, timeout))

    def run(self, scenario: str, input: dict[str, Any] | None = None, timeout: float = 120.0, **options: Any) -> CallResult:
        """Call the fittest tool for `scenario` and wait for the result."""
        return self.result(self.submit(scenario, input, **options), timeout)

    def run_tool(self, name: str, input: dict[str, Any] | None = None, timeout: float = 120.0, **options: Any) -> CallResult:
        """Call namespace `name` and wait for the result."""
        return self.result(self.submit_tool(name, input, **options), timeout)

    def close(self) -> None:
        """Release the broker and backend connections (results of subtasks unsubscribe first)."""
        gc.collect()
        super().close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""A thin client for services that install fittest: send a call by task name, wait for its result.

It needs only the broker URL; it imports no task code, so it behaves exactly like a foreign
service using `send_task`.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.result import AsyncResult
from pydantic import BaseModel, Field

from selection.models import CallRequest, CallResult
from workers.publishing import PUBLISH_RETRY_POLICY, ReconnectSafeAMQP
from workers.settings import Settings, get_settings


class CallToolPayload(BaseModel):
    """Keyword arguments of `fittest.call_tool`. The other fields of `resilient_tool_call`'s payload
    (call_id, tags, context, max_attempts) are accepted too and mean the same; `namespace` is `name`."""

    name: str = Field(min_length=1)
    input: dict[str, Any] = {}
    version: str | None = None
    use_evolved: bool = True
    scenario: str | None = None  # what the call is for; default the tool's description


def payload_schemas() -> dict[str, dict[str, Any]]:
    return {
        "resilient_tool_call": CallRequest.model_json_schema(),
        "call_tool": CallToolPayload.model_json_schema(),
        "result": CallResult.model_json_schema(),
    }


def detach(result: AsyncResult) -> None:
    """Cut a fetched result, and the results of the hops it carries (one per `Task.replace`), off
    their backend. Otherwise each one, when garbage-collected, unsubscribes through the backend,
    which retries for many seconds if Redis has gone away by then; a process that fetched many
    calls would hang on its way out."""
    children = (result._cache or {}).get("children") or []  # what get() fetched, without asking again
    result.backend = None
    for child in children:
        if isinstance(child, AsyncResult):
            detach(child)


class FittestClient:
    def __init__(self, settings: Settings | None = None) -> None:
        settings = settings or get_settings()
        self.celery = Celery("fittest-client", broker=settings.redis_url, backend=settings.backend_url,
                             amqp=ReconnectSafeAMQP)
        # A call sent while Redis restarts waits for it, as the workers' own messages do.
        self.celery.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json",
                                task_publish_retry_policy=PUBLISH_RETRY_POLICY,
                                result_accept_content=["json"], broker_use_ssl=settings.redis_tls() or None,
                                redis_backend_use_ssl=settings.redis_tls(settings.backend_url) or None)

    def send(self, task: str, *, queue: str = "selection", **kwargs: Any) -> AsyncResult:
        """Send `fittest.{task}` with `kwargs` to `queue` (workers/app.py TASK_ROUTES names each task's)."""
        return self.celery.send_task(f"fittest.{task}", kwargs=kwargs, queue=queue)

    @staticmethod
    def wait(result: AsyncResult, timeout: float = 120.0) -> dict[str, Any]:
        """The call's final result, wherever the work went (every hop keeps the task id)."""
        try:
            return result.get(timeout=timeout)
        finally:
            FittestClient.release(result)

    @staticmethod
    def release(result: AsyncResult) -> None:
        """Stop tracking a sent call, whether or not it was waited for: unsubscribe now, while the
        broker is surely up, not in AsyncResult.__del__ later (which retries for many seconds per
        result once Redis has gone away)."""
        if result.backend is not None:
            result.backend.remove_pending_result(result)
        detach(result)

    def call(self, scenario: str, input: dict[str, Any] | None = None, timeout: float = 120.0, **kwargs: Any) -> dict[str, Any]:
        """Run `fittest.resilient_tool_call` and return its CallResult as a dict."""
        return self.wait(self.send("resilient_tool_call", scenario=scenario, input=input or {}, **kwargs), timeout)

    def call_tool(self, name: str, input: dict[str, Any] | None = None, timeout: float = 120.0, **kwargs: Any) -> dict[str, Any]:
        """Run `fittest.call_tool`: the namespace's promoted version, or the original."""
        return self.wait(self.send("call_tool", name=name, input=input or {}, **kwargs), timeout)

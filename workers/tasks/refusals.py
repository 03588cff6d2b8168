"""A task's payloads refused with every bad field named, and the worker up: a call's invalid
result, a batch that keeps its good messages."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from celery_batches import SimpleRequest
from pydantic import BaseModel, ValidationError

from selection.models import (CALL_ID_PATTERN, MAX_SCENARIO_CHARS, CallRequest, CallResult, FieldError, field_errors,
                              invalid_payload_message, size_errors)

CALL_ID = re.compile(CALL_ID_PATTERN)

log = logging.getLogger("fittest.tasks")

M = TypeVar("M", bound=BaseModel)


def batch_payloads(requests: Sequence[SimpleRequest], model: type[M], task: str) -> list[M]:
    """The payloads of a celery-batches batch as `model`s, in order; a message holding a list gives
    each of its items. An invalid payload is logged and dropped: one bad message must not lose the
    batch."""
    out = []
    for request in requests:
        data = request.args[0] if request.args else request.kwargs
        for item in data if isinstance(data, list) else [data]:
            try:
                out.append(model.model_validate(item))
            except ValidationError as exc:
                log.error("%s dropped an invalid payload: %s", task, exc.errors(include_url=False)[:3],
                          extra={"event": "batch_payload_invalid", "task": task, "task_id": request.id})
    return out


def invalid_result(exc: ValidationError | list[FieldError], call_id: str = "", scenario: str = "") -> dict[str, Any]:
    """A bad payload ends the call with a result naming every bad field; the worker stays up."""
    errors = exc if isinstance(exc, list) else field_errors(exc)
    return CallResult(call_id=call_id or "invalid", status="invalid", scenario=scenario, errors=errors,
                      message=invalid_payload_message(errors)).model_dump(mode="json")


def given_scenario(payload: dict[str, Any]) -> str:
    """The scenario a refused payload gave, when a call could have run it, so that the refusal says
    which call it was (QA 49: a refused call's result said `"scenario": ""` of a scenario given)."""
    scenario = payload.get("scenario")
    return scenario if isinstance(scenario, str) and scenario.strip() and len(scenario) <= MAX_SCENARIO_CHARS else ""


def refusal(request: CallRequest, limit_bytes: int, refused: Sequence[FieldError] = ()) -> dict[str, Any] | None:
    """The invalid result of a call whose arguments were `refused` (as Python refuses them), or whose
    input or context is too large; None when neither."""
    errors = [*refused, *size_errors(request, limit_bytes)]
    return invalid_result(errors, request.call_id, request.scenario) if errors else None


def result_call_id(payload: dict[str, Any], task_id: str | None) -> str:
    """The id an invalid call's result carries: the caller's call_id when it is one, else the task id."""
    given = payload.get("call_id")
    if isinstance(given, str) and CALL_ID.fullmatch(given):
        return given
    return task_id or ""

"""Helpers the task modules share: payload validation and handing a call on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from selection.models import CallResult


def invalid_result(exc: ValidationError, call_id: str = "") -> dict[str, Any]:
    """A bad payload ends the call with a result naming every bad field; the worker stays up."""
    errors = [
        {"field": ".".join(str(p) for p in e["loc"]) or "(payload)", "message": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_input=False)
    ]
    fields = ", ".join(sorted({e["field"] for e in errors}))
    return CallResult(
        call_id=call_id or "invalid",
        status="invalid",
        errors=errors,
        message=f"invalid payload: {fields}",
    ).model_dump(mode="json")

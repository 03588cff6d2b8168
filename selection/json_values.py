"""What a call's input and context may hold: JSON values only, so that every consumer (the tool,
the result backend, a vector payload, the client) reads what the caller sent."""

from __future__ import annotations

import json
import math
import re
from typing import Any

JSON_SCALARS = (str, int, float, bool, type(None))
MAX_INT_BITS = 13_300  # ~4,000 decimal digits: Python refuses to write an int of more than 4,300


def check_json_value(value: Any, depth: int = 0, path: str = "") -> None:
    """Refuse what is not JSON, which every consumer would break on: NaN/Infinity, absurd nesting,
    and values of Python types JSON has none of (a set, bytes, a datetime, a Decimal) or text that
    is no Unicode (a lone surrogate). Those two had reached the size check's json.dumps and raised
    a TypeError naming no field (QA integrator 3); `path` names where they are."""
    where = f" at {path}" if path else ""
    if depth > 32:
        raise ValueError("nested deeper than 32 levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"contains a non-finite number (NaN or Infinity){where}")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:  # Python writes no more as JSON
        raise ValueError(f"contains an integer of more than 4,000 digits{where}: send it as text")
    if isinstance(value, str):
        _check_text(value, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            # A number's key too: JSON writes it as text, and the tool would be handed {"1": …}
            # for the {1: …} its caller sent (QA recheck F3: refused at the top level only).
            if not isinstance(key, str):
                raise ValueError(f"has a key of type {type(key).__name__}{where}, which JSON has not: keys are text")
            _check_text(key, where)
            check_json_value(item, depth + 1, _path_to(path, key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json_value(item, depth + 1, _path_to(path, i))
    elif not isinstance(value, JSON_SCALARS):
        raise ValueError(f"contains a value of type {type(value).__name__}{where}, which is not JSON: send it as text, a number, "
                         "a list or an object")


PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _path_to(path: str, step: str | int) -> str:
    """Where a value sits, as `a.0.b`; a key that would read as another path there (a dot in it, a
    number, nothing) is written as JSON text, `a["x.y"]`, so that every path names one place."""
    if isinstance(step, int):
        return f"{path}.{step}" if path else str(step)
    if PLAIN_KEY.fullmatch(step):
        return f"{path}.{step}" if path else step
    return f"{path}[{json.dumps(step, ensure_ascii=False)}]"


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"contains text that is not Unicode (a lone surrogate){where}") from None

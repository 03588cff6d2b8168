"""fast_sort: the built-in sort, for the same job as `sort_numbers` at any size."""

from __future__ import annotations

from typing import Any


def run(input: dict[str, Any]) -> dict[str, list[float]]:
    numbers = input["numbers"]
    if not isinstance(numbers, list) or not all(
        isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers
    ):
        raise TypeError("'numbers' must be a list of numbers")
    return {"numbers": sorted(numbers, reverse=bool(input.get("descending", False)))}

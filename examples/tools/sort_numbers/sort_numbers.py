"""sort_numbers: insertion sort, JSON {"numbers": [...], "descending": bool} on stdin.

Deliberately quadratic: it is the slow-but-simple member of the sorting capability, so that a
large list times out and the call falls back to `fast_sort`. Exit 65 when the input is not a
list of numbers.
"""

from __future__ import annotations

import json
import sys

EX_DATAERR = 65


def insertion_sort(values: list[float], descending: bool) -> list[float]:
    out: list[float] = []
    for v in values:
        i = len(out)
        while i > 0 and ((out[i - 1] < v) if descending else (out[i - 1] > v)):
            i -= 1
        out.insert(i, v)
    return out


def main() -> int:
    request = json.load(sys.stdin)
    numbers = request.get("numbers")
    if not isinstance(numbers, list) or not all(
        isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers
    ):
        print("'numbers' must be a list of numbers", file=sys.stderr)
        return EX_DATAERR
    json.dump({"numbers": insertion_sort(numbers, bool(request.get("descending", False)))}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""csv_to_json: CSV with a header row on stdin (as JSON {"csv": ...}) to JSON records on stdout.

Exit 65 (EX_DATAERR) when the input has no CSV text: fittest reads that as bad input. A ragged
row is deliberately left to crash (exit 1 with a traceback): the example of a tool that fails on
some inputs, for fallback and evolution to work on.
"""

from __future__ import annotations

import csv
import io
import json
import sys

EX_DATAERR = 65


class RaggedRowError(Exception):
    """A row whose field count differs from the header's."""


def main() -> int:
    request = json.load(sys.stdin)
    text = request.get("csv")
    if not isinstance(text, str):
        print("input needs a 'csv' string", file=sys.stderr)
        return EX_DATAERR
    delimiter = request.get("delimiter", ",")
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, [])
    rows = []
    for number, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise RaggedRowError(f"line {number} has {len(row)} fields, the header has {len(header)}")
        rows.append(dict(zip(header, row)))
    json.dump({"columns": header, "rows": rows}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

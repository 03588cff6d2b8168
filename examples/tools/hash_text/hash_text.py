"""hash_text: hex digest of {"text": ...} read from stdin, algorithm from `--algorithm`.

Exit 65 (EX_DATAERR) for an unknown algorithm or a missing text: bad input, not a crash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

EX_DATAERR = 65


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", required=True)
    algorithm = parser.parse_args().algorithm.lower()
    request = json.load(sys.stdin)
    text = request.get("text")
    if algorithm not in hashlib.algorithms_guaranteed or algorithm.startswith("shake"):
        print(f"unknown algorithm {algorithm!r}", file=sys.stderr)
        return EX_DATAERR
    if not isinstance(text, str):
        print("input needs a 'text' string", file=sys.stderr)
        return EX_DATAERR
    digest = hashlib.new(algorithm, text.encode("utf-8")).hexdigest()
    json.dump({"algorithm": algorithm, "hexdigest": digest}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

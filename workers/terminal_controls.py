"""The characters of a text a terminal acts on that JSON writes as they are.

JSON escapes the C0 controls (ESC among them) and nothing else: U+009B, the 8-bit form of
"ESC [", starts an escape sequence on its own, and the bidirectional controls show a text
reversed. A tool's output or error, a scenario or a feedback reason holding them reached the
operator's terminal through the CLI's JSON and the logs `fittest up` relays (QA 64a).
"""

from __future__ import annotations

import re

TERMINAL_CONTROLS = re.compile(r"[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escaped_in_json(text: str) -> str:
    """JSON text with those characters written as JSON's escapes (`\\u009b`), which read the same."""
    return TERMINAL_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)

"""word_stats: counts of a text and its most frequent words."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


def run(input: dict[str, Any]) -> dict[str, Any]:
    text = input["text"]  # a missing key is the caller's mistake: KeyError → bad_input
    if not isinstance(text, str):
        raise TypeError(f"'text' must be a string, got {type(text).__name__}")
    top = int(input.get("top", 5))
    words = [w.lower() for w in WORD.findall(text)]
    return {
        "words": len(words),
        "characters": len(text),
        "lines": len(text.splitlines()),
        "sentences": len(SENTENCE_END.findall(text)),
        # most_common keeps first-seen order among equal counts, so the result is deterministic
        "top_words": [[w, n] for w, n in Counter(words).most_common(max(0, top))],
    }

"""How well a scenario's words match each tool version's texts (BM25), beside what the embedding says.

The sentence model places a scenario near the tools whose descriptions mean the same thing, and
misses some whose descriptions share the scenario's rare words (a "PDF", an "SQL query", a place
name); word matching finds those. The learned policy adds a little of it to the description match
of its prior (selection/policies/learned.py), which matters most before any outcome is known, and
degraded selection (workers/degraded.py) matches by this score alone when there are no vectors.
A version is matched by the words of its name, description (or the description variant a call is
served), examples and tags (`version_text`).

BM25 (Lucene's variant, k1 1.2, b 0.75) is bm25s's, over content words crudely stemmed (`words`).
A scenario's scores are scaled so the best-matching text of the index (a version's, or a
description variant's) scores 1: what counts is how a tool's words compare with the best match,
since raw BM25 grows with the scenario's length.
Zero-shot top-1 on the MetaTool development queries, description cosine plus 0.1 x this score:
0.546 without it, 0.566 with bm25s's own words (no stemming), 0.581 with these (docs/benches.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

import bm25s

from selection.manifest import ToolManifest

# bm25s logs "Building index from tokens" at DEBUG on a logger of its own, with a handler of its own:
# a line in every worker log at every index build.
logging.getLogger("bm25s").setLevel(logging.WARNING)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "the and for with into from this that these those are was were has have its any all not but can "
    "you your our out per via use using text data".split()
)
_SUFFIXES = ("ations", "ation", "ings", "ing", "ers", "er", "ies", "es", "ed", "s")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def words(text: str) -> list[str]:
    """Content words of a text in order, crudely stemmed (`parse`, `parsing`, `parses` -> `pars`)."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP]


def version_text(manifest: ToolManifest, description: str | None = None) -> str:
    """The text a tool version's words are matched in; `description` in place of the manifest's
    (a description variant)."""
    return " ".join([manifest.name.replace("_", " "), manifest.description if description is None else description,
                     *manifest.examples, *manifest.tags])


class LexicalIndex:
    """BM25 over the texts of a set of tool versions, by key; built once per set of versions."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self._position = {key: i for i, key in enumerate(texts)}
        documents = [words(text) for text in texts.values()]
        self._bm25: bm25s.BM25 | None = None
        if any(documents):
            self._bm25 = bm25s.BM25(k1=1.2, b=0.75)
            self._bm25.index(documents, show_progress=False)

    def scores(self, scenario: str, keys: Iterable[str]) -> dict[str, float]:
        """Each of `keys` with its BM25 score for `scenario` over the best version's (0..1); 0 for a
        key the index does not hold, and for every key when the scenario shares no word with any."""
        keys = list(keys)
        query = words(scenario)
        raw = self._bm25.get_scores(query) if self._bm25 is not None and query else None
        best = float(raw.max()) if raw is not None and len(raw) else 0.0
        if raw is None or best <= 0.0:
            return dict.fromkeys(keys, 0.0)
        return {k: float(raw[i]) / best if (i := self._position.get(k)) is not None else 0.0 for k in keys}

"""Selection without the vector memory: what counts as its failure, and what matches instead.

When the embedder or the vector store fails, a call is still served: candidates come from the
registry (the namespace's versions, and tools whose words match the scenario's) and are ranked
with the Redis scores (quality, counters, breakers) but without semantic similarity, feedback or
failure memory. The result says so in `degraded`. Redis itself is not optional: its failures are
not store failures and propagate.
"""

from __future__ import annotations

import re

from redis.exceptions import RedisError

from selection.models import CallRequest
from selection.registry import ToolRegistry

# Exceptions that mean a bug in fittest rather than an unavailable store: never hidden by degrading.
_BUGS = (ValueError, TypeError, KeyError, IndexError, AttributeError, AssertionError, NameError)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "the and for with into from this that these those are was were has have its any all not but can "
    "you your our out per via use using text data".split()
)
_SUFFIXES = ("ations", "ation", "ings", "ing", "ers", "er", "ies", "es", "ed", "s")


def is_store_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised by the embedder or the vector memory, means that they are unavailable
    (connection, I/O, the engine, a model that cannot load) rather than a bug or a Redis failure."""
    return isinstance(exc, Exception) and not isinstance(exc, (RedisError, *_BUGS))


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def words(text: str) -> set[str]:
    """Content words of a text, crudely stemmed (`parse`, `parsing`, `parses` → `pars`)."""
    return {_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP}


def registry_similarities(request: CallRequest, registry: ToolRegistry) -> dict[str, float]:
    """The share of the scenario's words that each tool version's name, description, examples and
    tags contain (0..1), for the versions the request allows; versions sharing no word are left out."""
    wanted = words(request.scenario)
    if not wanted:
        return {}
    exact = f"{request.namespace}@{request.version}" if request.namespace and request.version else None
    out: dict[str, float] = {}
    for m in registry.all():
        if m.deprecated or m.key in request.exclude or (exact and m.key != exact):
            continue
        if request.tags and not set(request.tags) <= set(m.tags):
            continue
        overlap = len(wanted & words(" ".join([m.name.replace("_", " "), m.match_text(), *m.tags])))
        if overlap:
            out[m.key] = overlap / len(wanted)
    return out

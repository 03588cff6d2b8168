"""Selection without the vector memory: what counts as its failure, and what matches instead.

When the embedder or the vector store fails, a call is still served: candidates come from the
registry (the namespace's versions, and tools whose words match the scenario's) and are ranked
with the Redis scores (quality, counters, breakers) but without semantic similarity, feedback or
failure memory. The result says so in `degraded`. Redis itself is not optional: its failures are
not store failures and propagate.
"""

from __future__ import annotations

from redis.exceptions import RedisError

from selection.lexical import LexicalIndex
from selection.manifest import ToolManifest, tool_key
from selection.models import CallRequest
from selection.registry import ToolRegistry

# Exceptions that mean a bug in fittest rather than an unavailable store: never hidden by degrading.
_BUGS = (ValueError, TypeError, KeyError, IndexError, AttributeError, AssertionError, NameError)


def is_store_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised by the embedder or the vector memory, means that they are unavailable
    (connection, I/O, the engine, a model that cannot load) rather than a bug or a Redis failure."""
    return isinstance(exc, Exception) and not isinstance(exc, (RedisError, *_BUGS))


def registry_similarities(request: CallRequest, registry: ToolRegistry, index: LexicalIndex) -> dict[str, float]:
    """How well the scenario's words match each tool version's name, description, examples and tags
    (the selector's word index: BM25 over the best-matching version's, 0..1), for the versions the
    request allows; versions sharing no word are left out."""
    exact = tool_key(request.namespace, request.version) if request.namespace and request.version else None
    tags = set(request.tags)

    def allowed(m: ToolManifest) -> bool:
        return not (m.deprecated or m.key in request.exclude or (exact and m.key != exact)) and tags <= set(m.tags)

    keys = [m.key for m in registry.all() if allowed(m)]
    return {key: score for key, score in index.scores(request.scenario, keys).items() if score > 0}

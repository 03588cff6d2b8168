"""Selection without the vector memory: what matches instead.

When the embedder or the vector store fails (workers/store_failures.py), a call is still served:
candidates come from the registry (the namespace's versions, and tools whose words match the
scenario's) and are ranked with the Redis scores (quality, counters, breakers) but without
semantic similarity, feedback or failure memory. The result says so in `degraded`.
"""

from __future__ import annotations

from selection.lexical import LexicalIndex
from selection.manifest import ToolManifest, tool_key
from selection.models import CallRequest
from selection.registry import ToolRegistry

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

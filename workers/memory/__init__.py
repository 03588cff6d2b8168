"""The vector memory behind the `VectorMemory` port: Qdrant Edge embedded under the data directory
by default, or a Qdrant server through qdrant-client when FITTEST_QDRANT_URL is set."""

from __future__ import annotations

from selection.ports import VectorMemory
from workers.memory.common import VectorMemoryUnavailable
from workers.settings import Settings, redact_url

__all__ = ["VectorMemoryUnavailable", "open_vector_memory"]


def open_vector_memory(settings: Settings, dim: int | None = None) -> VectorMemory:
    """Open the configured store with all its collections, or fail with a message that names the
    store and the setting that chose it. `dim`: the vector size (default FITTEST_EMBEDDING_DIM)."""
    dim = settings.embedding_dim if dim is None else dim
    try:
        memory = _construct(settings, dim)
        try:
            memory.ensure_collections()
        except BaseException:
            memory.close()
            raise
    except VectorMemoryUnavailable:
        raise
    except Exception as exc:
        raise VectorMemoryUnavailable(f"cannot open the vector memory, {_describe(settings)}: {exc}") from exc
    return memory


def _construct(settings: Settings, dim: int) -> VectorMemory:
    # Imported here: qdrant-client takes 1.5 s to import, and an embedded store never needs it.
    if settings.qdrant_url:
        from workers.memory.client import ClientVectorMemory

        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return ClientVectorMemory(settings.collection_prefix, url=settings.qdrant_url, api_key=api_key, dim=dim)
    from workers.memory.edge import EdgeVectorMemory

    return EdgeVectorMemory(settings.data_dir / "qdrant", settings.collection_prefix, dim=dim)


def _describe(settings: Settings) -> str:
    if settings.qdrant_url:
        return f"the Qdrant server at {redact_url(settings.qdrant_url)} (FITTEST_QDRANT_URL)"
    return f"Qdrant Edge under {settings.data_dir / 'qdrant'} (FITTEST_DATA_DIR; FITTEST_QDRANT_URL selects a server)"

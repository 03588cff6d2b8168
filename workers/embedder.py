"""The Embedder port on fastembed (ONNX Runtime), with an LRU cache of vectors by text.

Scenarios repeat (retries, the same job from many callers, re-selection after evolution), so a
cache hit saves a model run of 2-5 ms. One model per process: loading costs ~0.3 s and ~150 MB.
By default the model runs as its int8 copy (workers/int8_model.py), twice as fast.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
import numpy as np
import onnxruntime as ort
from fastembed import TextEmbedding

from workers.int8_model import int8_copy
from workers.settings import Settings

log = logging.getLogger("fittest.embedder")

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# ONNX Runtime threads per model run. Two give most of the single-text speed-up (7.4 -> 5.6 ms
# measured on 2 cores); more would only contend with the worker's other threads and processes.
MODEL_THREADS = max(1, min(2, os.cpu_count() or 1))

# Texts per model run when embedding many; a batch is padded to its longest text.
MODEL_BATCH = 64


class EmbedderUnavailable(RuntimeError):
    """The embedding model cannot be loaded; the message names the path tried and the setting."""


class FastEmbedder:
    """Embedder port: L2-normalised vectors from a fastembed model, cached by text.

    Thread-safe: the cache sits behind a lock, and model runs happen outside it (an ONNX Runtime
    session serves concurrent runs), so a hit never waits for another thread's miss.

    `int8_dir`: run the model's int8 copy, made in (or read from) this directory; None runs the
    model file as it is. `precision` says which one runs: a copy that cannot be made or opened leaves fp32."""

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        model_path: Path | None = None,
        cache_size: int = 4096,
        int8_dir: Path | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_path = model_path
        self._model = _load(model_name, model_path)
        self.precision = _reopen_session(self._model, int8_dir)
        self.dim: int = self._model.embedding_size
        self._cache: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors in the order of `texts`; the texts not cached go to the model in one call."""
        texts = list(texts)
        known: dict[str, tuple[float, ...]] = {}
        with self._lock:
            for text in texts:
                vector = self._cache.get(text)
                if vector is not None:
                    self._cache.move_to_end(text)
                    known[text] = vector
            missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            computed = dict(zip(missing, self._run(missing), strict=True))
            known.update(computed)
            self._remember(computed)
        return [list(known[t]) for t in texts]

    def embed_one(self, text: str) -> list[float]:
        return self.embed([text])[0]

    def clear_cache(self) -> None:
        """Forget every cached vector: a bench that times embedding runs from a cold cache."""
        with self._lock:
            self._cache.clear()

    def _run(self, texts: list[str]) -> list[tuple[float, ...]]:
        # The int8 copy quantises a run's activations with one scale for the whole batch, padding
        # included, so a text embedded beside others came out a little different from the same text
        # alone (cosine 0.991 on average over 3,000 queries): one text per run gives a scenario the
        # same vector in every worker, however the texts arrived.
        batch = 1 if self.precision == "int8" else MODEL_BATCH
        matrix = np.stack(list(self._model.embed(texts, batch_size=batch))).astype(np.float64)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        # fastembed normalises this model already; other models (a FITTEST_EMBEDDING_MODEL swap) may not.
        matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        return [tuple(row) for row in matrix.tolist()]

    def _remember(self, vectors: dict[str, tuple[float, ...]]) -> None:
        if self._cache_size <= 0:
            return
        with self._lock:
            for text, vector in vectors.items():
                self._cache[text] = vector
                self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


def _load(model_name: str, model_path: Path | None) -> TextEmbedding:
    try:
        model = TextEmbedding(
            model_name=model_name,
            specific_model_path=str(model_path) if model_path is not None else None,
            threads=MODEL_THREADS,
        )
        return model
    except Exception as exc:
        tried = (
            f"the directory {model_path}"
            if model_path is not None
            else "a download (FITTEST_EMBEDDING_MODEL_PATH is not set)"
        )
        raise EmbedderUnavailable(
            f"embedding model {model_name!r} could not be loaded from {tried}: {exc}. "
            "Set FITTEST_EMBEDDING_MODEL_PATH to a local model directory (model.onnx, tokenizer.json, "
            "config.json); without internet fastembed cannot download the model."
        ) from exc


def _reopen_session(model: TextEmbedding, int8_dir: Path | None) -> str:
    """Reopen the ONNX session, from the model's int8 copy when `int8_dir` is given, with its pool
    threads spinning during a run and sleeping after it; returns the precision that runs.

    By default ONNX Runtime's pool threads busy-wait after every run for the next one. In a worker
    that embeds one scenario and then searches the vector store and talks to Redis, those spinning
    threads take the 2 cores from the work that follows: the selection bench showed vector searches
    of 0.5 ms at the median taking 7 ms at p99 until spinning was turned off. Turned off entirely,
    though, every parallel step of a run waits for a sleeping thread to wake: a run took ~20 % longer
    (p50 4.1 -> 5.2 ms, p99 9.2 -> 10.8 ms on the dev queries). `session.force_spinning_stop` keeps
    the spinning inside a run and stops it when the run returns (measured: the same speed as always
    spinning, and no CPU used after the run). fastembed exposes no option for it, so the session it
    made is replaced by one with the same providers and thread counts."""
    holder = getattr(model, "model", None)
    session = getattr(holder, "model", None)
    path = getattr(session, "_model_path", None)
    if holder is None or not isinstance(session, ort.InferenceSession) or not path:
        return "fp32"  # a fastembed or onnxruntime whose internals moved: keep its session as it is
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = MODEL_THREADS
    options.inter_op_num_threads = MODEL_THREADS
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.inter_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    providers = session.get_providers()
    if int8_dir is not None:
        try:
            holder.model = ort.InferenceSession(str(int8_copy(Path(path), int8_dir)), sess_options=options,
                                                providers=providers)
            return "int8"
        except Exception as exc:  # an optimisation only: the model as it is still serves
            log.warning("embedding model %s runs in fp32: its int8 copy could not be made or opened in %s: %s",
                        path, int8_dir, exc)
    holder.model = ort.InferenceSession(path, sess_options=options, providers=providers)
    return "fp32"


_OPEN: dict[tuple[str, str | None, bool], FastEmbedder] = {}
_OPEN_LOCK = threading.Lock()


def open_embedder(settings: Settings) -> FastEmbedder:
    """This process's embedder for the configured model, loaded on first use only."""
    path = settings.embedding_model_path
    int8_dir = settings.model_cache_dir if settings.embedding_int8 else None
    key = (settings.embedding_model, str(path.resolve()) if path is not None else None, int8_dir is not None)
    with _OPEN_LOCK:  # held while loading, so concurrent first calls load the model once
        embedder = _OPEN.get(key)
        if embedder is None:
            embedder = _OPEN[key] = FastEmbedder(
                settings.embedding_model, path, cache_size=settings.embedding_cache_size, int8_dir=int8_dir
            )
    if embedder.dim != settings.embedding_dim:
        # Caught here, not at the first write: the vector store is made for FITTEST_EMBEDDING_DIM.
        raise EmbedderUnavailable(
            f"embedding model {settings.embedding_model!r} makes {embedder.dim}-dimensional vectors but "
            f"FITTEST_EMBEDDING_DIM is {settings.embedding_dim}; set it to {embedder.dim} (and use a fresh "
            "vector store: vectors of different sizes cannot share one)"
        )
    return embedder


_INHERITED: list[dict[tuple[str, str | None, bool], FastEmbedder]] = []


def _forget_after_fork() -> None:
    """A forked child must load its own model: the parent's ONNX Runtime threads do not survive
    a fork, and a session used across it can hang. The lock is renewed in case a parent thread
    held it at the fork. The parent's embedders are set aside, never destroyed here: a session's
    destructor waits for ONNX Runtime threads the child does not have, which hung every
    subprocess started with a preexec_fn (the tool sandbox) from a process holding a model."""
    global _OPEN, _OPEN_LOCK
    _INHERITED.append(_OPEN)
    _OPEN = {}
    _OPEN_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)

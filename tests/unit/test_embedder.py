"""The fastembed adapter: cache, normalisation, dimension, and a clear error without a model."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from selection.ports import Embedder
from workers.embedder import EmbedderUnavailable, FastEmbedder, open_embedder
from workers.settings import Settings


class CountingModel:
    """Wraps the fastembed model to record what reaches it."""

    def __init__(self, model: object) -> None:
        self.model = model
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str], **kwargs: object) -> object:
        self.calls.append(list(texts))
        return self.model.embed(texts, **kwargs)  # type: ignore[attr-defined]


@pytest.fixture
def counted(model_path: Path) -> tuple[FastEmbedder, CountingModel]:
    embedder = FastEmbedder(model_path=model_path, cache_size=3)
    spy = CountingModel(embedder._model)
    embedder._model = spy  # type: ignore[assignment]
    return embedder, spy


def test_implements_the_port_with_384_dims(embedder: FastEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 384
    vector = embedder.embed_one("translate API docs, keep code blocks")
    assert len(vector) == 384
    assert all(isinstance(x, float) for x in vector)


def test_vectors_are_unit_length(embedder: FastEmbedder) -> None:
    vectors = embedder.embed(["a", "summarise a long legal contract in plain English", "x" * 5000])
    assert [len(v) for v in vectors] == [384, 384, 384]  # one per text, the over-long one too
    assert [math.sqrt(sum(x * x for x in v)) for v in vectors] == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)


def test_cache_hits_do_not_reach_the_model(counted: tuple[FastEmbedder, CountingModel]) -> None:
    embedder, spy = counted
    first = embedder.embed_one("resize images")
    assert embedder.embed_one("resize images") == first
    assert spy.calls == [["resize images"]]
    # One model call for the misses of a batch, each text once; hits and repeats come from the cache.
    batch = embedder.embed(["resize images", "crop photos", "crop photos", "resize images", "blur faces"])
    assert spy.calls[1:] == [["crop photos", "blur faces"]]
    assert batch[0] == first and batch[3] == first and batch[1] == batch[2]
    # A fourth text takes the place of the least recently used (resize images): 3 are kept.
    embedder.embed_one("sharpen edges")
    embedder.embed(["crop photos", "blur faces", "sharpen edges"])
    embedder.embed_one("resize images")
    assert spy.calls[2:] == [["sharpen edges"], ["resize images"]]


def test_the_cache_forgets_the_least_recently_used(counted: tuple[FastEmbedder, CountingModel]) -> None:
    embedder, spy = counted
    embedder.embed(["a", "b", "c"])
    embedder.embed_one("a")  # now b is the oldest
    embedder.embed_one("d")
    embedder.embed(["a", "c", "d"])
    assert len(spy.calls) == 2
    embedder.embed_one("b")
    assert spy.calls[-1] == ["b"]


def test_a_returned_vector_cannot_change_the_cache(embedder: FastEmbedder) -> None:
    vector = embedder.embed_one("stable text")
    vector[0] = 42.0
    assert embedder.embed_one("stable text")[0] != 42.0


def test_threads_get_the_same_vectors(embedder: FastEmbedder) -> None:
    texts = [f"scenario {i}: translate document number {i}" for i in range(40)]
    expected = FastEmbedder(model_path=embedder.model_path, cache_size=0).embed(texts)
    results: dict[int, list[list[float]]] = {}

    def work(worker: int) -> None:
        results[worker] = embedder.embed(texts[worker::4])

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2, 3]  # every thread got its vectors (one that raised left none)
    for worker, vectors in results.items():
        for got, want in zip(vectors, expected[worker::4], strict=True):
            assert got == pytest.approx(want, abs=1e-5)


def test_a_bad_model_path_names_the_setting_and_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"
    with pytest.raises(EmbedderUnavailable) as info:
        FastEmbedder(model_path=missing)
    assert "FITTEST_EMBEDDING_MODEL_PATH" in str(info.value)
    assert str(missing) in str(info.value)


def test_open_embedder_loads_once_per_process(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.embedder

    monkeypatch.setattr(workers.embedder, "_OPEN", {})  # as in a fresh process, whatever ran before
    settings = Settings(embedding_model_path=model_path, embedding_cache_size=16)
    first = open_embedder(settings)
    assert open_embedder(Settings(embedding_model_path=model_path)) is first
    spy = CountingModel(first._model)
    monkeypatch.setattr(first, "_model", spy)
    texts = [f"text {i}" for i in range(17)]
    first.embed(texts)
    first.embed(texts[1:])  # the setting's 16 are kept
    first.embed(texts[:1])  # and the 17th pushed the first out
    assert spy.calls == [texts, texts[:1]]


def test_a_model_of_another_size_than_the_setting_is_refused_at_load(model_path: Path) -> None:
    settings = Settings(embedding_model_path=model_path, embedding_dim=768)
    with pytest.raises(EmbedderUnavailable) as info:
        open_embedder(settings)
    assert "384-dimensional" in str(info.value) and "FITTEST_EMBEDDING_DIM is 768" in str(info.value)
    assert open_embedder(settings.model_copy(update={"embedding_dim": 384})).dim == 384


def test_the_model_uses_no_cpu_between_runs(embedder: FastEmbedder) -> None:
    """A memory-side worker searches and talks to Redis right after embedding: threads of the model
    still busy-waiting then would take the machine's cores from that work."""
    used_ms = []
    for i in range(5):
        embedder.embed([f"convert the quarterly sales report number {i} to a PDF and mail it"])
        started = time.process_time()
        time.sleep(0.05)
        used_ms.append((time.process_time() - started) * 1000)
    # Spinning threads would use ~50 ms of CPU each in every pause; the median leaves out a burst of
    # another thread of the test process (one pause took 11 ms in a full parallel run).
    assert sorted(used_ms)[2] < 10, f"the model's threads kept running after the run: {used_ms} ms of CPU"


# ------------------------------------------------------------------ the int8 copy of the model
SCENARIOS = [
    "convert the quarterly sales report to a PDF",
    "what is the weather in Paris tomorrow",
    "find a cheap flight from Berlin to Rome",
    "translate this paragraph into Spanish",
    "sort these numbers in ascending order",
]
TOOL_TEXTS = [
    "Turns documents and spreadsheets into PDF files",
    "Weather forecasts for any city",
    "Searches airline tickets and compares fares",
    "Translates text between languages",
    "Sorts a list of numbers",
]


@pytest.fixture(scope="module")
def int8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def int8_embedder(model_path: Path, int8_dir: Path) -> FastEmbedder:
    return FastEmbedder(model_path=model_path, cache_size=0, int8_dir=int8_dir)


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_the_int8_copy_keeps_the_vectors_and_their_order(int8_embedder: FastEmbedder, embedder: FastEmbedder) -> None:
    assert int8_embedder.precision == "int8" and embedder.precision == "fp32"
    int8 = int8_embedder.embed(SCENARIOS + TOOL_TEXTS)
    fp32 = embedder.embed(SCENARIOS + TOOL_TEXTS)
    assert all(_cosine(a, b) > 0.98 for a, b in zip(int8, fp32, strict=True))
    assert int8 != fp32  # it is the quantised model that ran, not the file as it is
    for vectors in (int8, fp32):
        scenarios, tools = vectors[: len(SCENARIOS)], vectors[len(SCENARIOS) :]
        best = [max(range(len(tools)), key=lambda j: _cosine(s, tools[j])) for s in scenarios]
        assert best == list(range(len(SCENARIOS)))


def test_an_int8_vector_does_not_depend_on_the_texts_embedded_with_it(int8_embedder: FastEmbedder) -> None:
    """A scenario stored by the memory worker (in a batch) must match the same scenario embedded
    alone by the selection worker: the int8 model scales a run's activations over its whole batch."""
    alone = [int8_embedder.embed([t])[0] for t in TOOL_TEXTS]
    batched = int8_embedder.embed(TOOL_TEXTS + ["a much longer text " * 20])[: len(TOOL_TEXTS)]
    assert batched == alone


def test_the_int8_copy_is_made_once_and_named_by_its_source(
    model_path: Path, int8_dir: Path, int8_embedder: FastEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime.quantization

    from workers.int8_model import int8_copy

    copies = list(int8_dir.glob("*.int8.onnx"))
    assert len(copies) == 1 and not list(int8_dir.glob(".*.tmp"))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("quantised again although the copy exists")

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", refuse)
    assert int8_copy(model_path / "model.onnx", int8_dir) == copies[0]
    assert FastEmbedder(model_path=model_path, int8_dir=int8_dir).precision == "int8"


def test_a_new_int8_copy_leaves_copies_in_use_and_writes_nothing_beside_the_model(
    model_path: Path, int8_dir: Path, int8_embedder: FastEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed model file, recipe or ONNX Runtime makes a new copy. The copy it replaces may still
    be another install's (another ONNX Runtime sharing the directory): removing it at once made two
    such installs quantise again at every start. Making it writes nothing beside the model: workers
    starting together used to delete each other's scratch file there."""
    import shutil

    import onnx.shape_inference

    import workers.int8_model
    from workers.int8_model import int8_copy

    written: list[Path] = []
    infer = onnx.shape_inference.infer_shapes_path

    def recording(source: str, output: str, *args: Any, **kwargs: Any) -> None:
        written.append(Path(output))
        infer(source, output, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes_path", recording)

    cache = tmp_path / "cache"
    shutil.copytree(int8_dir, cache)
    (current,) = cache.glob("*.int8.onnx")
    other_model = cache / "model-0badc0de-0123456789abcdef.int8.onnx"
    other_model.write_bytes(b"another model's copy")
    monkeypatch.setattr(workers.int8_model, "RECIPE", "int8-per-channel-matmul-v2")
    new = int8_copy(model_path / "model.onnx", cache)
    assert new != current and new.is_file()
    assert sorted(cache.glob("*.int8.onnx")) == sorted([new, current, other_model])
    assert written and not [p for p in written if p.parent == model_path.resolve() or p.parent == model_path]


def test_copies_no_load_used_for_a_week_are_removed(
    model_path: Path, int8_dir: Path, int8_embedder: FastEmbedder, tmp_path: Path
) -> None:
    """What a load uses is marked used, so a copy in use stays however old it is; a copy of a model
    since changed, of a hub revision since replaced, or a killed quantisation's scratch file goes
    once nothing has used it for a week."""
    import shutil

    import onnxruntime.quantization

    from workers.int8_model import UNUSED_FOR_S, int8_copy

    cache = tmp_path / "cache"
    shutil.copytree(int8_dir, cache)
    (current,) = cache.glob("*.int8.onnx")
    (memo,) = cache.glob("*.sha256.json")
    recent = cache / "model-0badc0de-0123456789abcdef.int8.onnx"  # another install's, loaded yesterday
    stale = cache / "model-0badc0de-fedcba9876543210.int8.onnx"  # its model changed since
    scratch = cache / f".{stale.name}.abc123.tmp"  # a quantisation killed halfway
    week_ago, yesterday = time.time() - UNUSED_FOR_S - 60, time.time() - 24 * 3600
    for path, when in [(recent, yesterday), (stale, week_ago), (scratch, week_ago)]:
        path.write_bytes(b"x")
        os.utime(path, (when, when))
    for path in (current, memo):  # in use, though its last load was long ago
        os.utime(path, (week_ago, week_ago))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("quantised again although the copy exists")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(onnxruntime.quantization, "quantize_dynamic", refuse)
        assert int8_copy(model_path / "model.onnx", cache) == current
    assert sorted(p.name for p in cache.iterdir()) == sorted(p.name for p in (current, memo, recent))
    assert current.stat().st_mtime > time.time() - 60 and memo.stat().st_mtime > time.time() - 60


def test_the_model_file_is_hashed_again_only_when_it_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process names the int8 copy by the model's digest; the content's hash is remembered
    while the file is as it was, and a rewritten model (same size, new content) gets a new name."""
    import os

    from workers.int8_model import _digest

    model = tmp_path / "model.onnx"
    model.write_bytes(b"first model " * 1000)
    written_long_ago = time.time() - 60
    os.utime(model, (written_long_ago, written_long_ago))
    memo = tmp_path / "cache" / "model.sha256.json"
    first = _digest(model, memo)
    assert not memo.exists()  # its change time is this second's: a write in the same tick would not show
    time.sleep(1.1)
    assert _digest(model, memo) == first
    assert memo.is_file()

    opened = Path.open

    def not_the_model(self: Path, *args: Any, **kwargs: Any) -> IO[Any]:
        assert self != model, "the model was hashed again although it did not change"
        return opened(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(Path, "open", not_the_model)
        assert _digest(model, memo) == first
    model.write_bytes(b"other model " * 1000)
    os.utime(model, (written_long_ago, written_long_ago))  # as `cp -p` would leave it: only ctime moves
    second = _digest(model, memo)
    assert second != first
    time.sleep(1.1)
    assert _digest(model, memo) == second
    memo.unlink()
    assert _digest(model, memo) == second  # the same as hashing from nothing


def test_a_cache_dir_that_cannot_be_written_leaves_the_model_in_fp32(
    model_path: Path, embedder: FastEmbedder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with caplog.at_level("WARNING", logger="fittest.embedder"):
        fallback = FastEmbedder(model_path=model_path, cache_size=0, int8_dir=blocked / "models")
    assert fallback.precision == "fp32"
    assert "runs in fp32" in caplog.text and str(blocked) in caplog.text
    for got, want in zip(fallback.embed(SCENARIOS), embedder.embed(SCENARIOS), strict=True):
        assert got == pytest.approx(want, abs=1e-6)


def test_the_settings_choose_the_precision(model_path: Path, int8_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.embedder

    monkeypatch.setattr(workers.embedder, "_OPEN", {})
    on = open_embedder(Settings(embedding_model_path=model_path, model_cache_dir=int8_dir))
    off = open_embedder(Settings(embedding_model_path=model_path, embedding_int8=False))
    assert (on.precision, off.precision) == ("int8", "fp32")


def test_a_damaged_int8_copy_leaves_the_model_in_fp32(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import workers.embedder

    damaged = tmp_path / "model-0123.int8.onnx"
    damaged.write_bytes(b"\x08\x07 not an onnx graph")
    monkeypatch.setattr(workers.embedder, "int8_copy", lambda source, cache_dir: damaged)
    with caplog.at_level("WARNING", logger="fittest.embedder"):
        fallback = FastEmbedder(model_path=model_path, cache_size=0, int8_dir=tmp_path)
    assert fallback.precision == "fp32" and "runs in fp32" in caplog.text
    assert len(fallback.embed_one("resize images")) == 384

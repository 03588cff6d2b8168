"""An int8 copy of the embedding model, made once from the model file and kept on disk.

Embedding the scenario is most of a selection's time (the selection bench: 5.8 of 11.4 ms on
average, 12.6 of 20.5 ms in the slowest 2 %), and most of a run is the model's matrix
multiplications. ONNX Runtime's dynamic quantisation turns their weights into int8 with one scale
per output channel; activations are quantised per run. Measured on 3,000 MetaTool queries: a run
takes half the time (p50 4.2 -> 2.3 ms, p99 10.2 -> 5.3 ms), vectors stay at cosine 0.995 to the
fp32 model's (0.975 at worst), and zero-shot top-1, top-5 and nearest-neighbour accuracy do not
move. One scale per tensor instead (the quantiser's default) is as fast but drifts to cosine 0.965
and loses a point of accuracy, so the per-channel recipe is the one used. The word-embedding table
stays fp32: it is a lookup, not compute.

The copy is named by the source's path and a digest of the source file (remembered beside the
copies while the file is unchanged), the recipe and the ONNX Runtime version, so a changed model or
runtime makes a new copy and never reuses a stale one. Each load marks its copy used (its
modification time), and copies that no load has used for UNUSED_FOR_S (a week) are removed, with
the scratch files of a quantisation that was killed: the copy of a model file since changed, or of
a hub revision since replaced, goes a week later. Removing a copy at once when another took its
place, as before, made two installs with different ONNX Runtime versions sharing the directory
(the default is per user) remove each other's copy and quantise again at every start. A copy
removed while a process runs it stays readable to that process until it closes it. A copy is
written to a temporary file and renamed into place: processes that start together each may
quantise, and each sees either no copy or a whole one.

The quantiser is handed the loaded graph, not the file's path: given a path, it writes a
shape-inferred `model-inferred.onnx` beside the source and deletes it after reading it back, so
two workers starting together removed each other's file and one ran in fp32 (seen when two
benches started at once), and a model in a directory the worker cannot write never got its copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import onnxruntime as ort

RECIPE = "int8-per-channel-matmul-v1"
UNUSED_FOR_S = 7 * 24 * 3600


def int8_copy(source: Path, cache_dir: Path) -> Path:
    """The int8 copy of the ONNX model `source` in `cache_dir`, made on first use.

    Raises OSError when the cache directory cannot be written, and whatever the quantiser raises
    for a model it cannot handle; the caller then runs the model as it is."""
    family = f"{source.stem}-{hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:8]}"
    memo = cache_dir / f"{family}.sha256.json"
    target = cache_dir / f"{family}-{_digest(source, memo)}.int8.onnx"
    if not target.is_file():
        _quantise(source, target)
    _mark_used(target, memo)
    _remove_unused(cache_dir)
    return target


def _quantise(source: Path, target: Path) -> None:
    import onnx  # only when a copy is made
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        quantize_dynamic(onnx.load(source), scratch, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
        os.replace(scratch, target)
    finally:
        Path(scratch).unlink(missing_ok=True)


def _mark_used(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(OSError):  # a read-only cache is only never swept
            os.utime(path)


def _remove_unused(cache_dir: Path) -> None:
    """Remove the copies, digest memos and quantisation scratch files no load has used for
    UNUSED_FOR_S. Another process may remove the same file first; that is no error."""
    cutoff = time.time() - UNUSED_FOR_S
    for path in [*cache_dir.glob("*.int8.onnx"), *cache_dir.glob("*.sha256.json"), *cache_dir.glob(".*.tmp")]:
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                path.unlink()


def _digest(source: Path, memo: Path) -> str:
    """The copy's name: a digest of the model file's content, the recipe and ONNX Runtime's version.

    Hashing the 90 MB model took ~68 ms of every process's model load, so the content's hash is
    remembered in `memo` with the file's identity (device, inode, size, modification and change
    times): any write to the file changes its change time, so an edited or replaced model is hashed
    again. As git does for its index, a file written in the last second is not remembered, since a
    second write within the same clock tick would leave its times as they were."""
    stat = source.stat()
    identity = [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    content = _remembered(memo, identity)
    if content is None:
        h = hashlib.sha256()
        with source.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        content = h.hexdigest()
        if time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) > 1_000_000_000:
            _remember(memo, {"identity": identity, "sha256": content})
    return hashlib.sha256(f"{content} {RECIPE} onnxruntime {ort.__version__}".encode()).hexdigest()[:16]


def _remembered(memo: Path, identity: list[int]) -> str | None:
    try:
        known = json.loads(memo.read_text())
        return str(known["sha256"]) if known["identity"] == identity else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(memo: Path, known: dict[str, object]) -> None:
    """Written whole or not at all (a temporary file renamed into place); a directory that cannot
    be written only means the next load hashes again."""
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, scratch = tempfile.mkstemp(dir=memo.parent, prefix=f".{memo.name}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(known, f)
        os.replace(scratch, memo)
    except OSError:
        Path(scratch).unlink(missing_ok=True)

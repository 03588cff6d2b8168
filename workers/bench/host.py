"""Where a bench ran, written with its numbers.

The same selection code measured p99 10-14 ms on one host and 23-27 ms on another, whose CPU
shows AVX2 but no AVX-512 or VNNI (ONNX Runtime picks its int8 kernels by these), and its
zero-shot top-1 moved from 0.541 to 0.545 between the two, with an unpinned install whose package
versions nobody had written down (docs/benches.md). Another job's load moves every latency. So a
bench's JSON says which CPU, which packages and what load its numbers were measured on, and two
runs are compared only where that makes sense.
"""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, Field

# The packages whose version can move a bench's numbers.
PACKAGES = ("onnxruntime", "fastembed", "qdrant-edge-py", "qdrant-client", "numpy", "celery", "redis", "bm25s")
# CPU extensions ONNX Runtime's kernels are chosen by.
SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def _cpu() -> tuple[str, list[str]]:
    """The CPU's model name and which of SIMD_FLAGS it has (from /proc/cpuinfo where there is one)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), []
    first = text.split("\n\n", 1)[0]  # the first processor's block
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    return fields.get("model name", platform.machine()), [f for f in SIMD_FLAGS if f in flags]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class HostInfo(BaseModel):
    cpu: str
    simd: list[str]  # which of SIMD_FLAGS the CPU has
    cores: int
    python: str
    packages: dict[str, str]  # those of PACKAGES installed, with their versions
    load_average: list[float]  # 1/5/15-minute load when the run ended
    finished_at: str  # UTC, ISO 8601

    @classmethod
    def here(cls) -> HostInfo:
        cpu, simd = _cpu()
        return cls(
            cpu=cpu, simd=simd, cores=os.cpu_count() or 1, python=platform.python_version(),
            packages={p: v for p in PACKAGES if (v := _version(p)) is not None},
            load_average=[round(x, 2) for x in os.getloadavg()],
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    def line(self) -> str:
        """One line for a bench's printed table."""
        packages = ", ".join(f"{p} {v}" for p, v in self.packages.items() if p in ("onnxruntime", "fastembed", "qdrant-edge-py"))
        return (f"host: {self.cpu}, {self.cores} cores ({' '.join(self.simd) or 'no AVX2'}); {packages}; "
                f"load {' '.join(map(str, self.load_average))}")


def checkout_commit() -> str | None:
    """The commit of the checkout the bench ran from, "-dirty" after it when files differ from it;
    None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}-dirty" if changed else commit


def _settings() -> dict[str, str]:
    """The settings the bench ran with that differ from their defaults, as `fittest settings` shows
    them (secrets hidden): a run with another FITTEST_MIN_SIMILARITY or the classifier off looked like
    any other (QA 59c L1)."""
    from workers.settings import Settings, shown_value

    settings = Settings()
    return {f"FITTEST_{name.upper()}": shown_value(value) for name, field in Settings.model_fields.items()
            if (value := getattr(settings, name)) != field.default}


class BenchResult(BaseModel):
    """What every bench's JSON carries besides its own numbers: the host they were measured on, the
    code (its commit) and the FITTEST_ variables they ran with."""

    host: HostInfo = Field(default_factory=HostInfo.here)
    code: str | None = Field(default_factory=checkout_commit)
    settings: dict[str, str] = Field(default_factory=_settings)

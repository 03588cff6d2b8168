"""Candidates of a plan as selection would rank them, for the tests of what the serving and the
failure rules do with a ranking (no store, model or policy behind them)."""

from __future__ import annotations

from selection.manifest import ToolManifest
from selection.models import Candidate, ScoreBreakdown


def candidate(name: str, version: str = "1.0.0") -> Candidate:
    manifest = ToolManifest.model_validate({"name": name, "version": version, "description": "d",
                                            "implementation": {"kind": "python", "entrypoint": "m:run"}})
    return Candidate(key=manifest.key, manifest=manifest, score=1.0)


def matching(name: str, similarity: float, does: bool = False) -> Candidate:
    """A candidate whose description matches the job `similarity`, and that did such jobs when `does`."""
    return candidate(name).model_copy(update={"does_the_job": does, "breakdown": ScoreBreakdown(similarity=similarity)})

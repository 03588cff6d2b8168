"""The mutator plugin interface, and how mutators are found.

A mutator looks at the parent version (its manifest and files) and the failure evidence and
proposes zero or more candidate versions, each with a one-line `mutation` text. It never writes
files and never decides: verification (evolution/verification.py) judges every candidate before
anything is served.

Mutators are plugins: every entry point of the group `fittest.mutators` names a factory that takes
a `MutatorConfig` and returns a mutator, or None when it is switched off (the code mutator without
an endpoint). fittest declares its built-ins that way in pyproject.toml; another package adds its
own by declaring entry points in the same group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from evolution.models import CandidateVersion, Evidence, FailedRun, Trigger
from selection.manifest import ToolManifest
from selection.models import FailureClass

ENTRY_POINT_GROUP = "fittest.mutators"

log = logging.getLogger(__name__)


class MutatorConfig(BaseModel):
    """What mutators may depend on; built from the settings by the evolution worker, which copies
    each field from the Settings field of the same name (workers/evolver.py `mutator_config`). The
    defaults here are the settings' defaults, for tests that build one without settings
    (tests/unit/test_mutator_config.py checks that they agree).
    """

    max_timeout_s: float = 120.0
    llm_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = 60.0


class ParentTool(BaseModel):
    """The version being evolved: its manifest and the files of its folder (manifests excluded)."""

    manifest: ToolManifest
    files: dict[str, bytes] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.manifest.key


class MutationContext(BaseModel):
    model_config = ConfigDict(frozen=True)

    parent: ParentTool
    evidence: Evidence
    version: str  # the version number a candidate gets
    trigger: Trigger
    # time.monotonic() at which the evolution's budget (FITTEST_EVOLUTION_BUDGET_S) is spent: a
    # mutator that waits on something slow (the code mutator's model endpoint) stops by then
    deadline: float | None = None


class Proposal(BaseModel):
    candidates: list[CandidateVersion] = Field(default_factory=list)
    note: str = ""  # why nothing (or what) was proposed, for the report

    @classmethod
    def none(cls, note: str) -> Proposal:
        return cls(note=note)


@runtime_checkable
class Mutator(Protocol):
    name: str
    # Failure classes this mutator answers; empty: it is not tied to one (description, code).
    handles: frozenset[FailureClass]
    cost: int  # among mutators for the same class, cheaper ones are asked first

    def propose(self, ctx: MutationContext) -> Proposal: ...


MutatorFactory = Callable[[MutatorConfig], "Mutator | None"]


class FailureClassMutator:
    """A mutator that answers the failures of the classes it `handles` (retry, timeout, coercion):
    built from the config as every plugin is, it proposes nothing for a call that failed otherwise."""

    name: str
    handles: frozenset[FailureClass]
    cost = 1

    def __init__(self, config: MutatorConfig) -> None:
        self.config = config

    def failures(self, ctx: MutationContext) -> list[FailedRun]:
        """The failures of the evidence this mutator answers."""
        return [f for f in ctx.evidence.failures if f.error_class in self.handles]


def load_mutators(config: MutatorConfig, group: str = ENTRY_POINT_GROUP) -> tuple[list[Mutator], list[str]]:
    """Every mutator the installed packages declare, and a message per plugin that failed to load.

    A plugin that cannot be imported or built is reported, never fatal: one bad package must not
    stop evolution with the others.
    """
    mutators: list[Mutator] = []
    errors: list[str] = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            factory: MutatorFactory = ep.load()
            mutator = factory(config)
        except Exception as exc:  # a plugin's own bug
            errors.append(f"mutator plugin {ep.name} ({ep.value}) failed to load: {type(exc).__name__}: {exc}")
            continue
        if mutator is None:
            continue
        if not isinstance(mutator, Mutator):
            errors.append(f"mutator plugin {ep.name} ({ep.value}) did not return a mutator")
            continue
        mutators.append(mutator)
    for error in errors:
        log.warning(error)
    return mutators, errors


def order_for(mutators: list[Mutator], evidence: Evidence) -> list[Mutator]:
    """The mutators worth asking, in the order to ask them.

    Mutators for the most frequent failure class come first, then those for other classes seen;
    mutators not tied to a class come last, cheapest first (the code mutator is the dearest). A
    mutator for a class that was not seen is not asked.
    """
    classes = evidence.classes()
    rank = {c: i for i, c in enumerate(classes)}

    def position(m: Mutator) -> tuple[int, int, str]:
        if not m.handles:
            return (len(classes) + 1, m.cost, m.name)
        return (min(rank.get(c, len(classes) + 2) for c in m.handles), m.cost, m.name)

    wanted = [m for m in mutators if not m.handles or m.handles & set(classes)]
    return sorted(wanted, key=position)

"""What promotions decide about one call's ranking, after the policy has ranked it.

The policy orders candidates by what outcomes taught; promotions (a trial, `fittest promote`,
`fittest rollback`) decide which version of a namespace goes first. The two meet here, as pure
functions of the call, the ranking and the versions served (`ServedVersions`, which the selector
reads from the state store).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from selection.manifest import tool_key
from selection.models import Candidate, CallRequest


@dataclass
class ServedVersions:
    """What promotions decide for one call: each namespace's version served first, the versions
    promoted (on trial or active) and those rolled back (not tried)."""

    by_namespace: dict[str, str | None] = field(default_factory=dict)
    promoted: set[str] = field(default_factory=set)
    rolled_back: set[str] = field(default_factory=set)


def served_first(request: CallRequest, ranked: list[Candidate], served: ServedVersions) -> list[Candidate]:
    """What `fittest promote`, `rollback` and a trial decide: within a namespace the version it
    serves this call goes before its other versions (the policy still orders the namespaces,
    and the other versions stay as fallbacks), a version rolled back is not tried, and a
    namespace call starts with its namespace's served version. Without this the policy's
    outcomes ranked a rolled-back version with a better record first, and a trial never ran."""
    by_namespace = served.by_namespace
    if not by_namespace and not served.rolled_back:
        return ranked
    kept = [c for c in ranked if c.key not in served.rolled_back]
    by_name: dict[str, list[Candidate]] = defaultdict(list)
    for c in kept:
        by_name[c.manifest.name].append(c)
    queues = {name: iter(sorted(cs, key=lambda c: c.manifest.version != by_namespace.get(name))) for name, cs in by_name.items()}
    reordered = [next(queues[c.manifest.name]) for c in kept]  # each namespace keeps its places
    head = by_namespace.get(request.namespace or "")
    if request.namespace and head:
        reordered.sort(key=lambda c: c.key != tool_key(request.namespace or "", head))
    return reordered


def evolved_first(request: CallRequest, ranked: list[Candidate], served: ServedVersions) -> list[Candidate]:
    """A call retried after its evolution tries the version just promoted before any other."""
    if not request.after_evolution:
        return ranked
    return sorted(ranked, key=lambda c: c.key not in served.promoted)

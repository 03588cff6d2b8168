"""timeout → a longer timeout within the operator's bounds, or a cache in front of the tool.

A version that is merely slow for a class of inputs is fixed by more time; a version that is slow
on inputs that come back again is also helped by remembering their results (a file cache in the
generated wrapper, evolution/wrapper.py). A version that hangs
is not fixed by either, and verification will say so: the replay of the failing input runs out of
the longer time too.
"""

from __future__ import annotations

import json
from collections import Counter

from evolution.models import CandidateVersion
from evolution.mutation import FailureClassMutator, MutationContext, Proposal
from evolution.versioning import evolved_manifest
from evolution.wrapper import wrap
from selection.models import FailureClass

GROWTH = 4.0  # the new timeout is this many times the old one, within the operator's maximum
CACHE_SIZE = 256


class TimeoutMutator(FailureClassMutator):
    name = "timeout"
    handles = frozenset({FailureClass.timeout})

    def propose(self, ctx: MutationContext) -> Proposal:
        parent = ctx.parent.manifest
        timeouts = self.failures(ctx)
        if not timeouts:
            return Proposal.none("no timeout among the failures to fix")
        longer = round(min(self.config.max_timeout_s, 600.0, parent.timeout_s * GROWTH), 3)
        if longer <= parent.timeout_s:
            return Proposal.none(f"timeout_s {parent.timeout_s:g}s is already at the bound {self.config.max_timeout_s:g}s")
        change = f"timeout_s {parent.timeout_s:g}s → {longer:g}s"
        candidates = [
            CandidateVersion(
                mutator=self.name,
                mutation=change,
                manifest=evolved_manifest(parent, ctx.version, timeout_s=longer),
                files=dict(ctx.parent.files),
            )
        ]
        # An input that timed out in calls with different scenarios is one that comes back.
        calls = {(json.dumps(t.input, sort_keys=True), t.scenario) for t in timeouts}
        repeats = Counter(text for text, _ in calls)
        if max(repeats.values()) > 1:
            mutation = f"cache of {CACHE_SIZE} results in front, {change}"
            manifest, files = wrap(ctx.parent, ctx.version, mutation, cache_size=CACHE_SIZE, timeout_s=longer)
            candidates.insert(0, CandidateVersion(mutator=self.name, mutation=mutation, manifest=manifest, files=files))
        return Proposal(candidates=candidates)

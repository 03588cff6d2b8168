"""unavailable → retries with jittered exponential backoff, in generated wrapper code.

The retry policy is written into the evolved version's module (evolution/wrapper.py) where an
operator can read it, and it runs with tenacity. No retry starts once the retry budget (a share of
the version's timeout) is spent, so an upstream that keeps answering "unavailable" ends as a clean
failure inside the timeout; an attempt that hangs still runs into the version's timeout.
"""

from __future__ import annotations

from evolution.models import CandidateVersion
from evolution.mutation import FailureClassMutator, MutationContext, Proposal
from evolution.wrapper import RetryPolicy, wrap
from selection.models import FailureClass

BUDGET_SHARE = 0.7  # of the timeout, for all attempts together
ATTEMPTS = 5


class RetryMutator(FailureClassMutator):
    name = "retry"
    handles = frozenset({FailureClass.unavailable})

    def propose(self, ctx: MutationContext) -> Proposal:
        parent = ctx.parent.manifest
        if not self.failures(ctx):
            return Proposal.none("no unavailable upstream among the failures to fix")
        budget = round(max(0.2, parent.timeout_s * BUDGET_SHARE), 3)
        policy = RetryPolicy(attempts=ATTEMPTS, multiplier_s=0.05, max_wait_s=round(min(1.0, budget / 4), 3), budget_s=budget)
        mutation = policy.describe()
        manifest, files = wrap(ctx.parent, ctx.version, mutation, retry=policy)
        return Proposal(candidates=[CandidateVersion(mutator=self.name, mutation=mutation, manifest=manifest, files=files)])

"""Where a failed call's evolution goes before any mutator is asked.

Every candidate of the call failed, and its namespace may have changed meanwhile. The evolver
decides under the namespace's lock (workers/evolver.py `Evolver.run`); the execution worker decides
the same before it queues the evolution, to end at once a call whose evolution is known to end in a
no_fix (`Evolver.without_evolution`). One rule for both, so that the two cannot drift apart:

- `pinned`: the call is pinned to a version (`version` in its request) and its namespace serves
  another. A pinned call runs its version alone, also when retried: "retried with" the promoted
  version, it would run the pinned one again, fail again on the same input and count the failure
  twice (QA onboarding M1). Nor is the pinned version evolved: its evolution would go on trial
  against the version served.
- `reused`: the namespace serves a version the call did not try (promoted since the call was
  prepared, or before but not tried in it): the call retries with it.
- `evolve`: the version to mend. It is the call's own (`parent`), except when the version its
  namespace serves was held back by its circuit breaker and did not run: that one is evolved, from
  its remembered failures (retrying "with it" would hold it back again and only run the other
  tools once more; QA O).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from selection.manifest import tool_key
from selection.models import CallPlan


@dataclass(frozen=True)
class CallRoute:
    action: Literal["pinned", "reused", "evolve"]
    version: str  # the version the namespace serves (pinned, reused), or the one to evolve


def route_call(plan: CallPlan | None, namespace: str, parent: str, prepared_head: str | None, head: str | None) -> CallRoute:
    """The route of `plan`'s evolution in `namespace`: `parent` is the version the call's failures
    name, `prepared_head` the version the namespace served when the evolution was prepared, and
    `head` the one it serves now (None: its original, never promoted). A job that lost its call
    (`plan` None) is routed as a call that tried nothing."""
    pinned = plan.request.version if plan is not None else None
    if pinned is not None and head is not None and head != pinned:
        return CallRoute("pinned", head)
    tried = {a.version for a in plan.attempts if a.tool == namespace} if plan is not None else set()
    held = plan is not None and head is not None and tool_key(namespace, head) in plan.held_back
    if head is not None and not held and pinned is None and (head != prepared_head or head not in tried):
        return CallRoute("reused", head)
    if held and head is not None:
        return CallRoute("evolve", head)
    return CallRoute("evolve", parent)

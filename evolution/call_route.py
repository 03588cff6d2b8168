"""Where a failed call's evolution goes before any mutator is asked.

Every candidate of the call failed, and its namespace may have changed meanwhile. The evolver
decides under the namespace's lock (workers/evolver.py `Evolver.run`); the execution worker decides
the same before it queues the evolution, to end at once a call whose evolution is known to end in a
no_fix (`Evolver.without_evolution`). One rule for both, so that the two cannot drift apart. It
reads the version the namespace serves first (its promotion's head, else its original):

- `pinned`: the call is pinned to a version (`version` in its request) other than that one. A
  pinned call runs its version alone, also when retried: "retried with" the version served, it
  would run the pinned one again, fail again on the same input and count the failure twice (QA
  onboarding M1). Nor is the pinned version evolved: its evolution would go on trial against the
  version served, and a version rolled back would be served again (QA evolution H1: a call pinned
  to a version rolled back to the original evolved it, and it served 75 % of the calls again).
- `reused`: the call did not try the version served (promoted or rolled back since the call was
  prepared, or before but not tried in it): the call retries with it. A call that failed on a
  version rolled back while it ran retries with the version served now, and does not evolve the
  one rolled back (QA evolution H1).
- `evolve`: the version to mend: the version served, which failed in the call too, or was held
  back by its circuit breaker and did not run (evolved from its remembered failures: retrying
  "with it" would hold it back again and only run the other tools once more; QA O). Never another
  version the call failed on first: evolved, its child would go on trial against it, and serve it
  again (QA recheck N1: a call ran 1.1.0, rolled back meanwhile, then 1.0.0, and 1.1.0 was
  evolved). The call's own `parent` only when the version served is not known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evolution.served_version import head_version
from selection.manifest import tool_key
from selection.models import CallPlan, Promotion


@dataclass(frozen=True)
class CallRoute:
    action: Literal["pinned", "reused", "evolve"]
    version: str  # the version the namespace serves first (pinned, reused), or the one to evolve


def route_call(plan: CallPlan, namespace: str, parent: str, prepared_head: str | None,
               promotion: Promotion | None, original: str | None) -> CallRoute:
    """The route of `plan`'s evolution in `namespace`: `parent` is the version the call's failures
    name, `prepared_head` the head of the namespace's promotion when the evolution was prepared,
    `promotion` its promotion now, and `original` the version it serves where the promotion names
    none (evolution/served_version.py `served_original`; None: unknown)."""
    head = head_version(promotion)
    serving = head or original
    pinned = plan.request.version
    if pinned is not None and serving is not None and serving != pinned:
        return CallRoute("pinned", serving)
    tried = {a.version for a in plan.attempts if a.tool == namespace}
    held = serving is not None and tool_key(namespace, serving) in plan.held_back
    if serving is not None and not held and pinned is None and (head != prepared_head or serving not in tried):
        return CallRoute("reused", serving)
    if serving is not None and (held or serving in tried):
        return CallRoute("evolve", serving)
    return CallRoute("evolve", parent)

"""A description mutator: the scenarios a version succeeded on become its examples.

Selection matches a scenario against a tool's description and examples. A version that does its
job but is described in words callers do not use is found late or not at all; the scenarios it
already served are the words that work. The code is unchanged, so verification replays its
successes and its test cases but not the failing inputs (a description cannot fix those: it is not
proposed while there are any), and the trial judges whether the new words bring better matches.
"""

from __future__ import annotations

from evolution.models import CandidateVersion
from evolution.mutation import MutationContext, MutatorConfig, Proposal
from evolution.versioning import evolved_manifest
from selection.models import FailureClass

MAX_EXAMPLES = 8
MIN_NEW = 3  # room kept for new scenarios when the parent already has many examples


def _key(text: str) -> str:
    return " ".join(text.lower().split())


class DescriptionMutator:
    name = "describe"
    handles: frozenset[FailureClass] = frozenset()  # not tied to a failure class
    cost = 2

    def __init__(self, config: MutatorConfig) -> None:
        self.config = config

    def propose(self, ctx: MutationContext) -> Proposal:
        """Nothing while there is a failing input to fix: the call's, or those remembered for a
        manual or quality trigger. Same code, so a failing input fails again, and the verification
        cannot tell (it replays no failing input of a description, which is for calls that chose the
        tool wrongly); the first verified candidate wins, and the description, cheaper, went on
        trial in place of a fix, the code mutator never asked (QA evolution F3: a crashing tool's
        `fittest evolve` and quality trigger). With no failure to fix, the scenarios it served
        are what an evolution of a working tool can add. A failure whose input was too large to
        keep is one to fix too (`unkept_failures`)."""
        if ctx.trigger == "call" or ctx.evidence.failures or ctx.evidence.unkept_failures:
            return Proposal.none("a description cannot make a failing input succeed")
        parent = ctx.parent.manifest
        seen = {_key(e) for e in parent.examples} | {_key(parent.description)}
        new: list[str] = []
        for run in ctx.evidence.successes:
            text = " ".join(run.scenario.split())
            if text and _key(text) not in seen:
                seen.add(_key(text))
                new.append(text[:300])
        if not new:
            return Proposal.none("no successful scenario that is not already an example")
        keep = parent.examples[: max(0, MAX_EXAMPLES - MIN_NEW)]
        added = new[: MAX_EXAMPLES - len(keep)]
        mutation = f"examples + {len(added)} successful scenario(s): " + "; ".join(repr(s[:60]) for s in added)
        manifest = evolved_manifest(parent, ctx.version, examples=keep + added)
        return Proposal(
            candidates=[
                CandidateVersion(
                    mutator=self.name, mutation=mutation, manifest=manifest, files=dict(ctx.parent.files), changes_behaviour=False
                )
            ]
        )

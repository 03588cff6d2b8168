"""What promotions, trials and exploration decide about one call's ranking, after the policy ranked it.

The policy orders candidates by what outcomes taught; promotions (a trial, `fittest promote`,
`fittest rollback`) decide which version of a namespace goes first. What the policy's evidence
cannot teach is tried first on purpose (`explored_first`): a tool added to a running system, on a
share of the calls it matches (`newcomer_to_try`); a half-open breaker's probe, by a call of a job
its version did (`breaker_probe`); another tool in place of one whose outputs people judge wrong
(`second_opinion`). They meet here, as pure functions of the call, the ranking and what the state
store holds (`ServedVersions`, the newcomers, the half-open breakers), which the selector reads.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from itertools import product
from typing import NamedTuple

from selection.evidence import CandidateEvidence
from selection.job_record import (CLEAR_MATCH, JUDGED_WRONG_MIN, RELIABLE_RUNS, SAME_JOB, failed_the_job, judged_wrong_here,
                                  judged_wrong_throughout, namespace_did_the_job)
from selection.manifest import split_key
from selection.models import Candidate, CallRequest, FailureClass

# A newcomer is tried when its description matches the job within this much cosine of the best
# match among the tools that matched, a tool that does the job about as well as its words say, and
# matches it clearly (selection/job_record.py CLEAR_MATCH).
NEWCOMER_MARGIN = 0.1
# A second opinion that has not done such jobs is asked only where its description is about the job
# at all: QA Y's thermometer tool, which a temperature job needed, matched it 0.41; QA 55a's word
# counter, 0.17 for a hashing job, answered it with word counts, exit 0, until those "successes"
# made it the job's first choice for every call.
SECOND_OPINION_MATCH = 0.3


@dataclass
class ServedVersions:
    """What promotions decide for one call: each namespace's version served first, the versions
    promoted (on trial or active) and those rolled back (not tried). `chance`: of a namespace
    whose version a trial's share drew, the share of calls on which that version is served first
    (the trial's share, or the rest for the version it is tried against)."""

    by_namespace: dict[str, str | None] = field(default_factory=dict)
    promoted: set[str] = field(default_factory=set)
    rolled_back: set[str] = field(default_factory=set)
    chance: dict[str, float] = field(default_factory=dict)
    # Of each version promoted (on trial or active), the version its promotion put it in place of:
    # the version it is tried against (an evolved version's lineage is its manifest's parent_version).
    replaced: dict[str, str] = field(default_factory=dict)
    # Of a namespace in `chance`, the version its trial's draw serves first on the other calls.
    other_side: dict[str, str] = field(default_factory=dict)


def served_first(request: CallRequest, ranked: list[Candidate], served: ServedVersions) -> list[Candidate]:
    """What `fittest promote`, `rollback` and a trial decide: within a namespace the version it
    serves this call goes before its other versions (the policy still orders the namespaces,
    and the other versions stay as fallbacks), a version rolled back is not tried, and a
    namespace call starts with its namespace's served version, then its other versions. Without
    this the policy's outcomes ranked a rolled-back version with a better record first, and a
    trial never ran."""
    by_namespace = served.by_namespace
    if not by_namespace and not served.rolled_back:
        return ranked
    kept = [c for c in ranked if c.key not in served.rolled_back]
    by_name: dict[str, list[Candidate]] = defaultdict(list)
    for c in kept:
        by_name[c.manifest.name].append(c)
    queues = {name: iter(sorted(cs, key=lambda c: c.manifest.version != by_namespace.get(name))) for name, cs in by_name.items()}
    # Each place is its namespace's: the draw that put a version of it there, whichever version goes
    # (QA ops L2: an active promotion's version, first on every call, logged 0.22, its sibling's share).
    places = [(c.manifest.name, c.probability if c.namespace_probability is None else c.namespace_probability) for c in kept]
    reordered = [next(queues[name]) for name, _ in places]  # each namespace keeps its places
    drawn: set[str] = set()
    for c, (name, place_probability) in zip(reordered, places):
        if name not in by_namespace:
            continue
        # A version goes where the policy placed its namespace, on the calls a trial's share gives
        # it (all of them, without a trial), and is logged so (QA V: a trial's version and the
        # version it is tried against both logged 1.0 first, each going first on its share). The
        # share decides the namespace's first place only: which version comes after is then settled
        # (QA recheck N4: every place of the namespace logged the share).
        chance = served.chance.get(name, 1.0) if name not in drawn else 1.0
        c.probability = round(place_probability * chance, 6)
        if chance < 1.0 and c.breakdown is not None:
            c.breakdown.rationale += f"; its version served first on {chance:.0%} of the calls, by a trial's share"
            c.breakdown.extra["trial_share"] = round(chance, 6)
        drawn.add(name)
    reordered = trial_sides_together(reordered, served)
    own = [c for c in reordered if c.manifest.name == request.namespace]
    if own:
        # A namespace call starts with its versions, in the order above (the one it serves first when
        # offered), before any other tool (QA recheck N2: a working version on trial came after two
        # unrelated tools, one of which killed its process).
        own[0].probability = round(served.chance.get(own[0].manifest.name, 1.0), 6)  # first on every call the draw gives it
        reordered = [*own, *(c for c in reordered if c.manifest.name != request.namespace)]
    return reordered


def trial_sides_together(ranked: list[Candidate], served: ServedVersions) -> list[Candidate]:
    """During a trial the version the call is not served first goes right after the one it is: a
    failure of either side falls back to the other, the same tool, before any other tool. In the
    places the policy gave the namespace, a version on trial that failed fell back to a weak match
    of another tool (QA 64d: caps, 0.35 like the job) before the version it is tried against (shout
    1.0.0, 1.00), and that tool's "success" then counted for it."""
    for name, other in served.other_side.items():
        first = next((i for i, c in enumerate(ranked) if c.manifest.name == name), None)
        side = next((c for c in ranked if c.manifest.name == name and c.manifest.version == other), None)
        if first is None or side is None or ranked[first] is side:
            continue
        rest = [c for c in ranked if c is not side]
        ranked = [*rest[:first + 1], side, *rest[first + 1:]]
    return ranked


def evolved_first(request: CallRequest, ranked: list[Candidate], served: ServedVersions) -> list[Candidate]:
    """A call retried after its evolution tries the version just promoted before any other."""
    if not request.after_evolution:
        return ranked
    return sorted(ranked, key=lambda c: c.key not in served.promoted)


def newcomer_to_try(request: CallRequest, evidence: list[CandidateEvidence], newcomers: Collection[str],
                    runs: int, best_match: float = 0.0, served: ServedVersions | None = None) -> CandidateEvidence | None:
    """The version of a tool added to the running system to try first on this call, if any.

    A tool that comes after others have served for a while has no outcomes, where an incumbent
    that does the job has successes nearby, so the policy never ranks it first and its own
    outcomes never come (QA: a `toml2json` added beside a `universal_convert` that kept
    succeeding ran 0 times in 298 TOML calls). Until it has run `runs` times (FITTEST_TRIAL_SUCCESSES),
    a newcomer whose description matches the job clearly (CLEAR_MATCH) and within
    NEWCOMER_MARGIN of the best match is tried first on FITTEST_TRIAL_SHARE of such calls (the
    selector draws the share); after that its outcomes speak for it, as anyone's. `best_match`:
    the best similarity of the versions that matched but are not candidates (held back by their
    circuit breaker), which the margin counts too (QA K: with the job's tool held back, a newcomer
    for another job came within the margin and was tried first on 7 of 20 calls it refused). Of a
    newcomer with several versions, the one its namespace serves (`served`), and its runs count
    over them all (QA N: wc2's older 0.5.0, a fallback with few runs, was tried first after the
    served 1.0.0 had run its trial's runs). Nor one whose outputs on such jobs people judge wrong
    (`judged_wrong_here`: QA 56a L2, judged wrong 4 times of 4, it was still tried first until its
    runs were used up). Not for a call to a namespace or a version, nor for the retry after an
    evolution, which name what they want."""
    if not newcomers or request.namespace or request.version or request.after_evolution:
        return None
    semantic = [e for e in evidence if e.source == "semantic"]
    if not semantic:
        return None
    best = max(best_match, *(e.similarity for e in semantic))
    ran: dict[str, int] = defaultdict(int)
    for e in evidence:
        ran[e.manifest.name] += e.successes + e.failures
    serves = served.by_namespace if served is not None else {}
    fresh = [e for e in semantic if e.manifest.name in newcomers and ran[e.manifest.name] < runs
             and serves.get(e.manifest.name, e.manifest.version) == e.manifest.version
             and e.similarity >= max(best - NEWCOMER_MARGIN, CLEAR_MATCH) and not judged_wrong_here(e)]
    return max(fresh, key=lambda e: (e.similarity, e.key), default=None)


def tried_first(ranked: list[Candidate], key: str, probability: float, why: str = "as a tool new to the system",
                flag: str = "newcomer_trial") -> list[Candidate]:
    """`ranked` with `key` first, placed there with `probability` (the share of calls that try it),
    as its breakdown says (`why`, and `flag` in its extra); unchanged when it is not ranked. When
    the policy placed it first too, only its probability changes, unless every such call places it
    (probability 1): then the rule, not the draw, is why it is first, and its breakdown says so."""
    chosen = next((c for c in ranked if c.key == key), None)
    if chosen is None:
        return ranked
    if ranked[0] is chosen and probability < 1.0:  # first on the share and on its own draw
        chosen.probability = round(probability + (1.0 - probability) * chosen.probability, 6)
        return ranked
    chosen.probability = round(probability, 6)
    if chosen.breakdown is not None:
        share = "" if probability >= 1.0 else f" ({probability:.0%} of such calls)"
        chosen.breakdown.rationale += f"; tried first {why}{share}"
        chosen.breakdown.extra[flag] = 1.0
    return [chosen, *(c for c in ranked if c is not chosen)]


def passed_over(ranked: list[Candidate], key: str, share: float, kept: float | None = None) -> list[Candidate]:
    """`ranked` of a call on which `key` (a newcomer, a second opinion) could have been tried first
    but its share did not draw it: the candidate the policy placed first got there only on the
    other 1 - share of such calls (`kept`, when the share of calls that keep it first is not that),
    and its logged probability says so (QA K: the incumbent logged 1.0 where it went first on 75% of
    the calls); `key` itself, placed first by the policy, went first on the share too."""
    if ranked:
        first = ranked[0]
        p = first.probability
        kept = 1.0 - share if kept is None else kept
        first.probability = round(share + (1.0 - share) * p if first.key == key else kept * p, 6)
        if first.key != key and first.breakdown is not None:  # QA recheck L-A: explain showed 0.75 with no word why
            first.breakdown.rationale += f"; first on {'the other ' if kept == 1.0 - share else ''}{kept:.0%} of such calls: the rest try {key} first"
    return ranked


def breaker_probe(request: CallRequest, evidence: list[CandidateEvidence], half_open: Collection[str],
                  served: ServedVersions) -> str | None:
    """The half-open version whose probe this call offers first, if any.

    After its breaker's cool-down a version may be tried again, and its probe's outcome closes or
    re-opens the breaker; but a version that failed until its breaker opened has fallen behind the
    tool that took over, and is reached only when that one fails: QA W fixed a broken tool, and
    no call tried it again (first on 0 of 90 calls, its probe never ran). Offered first, the probe
    costs the other calls nothing (the executor passes it over for them) and the call that takes
    it the time of one run, once per cool-down: `max_attempts` does not count it (`CallPlan.probe`).
    Only of a version that did this job before (a success at least SAME_JOB similar), and of a
    call that leaves the order to selection: not for a namespace, a version, the retry after an
    evolution, nor a version its namespace does not serve first."""
    if not half_open or request.namespace or request.version or request.after_evolution:
        return None
    fits = [e for e in evidence
            if e.key in half_open and e.key not in served.rolled_back
            and served.by_namespace.get(e.manifest.name) in (None, e.manifest.version)
            and max(e.success_similarities, default=0.0) >= SAME_JOB]
    return max(fits, key=lambda e: (e.similarity, e.key)).key if fits else None


def probed_first(ranked: list[Candidate], key: str) -> list[Candidate]:
    """`ranked` with the half-open `key` first, as every call places it until its probe has run
    (logged with probability 1), as its breakdown says; unchanged when it is not ranked."""
    return tried_first(ranked, key, 1.0, why="as its circuit breaker's probe (half-open: its cool-down is over)",
                       flag="breaker_probe")


def best_matches(evidence: list[CandidateEvidence], held_back_match: float = 0.0) -> set[str]:
    """The versions whose description is the job's clear best match: at least CLEAR_MATCH, and
    within NEWCOMER_MARGIN of the best match of the versions that matched (`held_back_match`: of
    those held back by their breaker). Their refusal of an input is taken as `does_the_job`'s is,
    before they have done such jobs (`Candidate.callers_mistake`): the input goes on only to the
    versions that do such jobs, or clearly match them, and the refusal demotes nothing. Unlike a
    refusal by a version that does the job, a success of another on the input counts, and a call
    that ends with it evolves the version (input coercion and defaults), unless it has succeeded
    RELIABLE_RUNS times at anything (`proven`): it may be the one that is wrong
    (selection/call_endings.py `refused_by_a_doer`). QA refused-input: counted against it,
    six such refusals in a row left the word counter first for the right inputs too.

    QA recheck F5: on a fresh stack, a hashing call without its `algorithm` was refused by
    hash_text (0.75 similar, no record yet); the refusal counted against hash_text, word_stats
    (0.23) took the input and "succeeded" with a word count, and every later hashing call, with
    the right input, went to word_stats."""
    best = max([held_back_match, *(e.similarity for e in evidence)])
    return {e.key for e in evidence if e.similarity >= max(CLEAR_MATCH, best - NEWCOMER_MARGIN)}


def second_opinion(request: CallRequest, ranked: list[Candidate], evidence: list[CandidateEvidence],
                   half_open: Collection[str] = ()) -> str | None:
    """The candidate to try first in place of the first one on a share of the calls, if any.

    A version whose outputs are judged wrong still ran without an error, so no call falls back
    past it, and the other tools never get outcomes of their own on the job; its earlier
    successes outweigh the judgements, which scale its score by half at most (QA W: 31 of a
    tool's outputs judged wrong, and it stayed first, where another tool did the job). When people
    judge the first candidate's outputs on this job wrong (`judged_wrong_here`), another tool is
    tried first on a share of the calls, and its outcomes, and people's judgements of them, then
    decide: the best placed of those that did such jobs before, else the one whose description
    matches the job best (the policy's order of tools with no outcomes on the job is not about the
    job: QA X and QA Y saw a currency tool placed second for a temperature job), if it matches it
    SECOND_OPINION_MATCH at least (one that fails the job is not asked again, but one that runs
    without an error on any input would "succeed" at it),
    each namespace by the version it serves (QA ops: a fallback version of sort_numbers, tied with
    the served one, was asked), but not one that
    failed them and never did one (QA X: it refused the job 3 times before the tool that could do
    it was asked), nor a half-open one, whose probe another call may hold (QA X: logged as tried
    first, and passed over). Not for a call that names a namespace or a
    version, nor for the retry after an evolution."""
    if not ranked or request.namespace or request.version or request.after_evolution:
        return None
    by_key = {e.key: e for e in evidence}
    first = by_key.get(ranked[0].key)
    if first is None or not judged_wrong_here(first):
        return None
    placed: dict[str, CandidateEvidence] = {}  # each namespace's first placed: the version it serves
    for c in ranked[1:]:
        if (e := by_key.get(c.key)) is not None:
            placed.setdefault(e.manifest.name, e)
    others = [e for e in placed.values() if e.manifest.name != first.manifest.name
              and e.key not in half_open and not failed_the_job(e) and not judged_wrong_here(e)]
    matching = [e for e in others if e.similarity >= SECOND_OPINION_MATCH]
    chosen = next((e for e in others if namespace_did_the_job(e)), None) or max(matching, key=lambda e: e.similarity, default=None)
    return None if chosen is None else chosen.key


def second_opinion_share(ranked: list[Candidate], evidence: list[CandidateEvidence], share: float) -> float:
    """The share of calls on which the second opinion goes first: every call once people judged the
    first candidate's latest outputs here all wrong (`judged_wrong_throughout`), else `share`."""
    first = next((e for e in evidence if ranked and e.key == ranked[0].key), None)
    return 1.0 if first is not None and judged_wrong_throughout(first) else share


# Failures that say a version was down or broke on an input, not that it does the job wrong (as stored: the values).
OUTAGE_CLASSES = frozenset(c.value for c in (FailureClass.unavailable, FailureClass.timeout, FailureClass.crash))
OUTAGES_RETRIED = RELIABLE_RUNS  # failures of a clear best match nearby, all outages, past which it is not retried first


class BestMatchAgain(NamedTuple):
    key: str
    does_the_job: bool  # it did such jobs since (RELIABLE_RUNS confirmed successes): first on every call
    after_outage: bool = True  # it fell behind by outages; else it never did, and the first does no such job
    evolved: bool = False  # a version evolved from one that failed here, with no failure of its own: first on every call it serves
    judged: bool = False  # its failures here are outages and an output judged wrong once, and the first does no such job

    @property
    def every_call(self) -> bool:
        """Whether it goes first on every call, not on a share of them."""
        return self.does_the_job or self.evolved or self.judged


def evolved_from(version: CandidateEvidence, versions: list[CandidateEvidence], replaced: Mapping[str, str]) -> set[str]:
    """The keys of the versions (among `versions`, one namespace's) that `version` was made to
    replace: its parent and theirs, or the version its promotion put it in place of (`replaced`:
    QA 50c, a fixed version given as a manifest's new version has no parent)."""
    by_version = {e.manifest.version: e for e in versions}
    ancestors: set[str] = set()
    current: CandidateEvidence | None = version
    while current is not None and (parent := current.manifest.parent_version or replaced.get(current.key)) is not None:
        current = by_version.get(parent)
        if current is None or current.key in ancestors or current.key == version.key:
            break
        ancestors.add(current.key)
    return ancestors


def best_match_again(request: CallRequest, ranked: list[Candidate], evidence: list[CandidateEvidence],
                     best: Collection[str], half_open: Collection[str] = (),
                     replaced: Mapping[str, str] | None = None) -> BestMatchAgain | None:
    """The job's clear best match to try first again in place of the first candidate, if any.

    One failure of the tool that clearly matches a job, at a cold start, pushes it behind a tool
    that matches the job far less, and a success of that one there ranks it first for the job from
    then on: it ran without an error, which is not doing what was asked (QA integration H1: one
    HTTP 500 of a text reverser, 1.00 similar, and every later "reverse this string" call was
    answered by a word counter, 0.25 similar, with status success; a dedupe tool's crash on one
    input handed its job to the word counter the same way). An outage, a timeout or a crash says
    the version was down or broke on an input, not that it does the job wrong (the breaker and its
    probe deal with a version that stays down). So when the first candidate is not a clear best
    match itself, and a clear best match (`best`) failed here by such failures, its namespace is
    tried first again: on a share of the calls while it failed here only by them, fewer than
    OUTAGES_RETRIED times, its confirmed successes then teach; and on every call once they make it
    one that does the job, as long as they outnumber its failures here (QA recheck H-A: counted
    without its successes, three isolated HTTP 500s among 13 successes ended the rule, and the weak
    tool's unconfirmed successes, 13 from the calls it kept, had the job again).

    Counted over the namespace's versions, and served by the first placed of them that people do
    not judge wrong here nor is half-open (its probe is the breaker's): QA ops H1 saw a negation
    tool time out once at onboarding, an evolved version go on trial beside it, and the two split
    the successes that would have made it one that does the job; and a squaring tool, 0.42 or 0.63
    like the job, kept it. Whether the first candidate's successes are confirmed does not stop it:
    one 0.63 like a cube job is confirmed by its first success, which the rule then never undid (11
    of 11 "cube of 12" calls answered with a square).

    Without an outage, a clear best match that does the job here goes first on every call in place
    of a first candidate with no confirmed success on it (QA recheck N11: two new character counters,
    0.71 like the job, did it 4 times on their newcomer's share, and a text reverser 0.37 like it
    kept 75 % of the calls by its 9 unconfirmed successes, answering with a reversed string). Not
    for a call that names a namespace or a version, nor for the retry after an evolution.

    The failures of the versions that the one served was made to replace (`evolved_from`) are not
    its own: it was made, and verified on them, to fix them. While it has none of its own here it
    goes first on every call whose draw serves it (a trial's share of them, or all once promoted), as long as
    the first candidate does no such job or its tool fell behind by outages (QA 50: a text reverser
    timed out 4 times, a word counter took the job, and its evolved version, which did it 4 times
    out of 4 on its trial's share, was never tried again: its parent's 4 timeouts matched its 4
    successes, and its trial, one success short, never ended)."""
    if not ranked or request.namespace or request.version or request.after_evolution:
        return None
    by_key = {e.key: e for e in evidence}
    first = by_key.get(ranked[0].key)
    if first is None or first.key in best:
        return None
    # a confirmed success of its tool here, any version: a new version on trial has none of its own (review)
    first_does = any(s >= SAME_JOB for e in evidence if e.manifest.name == first.manifest.name for s in e.doing_similarities)
    namespaces: dict[str, list[CandidateEvidence]] = {}  # each namespace's versions, in the order they are placed
    for c in ranked[1:]:
        if (e := by_key.get(c.key)) is not None and e.manifest.name != first.manifest.name:
            namespaces.setdefault(e.manifest.name, []).append(e)
    for versions in namespaces.values():
        served = [e for e in versions if e.key not in half_open and not judged_wrong_here(e)]
        if not served or not any(e.key in best for e in versions):
            continue
        # Not of a version the draw did not serve (its parent, judged wrong here, passed over: QA 50c
        # saw a trial's version first on every call, logged 1.00 on the share its parent was served).
        fixed = evolved_from(served[0], versions, replaced or {}) if served[0] is versions[0] else set()
        own = [e for e in versions if e.key not in fixed]
        fell_over = any(s >= SAME_JOB for e in versions for s in e.outage_similarities)  # its tool's, any version
        outages = sum(s >= SAME_JOB for e in own for s in e.outage_similarities)
        failures = sum(s >= SAME_JOB for e in own for s in e.failure_similarities)
        doing = sum(s >= SAME_JOB for e in versions for s in e.doing_similarities)
        evolved = not failures and any(s >= SAME_JOB for e in versions if e.key in fixed for s in e.failure_similarities)
        if doing >= RELIABLE_RUNS and failures < doing and (fell_over or not first_does):
            return BestMatchAgain(served[0].key, True, after_outage=bool(outages), evolved=evolved)
        if evolved and (fell_over or not first_does):
            return BestMatchAgain(served[0].key, False, after_outage=False, evolved=True)
        if outages and outages == failures < OUTAGES_RETRIED:
            return BestMatchAgain(served[0].key, False)
        # One output judged wrong is a failure here, and put a tool that matches the job far less, with
        # no record, first on 17 of the next 22 calls, answering a word count with reversed words, each
        # a success (QA 64c). The clear best match goes first again; judged wrong once more (any version
        # of it), people have said so twice, and the second opinions decide (`judged_wrong_here`).
        judged = sum(j.wrong and j.similarity >= SAME_JOB for e in own for j in e.judged_outputs)
        if 0 < judged < JUDGED_WRONG_MIN and outages + judged == failures and not first_does:
            return BestMatchAgain(served[0].key, False, after_outage=False, judged=True)
    return None


def on_side(ranked: list[Candidate], name: str, version: str) -> list[Candidate]:
    """`ranked` as a call on which a trial's draw serves `version` of namespace `name` first: its
    versions swap places, the other namespaces keep theirs."""
    places = [c for c in ranked if c.manifest.name == name]
    swapped = iter(sorted(places, key=lambda c: c.manifest.version != version))
    return [next(swapped) if c.manifest.name == name else c for c in ranked]


def firsts_over_sides(request: CallRequest, ranked: list[Candidate], evidence: list[CandidateEvidence], share: float,
                      best: Collection[str], half_open: Collection[str], served: ServedVersions) -> dict[str | None, float]:
    """Of the calls like this one, over each side of the trials' draws, the share on which
    `best_match_again` tries each version first, and (None) the share on which the first candidate
    stays first. This call's side alone does not tell it (QA 50d F3: a tool passed over logged 0.75
    where it went first on 0.5625 of the calls, the trial's version going first on every call its
    draw served; the logged first places added up to 1.19). The trial draw and the share's draw
    are apart (each salted by its own name), so their weights multiply."""
    name = ranked[0].manifest.name
    # only the trials of a namespace the job clearly matches: `best_match_again` looks at no other
    matched = {split_key(key)[0] for key in best}
    trials = [(n, served.chance[n], other) for n, other in served.other_side.items()
              if n != name and n in matched and any(c.manifest.name == n for c in ranked)]
    firsts: dict[str | None, float] = defaultdict(float)
    for sides in product(*(((None, chance), (other, 1.0 - chance)) for _, chance, other in trials)):
        side = ranked
        for (n, _, _), (version, _) in zip(trials, sides):
            side = on_side(side, n, version) if version is not None else side
        weight = math.prod(w for _, w in sides)
        again = best_match_again(request, side, evidence, best, half_open, served.replaced)
        tried = 0.0 if again is None else 1.0 if again.every_call else share
        if again is not None:
            firsts[again.key] += weight * tried
        firsts[None] += weight * (1.0 - tried)
    return {key: round(value, 6) for key, value in firsts.items()}


def explored_first(request: CallRequest, ranked: list[Candidate], evidence: list[CandidateEvidence], share: float,
                   drawn: Callable[[str], bool], *, newcomer: str | None, passed: str | None,
                   probe: str | None, half_open: Collection[str] = (), best: Collection[str] = (),
                   served: ServedVersions | None = None) -> list[Candidate]:
    """`ranked` with what this call tries before the policy's first choice, to learn what the
    policy's evidence cannot tell: a newcomer its share drew (`newcomer`; `passed`: one it did
    not), else a half-open breaker's probe (`breaker_probe`), else on `share` of the calls a
    second opinion in place of a version people judge wrong here (`second_opinion`; `half_open`:
    the versions whose breaker is half-open), else the job's clear best match again after an
    outage or a crash (`best_match_again`; `best`: the clear best matches, `best_matches`), on
    `share` of the calls or, once it does the job, on all (`served`: what promotions decide for the
    call). Each is logged with the probability of its place, over both sides of a trial's draw.
    `drawn(salt)`: whether this call falls in the share of calls for `salt` (evolution/served_version.py
    `in_share`, the same draw for the same call)."""
    if newcomer is not None:
        # The calls its share does not draw may try it first too (the best match again, after one
        # output judged wrong): its logged probability is over both (QA 64d: logged, and told, 0.25
        # where 6 of 6 calls tried it first). Worked out on copies of what the placements change (each
        # candidate's probability and breakdown; a deep copy with its manifest took 19 ms for 200).
        copies = [c.model_copy(update={"breakdown": c.breakdown.model_copy(deep=True)}) for c in ranked]
        rest = explored_first(request, copies, evidence, share, drawn, newcomer=None,
                              passed=newcomer, probe=probe, half_open=half_open, best=best, served=served)
        also = rest[0].probability if rest and rest[0].key == newcomer else 0.0
        return tried_first(ranked, newcomer, share + (1.0 - share) * also)
    if passed is not None:
        ranked = passed_over(ranked, passed, share)
    if probe is not None:
        return probed_first(ranked, probe)
    other = second_opinion(request, ranked, evidence, half_open)
    if other is not None:
        asked = second_opinion_share(ranked, evidence, share)
        if asked >= 1.0 or drawn(f"second_opinion:{ranked[0].key}"):
            # of the calls that serve its version (QA 56a M1: each side of a trial was logged 0.25)
            return tried_first(ranked, other, asked * _serves(ranked, other),
                               "in place of a tool whose outputs people judged wrong on such jobs", "second_opinion")
        return passed_over(ranked, other, asked)
    served = served or ServedVersions()
    again = best_match_again(request, ranked, evidence, best, half_open, served.replaced)
    # over both sides of a trial's draw, when one is drawn (a dictionary lookup otherwise)
    firsts = firsts_over_sides(request, ranked, evidence, share, best, half_open, served) if served.other_side else None
    if again is None:
        if firsts is None:
            return ranked
        kept = firsts.pop(None, 1.0)
        instead = max(firsts, key=firsts.__getitem__, default=None)
        return passed_over(ranked, instead, share, kept) if instead is not None and kept < 1.0 else ranked
    why = ("the job's clear best match, in a version evolved from one that failed here, in place of a tool that "
           "matches the job less" if again.evolved else
           "again: the job's clear best match, one of whose outputs here a person judged wrong, in place of a tool "
           "that matches the job less and has not done it" if again.judged else
           "again: the job's clear best match, whose failures here were outages, timeouts or crashes, in place of a "
           "tool that matches the job less" if again.after_outage else
           "the job's clear best match, which does it here, in place of a tool with no confirmed success on it")
    every = again.every_call
    if every or drawn(f"best_match_again:{ranked[0].key}"):
        if firsts is not None:
            probability = firsts.get(again.key, 0.0)
        else:
            probability = (1.0 if every else share) * _serves(ranked, again.key)
        return tried_first(ranked, again.key, probability, why, "best_match_again")
    return passed_over(ranked, again.key, share, None if firsts is None else firsts.get(None, 0.0))


def _serves(ranked: list[Candidate], key: str) -> float:
    """The share of calls that serve `key`'s version first in its namespace: a trial's share of
    them, as `served_first` noted, for either side of the trial; 1 without one."""
    chosen = next((c for c in ranked if c.key == key), None)
    return chosen.breakdown.extra.get("trial_share", 1.0) if chosen is not None and chosen.breakdown is not None else 1.0

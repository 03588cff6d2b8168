"""Searches of past records that their limit cut, completed with the tools the cut left out.

A search of the nearest records returns the `limit` nearest; when one tool's many records are the
nearest, the others' records never count, though they did the same job. Pure: the search is a
callable, so the rules are tested without a vector store (workers/selector.py runs them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from selection.ports import VectorHit
from selection.job_record import RELIABLE_RUNS, SAME_JOB

# A search whose every hit is this similar is full of repeats of this very scenario (a service that
# sends the same words on every call): its tools' older records fill it and leave out the rest. At
# 0.95 near paraphrases counted too, and the bench's stream lost 5 queries of its 2nd half (0.8018);
# at 0.99 it ranked 0.8035, against 0.8028 without the rule.
CROWDED_SIMILARITY = 0.99


def with_the_crowded_out(hits: list[VectorHit], limit: int, keys: Iterable[str],
                         search: Callable[[list[str]], list[VectorHit]]) -> list[VectorHit]:
    """`hits` of a search that `limit` cut, and, when every one of them repeats this scenario
    (CROWDED_SIMILARITY), those of the tools in `keys` that they left out or gave under a fair
    share of the places: searched again among those tools alone. Without it the tool that had
    served a repeated job filled the nearest records with its old ones, and the successes of the
    tool that took over, its failures' fallback, never counted (QA W: 3 of 32 successes nearby
    after ~50 calls it served, and the failing tool first on 36 of 36 calls)."""
    if len(hits) < limit or hits[-1].score < CROWDED_SIMILARITY:
        return hits
    share = Counter(h.payload["tool"] for h in hits)
    fair = limit // max(1, len(share) + 1)
    return _searched_again(hits, sorted(k for k in set(keys) if share[k] < fair), search)


def with_the_doers_crowded_out(hits: list[VectorHit], limit: int, keys: Iterable[str],
                                search: Callable[[list[str]], list[VectorHit]]) -> list[VectorHit]:
    """`hits` of a search that `limit` cut, and, when its last place is still the same job
    (SAME_JOB similar), the successes at least that similar of the versions in `keys` that have
    fewer than RELIABLE_RUNS of them there: searched again among those versions alone. Whether a
    version does the job (selection/job_record.py `does_the_job`) is read from these hits, and a
    tool's many nearer successes would hide another's three, whose refusal of a bad input then
    counted against it as its own failure."""
    if len(hits) < limit or hits[limit - 1].score < SAME_JOB:
        return hits
    # an unconfirmed success says nothing of whether its version does the job (`does_the_job`)
    counted = Counter(h.payload["tool"] for h in hits if h.score >= SAME_JOB and not h.payload.get("unconfirmed"))
    return _searched_again(hits, sorted(k for k in set(keys) if counted[k] < RELIABLE_RUNS), search, floor=SAME_JOB)


def _searched_again(hits: list[VectorHit], among: list[str], search: Callable[[list[str]], list[VectorHit]],
                    floor: float = 0.0) -> list[VectorHit]:
    """`hits`, then those of a search among the tool versions `among` alone that are not in them
    already and at least `floor` similar."""
    if not among:
        return hits
    seen = {h.id for h in hits}
    return hits + [h for h in search(among) if h.id not in seen and h.score >= floor]

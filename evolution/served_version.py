"""Which version of a namespace a call is served, from its promotion: the promoted version, its
trial's share of the calls (chosen by a hash of the call id, so one call always lands on the same
side, and a call retried after its own evolution always gets the new version), what a rollback
or a by-hand promotion serves again, and which manifest version goes on trial.

A version that a tool's manifest newly gives it (`manifest_to_trial`) goes on trial against the
version its namespace served until then (evolution/trial.py decides the trial): an operator who
gives a manifest a new version wants it served, and the trial serves it as soon as its outcomes
are no worse. One that arrives older than what the namespace serves stays a fallback
(`kept_served`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from selection.manifest import ToolManifest, tool_key
from selection.evidence import CandidateEvidence
from selection.models import CallRequest, Promotion
from selection.registry import ToolRegistry
from selection.serving import ServedVersions


def in_share(call_id: str, salt: str, share: float) -> bool:
    """Whether a call falls into a `share` of traffic; the same call and salt always answer the same."""
    digest = hashlib.sha1(f"{call_id}\0{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def promoted_by_hand(promotion: Promotion | None) -> bool:
    """Whether `fittest promote` decides what the namespace serves now: no trial starts meanwhile,
    and `fittest rollback` undoes it."""
    return promotion is not None and promotion.status == "active" and promotion.by == "operator"


def fallback_version(promotion: Promotion) -> str | None:
    """What is served when the promoted version is not: its parent (None: the original)."""
    parent = promotion.parent_version
    return parent if parent is not None and parent != promotion.original_version else None


def withdrawn_version(promotion: Promotion) -> str | None:
    """The version a promotion takes out of the calls' candidates: the one rolled back, but never
    the original, the fallback of every version (its by-hand promotion rolled back serves the
    version it replaced, and the original stays behind it)."""
    if promotion.status != "rolled_back" or promotion.evolved_version == promotion.original_version:
        return None
    return promotion.evolved_version


def withdrawn_versions(history: Sequence[Promotion], current: Promotion) -> set[str]:
    """The versions a namespace's promotions (`history`, oldest first) took out of the calls'
    candidates: each one whose latest promotion rolled it back (`withdrawn_version`), unless the
    `current` promotion serves it. The current promotion alone forgot a version rolled back
    before it (QA AA: after `promote 1.1.0; rollback; promote 1.0.0`, 1.1.0 ran as a fallback)."""
    latest = {p.evolved_version: p for p in [*history, current]}
    served = {head_version(current), fallback_version(current)}
    return {v for v, p in latest.items() if withdrawn_version(p) == v and v not in served}


def head_version(promotion: Promotion | None) -> str | None:
    """The newest version a promotion stands for: the promoted one, or after a rollback the one it
    fell back to (None: the original)."""
    if promotion is None:
        return None
    return fallback_version(promotion) if promotion.status == "rolled_back" else promotion.evolved_version


def served_original(promotion: Promotion | None, registry: ToolRegistry, namespace: str) -> str | None:
    """The version a namespace serves where its promotion names none (`head_version` None, "the
    original"): the original its promotion was made against (`original_version`), while a manifest
    gives it, else the registry's original, the lowest version with no parent. A lower version a
    manifest gave after the promotion became the registry's original, and a rollback then served it,
    a version that never ran, while `fittest rollback` said the version served before was served
    again (QA evolution F11: 0.9.0 added beside 1.0.0 and 2.0.0)."""
    if promotion is not None and promotion.original_version in {m.version for m in registry.versions(namespace)}:
        return promotion.original_version
    original = registry.original(namespace)
    return original.version if original is not None else None


def majority_version(promotion: Promotion | None, share: float) -> str | None:
    """The version serving most of a namespace's calls (None: the original): during a trial whose
    `share` is at most half, the version it is tried against, else `head_version`. What a person
    who names a tool without a version means (QA F8: a judgement, and a new description, went to
    the version on trial, serving 25 % of the calls)."""
    if promotion is not None and promotion.status == "on_trial" and share <= 0.5:
        return fallback_version(promotion)
    return head_version(promotion)


def meant_version(promotion: Promotion | None, registry: ToolRegistry, namespace: str, share: float) -> str | None:
    """The version a person who names a tool without a version means (a judgement, a new
    description): the one serving most of its calls (`majority_version`) while a manifest gives
    it, else the original it serves (`served_original`, not a lower version added since, which
    never ran). None: no tool has that name."""
    head = majority_version(promotion, share)
    if head is not None and registry.get(tool_key(namespace, head)) is not None:
        return head
    return served_original(promotion, registry, namespace)


def served_version(promotion: Promotion | None, call_id: str, after_evolution: bool, share: float) -> str | None:
    """The version of a namespace to serve this call first (None: the original)."""
    if promotion is None:
        return None
    if promotion.status == "rolled_back":
        return fallback_version(promotion)
    if promotion.status == "active" or after_evolution or in_share(call_id, promotion.namespace, share):
        return promotion.evolved_version
    return fallback_version(promotion)


def served_chance(promotion: Promotion | None, version: str | None, after_evolution: bool, share: float) -> float:
    """The share of calls on which `served_version` gives `version`, as it gave this call: a
    trial's share for the version on trial, the rest for the version it is tried against, and
    all of them otherwise."""
    if promotion is None or promotion.status != "on_trial" or after_evolution:
        return 1.0
    return share if version == promotion.evolved_version else 1.0 - share


def offered_side(promotion: Promotion | None, version: str | None, chance: float, original: str | None,
                 offered: Collection[str]) -> tuple[str | None, float]:
    """The version a trial's draw gave this call (`version`, served first on `chance` of the calls),
    or, when selection does not offer it (deprecated since, or held back by its breaker) and does
    offer the trial's other side, that side on every call: a namespace whose one version is not
    served has one version to serve (QA onboarding H2: with 1.0.0 deprecated during 1.1.0's trial,
    the draw still gave 1.0.0 75 % of the calls, and a call naming the namespace went to another
    tool on those calls). `original`: the version a trial without a parent is tried against."""
    if promotion is None or promotion.status != "on_trial" or version in offered:
        return version, chance
    other = trial_other_side(promotion, version, original)
    return (other, 1.0) if other is not None and other in offered else (version, chance)


def trial_other_side(promotion: Promotion, version: str | None, original: str | None) -> str | None:
    """Of a trial, the version its draw gives the calls it does not give `version`: the version on
    trial, or the one it is tried against (its parent, else `original`)."""
    return promotion.evolved_version if version != promotion.evolved_version else (fallback_version(promotion) or original)


def served_versions(request: CallRequest, evidence: Sequence[CandidateEvidence], promotions: Mapping[str, Promotion | None],
                    withdrawn: Mapping[str, Collection[str]], registry: ToolRegistry, share: float) -> ServedVersions:
    """What the promotions of a call's candidates decide for it (selection/serving.py
    `served_first` applies it): the version each namespace among the candidates serves this call,
    the promoted one (or its trial's share of the calls, or after a rollback the version it fell
    back to), else the original; and the versions rolled back (`withdrawn`, by namespace). Nothing
    for a call that asked for one version."""
    found = ServedVersions()
    if request.version:
        return found
    for p in promotions.values():
        if p is not None and p.status != "rolled_back":
            found.promoted.add(tool_key(p.namespace, p.evolved_version))
            # what an evolution or a manifest's new version was made to replace; not an operator's
            # choice of a version, an older one maybe (QA 50d: 1.0.0 promoted by hand was excused 1.1.0's failures)
            if p.parent_version is not None and p.parent_version != p.evolved_version and p.by != "operator":
                found.replaced[tool_key(p.namespace, p.evolved_version)] = p.parent_version
    for name, versions in withdrawn.items():
        found.rolled_back |= {tool_key(name, v) for v in versions}
    # Only a namespace with several versions among the candidates, or the one called, has an order to keep.
    candidates = Counter(e.manifest.name for e in evidence)
    for name in [n for n, count in candidates.items() if count > 1 or n == request.namespace]:
        promotion = promotions.get(name)
        version = served_version(promotion, request.call_id, request.after_evolution, share)
        original = served_original(promotion, registry, name)
        chance = served_chance(promotion, version, request.after_evolution, share)
        offered = {e.manifest.version for e in evidence if e.manifest.name == name}
        found.by_namespace[name], found.chance[name] = offered_side(promotion, version or original, chance, original, offered)
        if promotion is not None and found.chance[name] < 1.0:
            other = trial_other_side(promotion, found.by_namespace[name], original)
            if other is not None and other in offered:
                found.other_side[name] = other
    return found


def kept_served(versions: Sequence[ToolManifest], current: Promotion | None,
                arrived: Collection[str]) -> ToolManifest | None:
    """The version a namespace goes on serving when the tools watch brings an older version of its
    manifest (`arrived`: the keys it just served; `versions` lowest first). With no promotion
    recorded a namespace serves its original, the lowest version, so the older one would take the
    place of the newest, which would then go on trial against it (QA M: fast_sort 0.5.0, dropped
    beside the 1.0.0 that had served 20 calls, served 3 of the next 6). None when a promotion
    decides already, or when the newest version is among those that arrived."""
    manual = [m for m in versions if m.parent_version is None]
    if current is not None or len(manual) < 2 or manual[-1].key in arrived:
        return None
    return manual[-1] if any(m.key in arrived for m in manual[:-1]) else None


def served_before(versions: Sequence[ToolManifest], current: Promotion | None, arrived: Collection[str]) -> str:
    """The version a namespace served before the versions in `arrived` (the keys the tools watch
    just served; `versions` lowest first), which a manifest's new version goes on trial against:
    the promotion's, or without one the original of the versions that were there already. An older
    and a newer version arriving in one look made the older one the parent of the newer one's trial,
    and so served on the rest of the calls, and after a rollback (QA N: word_stats 0.5.0 and 1.1.0
    dropped beside the 1.0.0 that served; 0.5.0 then served 17 of 20 calls). At the start nothing is
    known to have arrived: the original."""
    manual = [m for m in versions if m.parent_version is None]
    if current is not None:
        return head_version(current) or manual[0].version
    before = [m for m in manual if m.key not in arrived]
    return (before or manual)[0].version


def manifest_to_trial(versions: Sequence[ToolManifest], current: Promotion | None,
                      history: Sequence[Promotion]) -> ToolManifest | None:
    """The version of a namespace to put on trial because its manifest gave it: the newest
    version no evolution made (`versions` lowest first), when it is not the original and has never
    been promoted (on trial, active or rolled back: it competes once; `fittest promote` serves it
    after that). None while another trial runs (that one is decided first), and while an operator's
    `fittest promote` decides what the namespace serves."""
    manual = [m for m in versions if m.parent_version is None]
    if len(manual) < 2 or (current is not None and current.status == "on_trial") or promoted_by_hand(current):
        return None
    newest = manual[-1]
    promoted = {p.evolved_version for p in history} | ({current.evolved_version} if current is not None else set())
    return None if newest.version in promoted else newest

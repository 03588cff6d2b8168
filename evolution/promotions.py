"""Changing which version of a namespace is served: on trial, activated, rolled back, by hand.

Every change is one atomic operation of the state store (`promote`, or `promote_if` when it must
not overwrite a change made meanwhile) and one changelog entry. The evolution worker promotes on
trial, the memory worker concludes trials (workers/trials.py) and ends those of removed versions,
and the CLI rolls back or promotes by hand, all through here. Written against the ports
(selection/ports.py `Promotions`, evolution/ports.py `Changelog`), so the rules run on the
in-memory stores of the unit tests as on Redis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable
from typing import Literal

from evolution.models import ChangelogEntry
from evolution.ports import Changelog
from evolution.served_version import (fallback_version, head_version, kept_served, manifest_to_trial,
                                      promoted_by_hand, served_before, served_original)
from evolution.trial import Verdict
from selection.manifest import ToolManifest, split_key, tool_key
from selection.models import Promotion
from selection.ports import Newcomers, Promotions, StateStore
from selection.registry import ToolRegistry


log = logging.getLogger("fittest.evolution")

BY_HAND_TRIES = 5  # reads of the promotion a by-hand change is made from, when others change it meanwhile
STATUSES = ("on_trial", "active", "rolled_back")  # a promotion's every status: for a change of version only


class PromotionError(ValueError):
    """A by-hand change that cannot be made; the message says why."""


class PromotionChanged(PromotionError):
    """A by-hand change that met another change made meanwhile: nothing wrong with what was asked,
    so the CLI ends as for something outside the command (exit 1), not as a refusal (exit 2)."""


class AlreadyPromoted(PromotionError):
    """A by-hand promotion of the version a by-hand promotion serves already: nothing to change,
    nor to log (QA evolution L2: it was logged as a change "in place of" that very version), and
    nothing wrong with asking, so the CLI ends well (exit 0)."""


def promote_on_trial(
    state: StateStore,
    ledger: Changelog,
    new: ToolManifest,
    parent: ToolManifest,
    original_version: str,
    *,
    before: Promotion | None,
    reason: str,
    mutation: str,
    job_id: str,
    trigger: str,
    elapsed_s: float | None = None,
) -> Promotion | None:
    """Serve `new` on trial, unless the version its namespace serves changed since the evolution
    read `before` (None: no promotion then); it starts with its parent's quality. An operator's
    `fittest promote` during an evolution was overwritten by its end (QA P); a trial's verdict
    meanwhile is not a change of version and does not stop it. None when not promoted."""
    quality = state.stats([parent.key])[parent.key].quality
    state.set_quality(new.key, quality)
    # Evolved from the version on trial: that trial is interrupted, not won, and goes on if the new
    # version rolls back; before, the version on trial was then served as active, never having won
    # its trial, with no changelog entry, and no rollback could undo it (QA evolution F4).
    interrupted = (_kept(before, RESTORES_KEPT) if before is not None and before.status == "on_trial"
                   and before.evolved_version == parent.version else None)
    # Evolved by hand from a version its namespace does not serve (an older one, one rolled back):
    # tried against the version served, which a rollback serves again. Tried against its parent, it
    # put that version back on the trial's other 75 % of the calls and the served one out of them
    # (QA 50d: a broken original back in place of the active 1.1.0; a rolled-back 1.2.0 made active
    # by the rollback of its child). Evolved from the version on trial, it is tried against what that
    # trial was against: tried against its parent, the version that was losing its trial served the
    # other 75 % in place of the one it was tried against, and the child's win then replaced that one
    # without a word (QA 65b: caps_text 2.0.0, 0/2 on its trial, evolved by hand into a 2.1.0 whose
    # description alone changed; 1.0.0 served no call after, and 2.1.0 won against 2.0.0's rate).
    against = parent.version
    if interrupted is not None:
        against = (fallback_version(before) or original_version) if before is not None else against
    elif trigger == "manual":
        against = (fallback_version(before) if before is not None and before.status == "on_trial"
                   else head_version(before)) or original_version
    promotion = Promotion(
        namespace=new.name,
        evolved_version=new.version,
        original_version=original_version,
        parent_version=against,
        reason=reason[:500],
        mutation=mutation[:500],
        status="on_trial",
        resumes=interrupted or served_promotion(before),
    )
    if not state.promote_if(promotion, before.evolved_version if before else None, STATUSES):
        return None
    ledger.log(
        ChangelogEntry(
            namespace=new.name, event="promoted", version=new.version, parent=parent.version, mutation=mutation,
            reason=f"on trial with quality {quality:.2f} inherited from {parent.key}"
                   + (f", against {tool_key(new.name, against)}, which its namespace serves" if against != parent.version else ""),
            job_id=job_id, trigger=trigger,
            elapsed_s=elapsed_s,
        )
    )
    return promotion


def note_newcomers(state: Newcomers, registry: ToolRegistry, arrived: Collection[str] = ()) -> list[str]:
    """Remember the namespaces the registry serves; those added to a store that knew others are
    newcomers, which selection tries first on a share of the calls they match until they have run
    FITTEST_TRIAL_SUCCESSES times (selection/serving.py `newcomer_to_try`), and so are those whose
    original the tools watch just replaced (`renewed_originals`; `arrived`: the keys it just
    served). Run as the memory worker starts (a tool that came while no worker watched) and
    whenever the tools watch serves a version."""
    now = time.time()
    found = state.note_namespaces(registry.namespaces(), now)
    renewed = renewed_originals(registry, arrived, found)
    if renewed:
        state.renew_newcomers(renewed, now)
    for namespace in found + renewed:
        what = "is new to the running system" if namespace in found else "serves a new original version"
        log.info("%s %s: tried first on a share of the calls it matches", namespace, what,
                 extra={"event": "tool_newcomer", "namespace": namespace})
    return found + renewed


def renewed_originals(registry: ToolRegistry, arrived: Collection[str], new: Collection[str]) -> list[str]:
    """The namespaces, known before (not `new`), whose original is now a version that just arrived
    (`arrived`): a manifest edited in place to a new version, served without a trial as the
    namespace's original. It has no outcomes, where the tools that did its jobs meanwhile have
    successes, so the policy never ranked it first (QA 63b: a list tidier that crashed on every call,
    fixed as 1.0.1 in its manifest, 0.94 like the job, was tried first on 0 of the next 30 calls): it
    is a newcomer again. (A namespace whose versions have run FITTEST_TRIAL_SUCCESSES times, as one
    removed and put back, is not tried for it: `newcomer_to_try` counts their runs.)"""
    return sorted({namespace for key in arrived if (namespace := split_key(key)[0]) not in new
                   and (original := registry.original(namespace)) is not None and original.key == key})


MANIFEST_MUTATION = "new manifest version"  # the mutation of a version a manifest gave, not an evolution


def retire_removed_manifest_versions(state: Promotions, ledger: Changelog, registry: ToolRegistry,
                                     namespaces: Iterable[str], removed: Collection[str] = ()) -> list[Promotion]:
    """Roll back the promotion (on trial, or activated) of a version a manifest gave that is served
    no more: its manifest left the tools directory, or now names another version; and of an evolved
    version among `removed` (the keys the tools watch just stopped serving, or a start found evolved
    from a version no longer there). Selection serves what the namespace served before it already;
    this makes the promotion say so. Otherwise a trial of such a version was never decided (no call
    runs it), so no later version of the manifest went on trial, and `fittest show`, `describe` and
    `evolve` named a version that no longer exists (QA; QA 64c: `fittest health` took an evolved one
    for a lost evolved directory). One read of every promotion; other evolved versions are left
    alone (a worker that has not loaded one yet would not find it in its registry)."""
    # A namespace none of whose versions is served keeps its manifest versions' promotions (put back,
    # they serve as before); an evolved version removed is looked at whatever the namespace has left
    # now: the tools watch drops a manifest edited to another version before it serves the new one.
    names = [ns for ns in dict.fromkeys(namespaces)
             if registry.original(ns) is not None or any(split_key(key)[0] == ns for key in removed)]
    retired = []
    for namespace, current in state.promotions(names).items():
        if current is None or current.status == "rolled_back" or (key := tool_key(namespace, current.evolved_version)) in registry:
            continue
        evolved = current.mutation != MANIFEST_MUTATION
        if (evolved and key not in removed) or (not evolved and registry.original(namespace) is None):
            continue
        reason = f"{key} is no longer served: {'the version it evolved from' if evolved else 'its manifest'} left the tools directory"
        new = current.model_copy(update={"status": "rolled_back", "reason": reason, "promoted_at": time.time()})
        if not state.promote_if(new, current.evolved_version, [current.status]):
            continue  # changed meanwhile
        ledger.log(ChangelogEntry(namespace=namespace, event="rolled_back", version=current.evolved_version,
                                  parent=current.parent_version, reason=reason))
        log.info("%s", reason, extra={"event": "manifest_version_retired", "tool": tool_key(namespace, current.evolved_version)})
        retired.append(new)
    return retired


def unseen_versions(state: StateStore, registry: ToolRegistry, namespaces: Iterable[str]) -> set[str]:
    """At the start, what the tools watch's `arrived` says while the workers run: of each namespace
    whose manifests give several versions, those that never ran while another one did, so came
    while no worker watched. Without it an older version dropped in while the stack was down became
    the namespace's original at the restart and served its calls, the version that had served them
    going on trial against it (QA N: hash_text 0.5.0 beside the 1.0.0 that had run 97 times served
    14 of the next 20 calls). None of a namespace whose versions never ran: which came later is
    not known then."""
    unseen: set[str] = set()
    for namespace in sorted(set(namespaces)):
        manual = [m.key for m in registry.versions(namespace) if m.parent_version is None]
        if len(manual) < 2:
            continue
        ran = {key for key, stats in state.stats(manual).items() if stats.successes + stats.failures > 0}
        if ran:
            unseen.update(key for key in manual if key not in ran)
    return unseen


def activate_trials_left_alone(state: Promotions, ledger: Changelog, removed: Collection[str]) -> list[Promotion]:
    """Activate each trial whose other side, the version it is tried against, is among `removed`
    (the keys the tools watch just stopped serving): the version on trial is the one version of
    the trial left, and serves every call already (evolution/served_version.py `offered_side`).
    Left on trial, `fittest tools` and `show` went on saying it served 25 % of the calls, and its
    verdict would have compared it against the removed version's rate (QA 51d N4)."""
    gone: dict[str, set[str]] = {}
    for key in removed:
        namespace, version = split_key(key)
        gone.setdefault(namespace, set()).add(version)
    concluded = []
    for namespace, current in (state.promotions(list(gone)) if gone else {}).items():
        if current is None or current.status != "on_trial":
            continue
        against = current.parent_version or current.original_version
        if against not in gone[namespace] or against == current.evolved_version:
            continue
        reason = (f"{tool_key(namespace, against)}, the version it was tried against, left the tools directory: "
                  f"{tool_key(namespace, current.evolved_version)} serves every call")
        if conclude_trial(state, ledger, current, "activate", reason):
            concluded.append(current)
    return concluded


def trial_new_manifests(state: Promotions, ledger: Changelog, registry: ToolRegistry,
                        namespaces: Iterable[str], arrived: Collection[str] = (), removed: Collection[str] = ()) -> list[Promotion]:
    """Serve on trial each version that a namespace's manifest newly gives it (evolution/served_version.py
    `manifest_to_trial`), against the version the namespace served until then: it takes
    FITTEST_TRIAL_SHARE of the namespace's calls, and is served in its place once it has K
    successes at a rate no worse, or is rolled back. Without this a new version was only ever a
    fallback (QA: a fixed 2.0.0 dropped into the tools directory ran 11 times in 298 calls of its
    job, as a fallback of the broken 1.0.0, which went on being served first). A version that
    `arrived` (the keys the tools watch just served) older than the newest stays a fallback, and
    the newest, which the namespace served, is recorded as served (`kept_served`). A trial that
    lost a side to the versions `removed` (the keys the tools watch just stopped serving) ends
    first, as does a removed manifest version's promotion."""
    namespaces = sorted(set(namespaces))
    retire_removed_manifest_versions(state, ledger, registry, namespaces, removed)  # a trial no call can decide blocks the next
    activate_trials_left_alone(state, ledger, removed)
    started = []
    for namespace in namespaces:
        versions = registry.versions(namespace)
        original = registry.original(namespace)
        if original is None or sum(m.parent_version is None for m in versions) < 2:  # nothing to read Redis for
            continue
        current = state.promotion(namespace)
        if (kept := kept_served(versions, current, arrived)) is not None:
            older = ", ".join(m.version for m in versions if m.key in arrived)
            promotion = Promotion(namespace=namespace, evolved_version=kept.version, original_version=original.version,
                                  reason=f"kept served: its manifest gave the older {older} too", mutation=MANIFEST_MUTATION,
                                  status="active")
            if not state.promote_if(promotion, current.evolved_version if current else None, STATUSES):
                continue  # changed meanwhile (an evolution, an operator): looked at again at the next change
            ledger.log(ChangelogEntry(namespace=namespace, event="promoted", version=kept.version, mutation=promotion.mutation,
                                      reason=promotion.reason, trigger="manifest"))
            log.info("%s stays served; %s@%s arrived older and is a fallback", kept.key, namespace, older,
                     extra={"event": "manifest_kept_served", "tool": kept.key, "older": older})
            started.append(promotion)
            continue
        new = manifest_to_trial(versions, current, state.promotion_history(namespace))
        if new is None:
            continue
        served = served_before(versions, current, arrived)
        promotion = Promotion(namespace=namespace, evolved_version=new.version, original_version=original.version,
                              parent_version=served, reason=f"a new version of its manifest, on trial against {served}",
                              mutation=MANIFEST_MUTATION, status="on_trial", resumes=served_promotion(current))
        if not state.promote_if(promotion, current.evolved_version if current else None,
                                [current.status] if current else STATUSES):
            continue  # changed meanwhile (an evolution, an operator): looked at again at the next change
        ledger.log(ChangelogEntry(namespace=namespace, event="promoted", version=new.version, parent=served,
                                  mutation=promotion.mutation, reason=promotion.reason, trigger="manifest"))
        log.info("%s@%s is on trial against %s@%s: a new version of its manifest", namespace, new.version, namespace,
                 served, extra={"event": "manifest_trial", "tool": new.key, "parent": served})
        started.append(promotion)
    return started


def conclude_trial(state: Promotions, ledger: Changelog, current: Promotion, verdict: Verdict, reason: str) -> bool:
    """Activate or roll back a trial, unless someone changed the promotion meanwhile."""
    if verdict == "continue":
        return False
    status: Literal["active", "rolled_back"] = "active" if verdict == "activate" else "rolled_back"
    new = current.model_copy(update={"status": status, "reason": reason[:500], "promoted_at": time.time()})
    if not state.promote_if(new, current.evolved_version, ["on_trial"]):
        return False
    ledger.log(
        ChangelogEntry(
            namespace=current.namespace, event="activated" if status == "active" else "rolled_back",
            version=current.evolved_version, parent=current.parent_version, reason=reason,
        )
    )
    key = tool_key(current.namespace, current.evolved_version)
    log.info("trial of %s ended: %s (%s)", key, "activated" if status == "active" else "rolled back", reason,
             extra={"event": "trial_concluded", "tool": key, "verdict": verdict, "reason": reason})
    if status == "rolled_back":
        _restore(state, ledger, new, f"{key} rolled back on trial")
    return True


ROLLED_BACK_BY_HAND = "rolled back by hand"
# The original's promotion by hand, rolled back: undone, as `fittest rollback` says, since the original
# stays the fallback of every version (QA 65a: the changelog said "rolled back by hand").
UNDONE_BY_HAND = "its promotion by hand undone: the original stays the fallback of every version"


def undone_not_rolled_back(promotion: Promotion) -> bool:
    """Whether a rolled-back promotion undid the original's promotion by hand, which takes no
    version out of the calls (`fittest_rollbacks_total` does not count it)."""
    return promotion.status == "rolled_back" and promotion.by == "operator" and promotion.evolved_version == promotion.original_version


def rollback(state: Promotions, ledger: Changelog, namespace: str, registry: ToolRegistry | None = None) -> Promotion:
    """Stop serving the promoted version; its parent is served again, or, for a version promoted by
    hand, what that promotion replaced is restored (`Promotion.resumes`: a trial it interrupted, or
    an earlier by-hand promotion). Returns the promotion rolled back. With the `registry` the
    workers serve from, one whose parent (or what it would restore) is served no more is refused:
    an evolved version whose manifest version left the tools directory came back as the namespace's
    served version, which no call could run (QA 64d: every caps call failed without a caps version)."""
    current = state.promotion(namespace)
    if current is None or (current.evolved_version == current.original_version and fallback_version(current) is None
                           and not promoted_by_hand(current)):
        # The original promoted in place of nothing but itself: nothing else to serve. One promoted by
        # hand in place of another version rolls back to that one (QA R: an evolved version served,
        # `fittest promote NAME ORIGINAL`, then `fittest rollback NAME` said nothing was promoted), and
        # one that pins the original undoes the pin (QA V: no new manifest version went on trial
        # while it held, and nothing could undo it).
        raise PromotionError(f"{namespace} has no promoted version to roll back (the original is served)")
    if current.status == "rolled_back":
        # None: the original, as the workers serve it (QA 64d: a gone original was named as served)
        served = head_version(current) or (served_original(current, registry, namespace) if registry is not None else None) \
            or current.original_version
        raise PromotionError(f"{tool_key(namespace, current.evolved_version)} is rolled back already; {tool_key(namespace, served)} is served "
                             f"(to serve another version: fittest promote {namespace} VERSION)")
    back = head_version(current.resumes) if current.resumes is not None else fallback_version(current)
    if registry is not None and back is not None and tool_key(namespace, back) not in registry:
        raise PromotionError(f"{tool_key(namespace, current.evolved_version)} replaced {tool_key(namespace, back)}, which is served "
                             "no more (it, or the version it evolved from, left the tools directory): nothing to roll back to "
                             f"(to serve another version: fittest promote {namespace} VERSION)")
    why = UNDONE_BY_HAND if promoted_by_hand(current) and current.evolved_version == current.original_version else ROLLED_BACK_BY_HAND
    new = current.model_copy(update={"status": "rolled_back", "reason": why, "promoted_at": time.time(), "by": "operator"})
    if not state.promote_if(new, current.evolved_version, [current.status]):
        raise PromotionChanged(f"the promotion of {namespace} changed meanwhile; look again with `fittest show {namespace}`")
    ledger.log(
        ChangelogEntry(namespace=namespace, event="rolled_back", version=current.evolved_version,
                       parent=current.parent_version, reason=why, by="operator")
    )
    # QA 65c: "evolved from it" of a manifest's new version, and "rolled back" of the original's undone promotion
    placed = ("promoted by hand in its place" if promoted_by_hand(current) else "a new manifest version tried against it"
              if current.mutation == MANIFEST_MUTATION else "evolved from it")
    done = "undone" if why == UNDONE_BY_HAND else "rolled back"
    _restore(state, ledger, new, f"{tool_key(namespace, current.evolved_version)}, {placed}, was {done}", by="operator")
    return new


def _restore(state: Promotions, ledger: Changelog, rolled: Promotion, why: str,
             by: Literal["fittest", "operator"] = "fittest") -> None:
    """Serve again what the `rolled` back promotion replaced (`Promotion.resumes`), if anything: a
    trial it interrupted goes on, an earlier by-hand promotion is served again.

    A by-hand promotion served again does not fall back on the version just rolled back, though
    it replaced that one (`promote 1.0.0` during 1.1.0's trial, `promote 1.1.0`, `rollback`):
    1.1.0 went on running as 1.0.0's fallback while `fittest show` said it was rolled back (QA
    learning F1). Its fallback is the original instead; a trial served again keeps both sides."""
    back = rolled.resumes
    if back is None:
        return
    again = "on trial again" if back.status == "on_trial" else "served again"
    reason = f"{again}: {why}"
    update: dict[str, object] = {"reason": reason, "promoted_at": time.time()}
    if back.status == "active" and back.parent_version == rolled.evolved_version:
        update["parent_version"] = None
    restore = back.model_copy(update=update)
    if state.promote_if(restore, rolled.evolved_version, ["rolled_back"]):  # else changed meanwhile: left as it is
        ledger.log(ChangelogEntry(namespace=rolled.namespace, event="promoted" if back.status == "on_trial" else "activated",
                                  version=restore.evolved_version, parent=restore.parent_version,
                                  mutation=restore.mutation, reason=reason, by=by))


RESTORES_KEPT = 8  # by-hand promotions that rollbacks undo one by one; older ones are forgotten


def replaced_promotion(current: Promotion | None, version: str) -> Promotion | None:
    """What a by-hand promotion of `version` in place of `current` restores when it is rolled back,
    so that each rollback undoes one promote: a trial of another version that it interrupts, an
    earlier by-hand promotion of another version (with what that one restores), or an evolved
    version's promotion, which a second rollback then rolls back (QA 64c-4: with the promotion
    forgotten, its version was served again but "rolled back already", and only `fittest promote
    NAME ORIGINAL` could take it back). None when the rollback serves the original anyway. A trial
    of `version` itself is decided by the promote: its rollback rolls `version` back (QA V: the
    trial came back, with the very version the operator rolled back on 25 % of the calls); promoted
    again, it restores what it first replaced."""
    if current is None:
        return None
    if current.evolved_version == version:  # promoted again, or the trial it decides
        return current.resumes if promoted_by_hand(current) else None
    trial = current.status == "on_trial" and current.evolved_version != current.original_version
    return _kept(current, RESTORES_KEPT) if trial or promoted_by_hand(current) else served_promotion(current)


def served_promotion(current: Promotion | None) -> Promotion | None:
    """What a trial started over `current` restores when it is rolled back (by its verdict or by
    hand): the promotion that serves a version other than the original, so that the next
    `fittest rollback` rolls that one back in turn. Forgotten, the served version was "rolled back
    already" and only `fittest promote NAME ORIGINAL` could take it back (QA 65a: 1.1.0 won its
    trial, 1.2.0 went on trial against it; two rollbacks served 1.1.0, and a third was refused)."""
    if current is None or current.status != "active" or current.evolved_version == current.original_version:
        return None
    return _kept(current, RESTORES_KEPT)


def _kept(promotion: Promotion, depth: int) -> Promotion:
    """`promotion` with at most `depth` promotions to restore behind it."""
    behind = promotion.resumes
    return promotion.model_copy(update={"resumes": _kept(behind, depth - 1) if behind is not None and depth > 1 else None})


def promote_by_hand(state: Promotions, ledger: Changelog, registry: ToolRegistry, namespace: str, version: str) -> Promotion:
    """Serve `namespace@version` as active, whatever is served now. Its promotion's parent is the
    version it replaces, so that `fittest rollback` undoes it: an operator who tries a version by
    hand and takes it back expects what was served before, not the original (QA: an evolved
    version served before a by-hand promote of a manifest version was dropped by the rollback)."""
    manifest = registry.get(tool_key(namespace, version))
    original = registry.original(namespace)
    if original is None:
        raise PromotionError(registry.no_tool_named(namespace))
    if manifest is None:
        known = ", ".join(m.version for m in registry.versions(namespace))
        if not version.strip():  # QA AA: "has no version  (known: ...)"
            raise PromotionError(f"the version to serve is blank (known: {known})")
        raise PromotionError(f"{namespace} has no version {version} (known: {known})")
    if manifest.deprecated:
        raise PromotionError(f"{manifest.key} is deprecated")
    for _ in range(BY_HAND_TRIES):
        current = state.promotion(namespace)
        if promoted_by_hand(current) and current is not None and current.evolved_version == version:
            raise AlreadyPromoted(f"{manifest.key} is served already (promoted by hand): nothing changed")
        replaced = head_version(current)  # None: the original
        if replaced == version and current is not None:  # promoted again: what it replaced the first time
            replaced = current.parent_version if current.parent_version != version else None
        promotion = Promotion(
            namespace=namespace,
            evolved_version=version,
            original_version=original.version,
            parent_version=replaced,
            reason=f"promoted by hand in place of {tool_key(namespace, replaced or original.version)}",
            status="active",
            by="operator",
            resumes=replaced_promotion(current, version),
        )
        # Only over the promotion it was made from (QA 59b F1): written over a trial's verdict that
        # landed meanwhile, its `resumes` put the trial the verdict had rolled back on trial again
        # at the next `fittest rollback`.
        if state.promote_if(promotion, current.evolved_version if current else None,
                            [current.status] if current else STATUSES):
            break
    else:
        raise PromotionChanged(f"the promotion of {namespace} kept changing while {manifest.key} was promoted; nothing "
                               f"was changed: look again with `fittest show {namespace}`")
    ledger.log(ChangelogEntry(namespace=namespace, event="activated", version=version, parent=manifest.parent_version,
                              reason=promotion.reason, by="operator"))
    return promotion

"""The promotion rules (evolution/promotions.py) on the in-memory stores: a trial concluded, a
change that meets another one made meanwhile, a trial that lost a side, a rollback that serves what
was served before. tests/integration/test_evolution_lifecycle.py runs them on Redis with real tools."""

from __future__ import annotations

import pytest

from evolution.promotions import (AlreadyPromoted, PromotionError, activate_trials_left_alone, conclude_trial,
                                  promote_by_hand, promote_on_trial, rollback, trial_new_manifests)
from evolution.served_version import head_version, manifest_to_trial, served_version
from selection.manifest import ToolManifest
from selection.models import Promotion
from selection.registry import ToolRegistry
from tests.fakes_evolution import InMemoryEvolutionState
from tests.fakes_state import InMemoryStateStore

HTTP = {"kind": "http", "url": "http://127.0.0.1:9/run"}


def registry_of(*versions: str, deprecated: tuple[str, ...] = ()) -> ToolRegistry:
    registry = ToolRegistry()
    for version in versions:
        registry.add(ToolManifest(name="word_stats", version=version, description="Counts words.", implementation=HTTP,
                                  deprecated=version in deprecated))
    return registry


def on_trial(state: InMemoryStateStore, ledger: InMemoryEvolutionState) -> Promotion:
    """word_stats 1.1.0, a manifest's new version, on trial against 1.0.0."""
    (trial,) = trial_new_manifests(state, ledger, registry_of("1.0.0", "1.1.0"), ["word_stats"])
    assert (trial.evolved_version, trial.parent_version, trial.status) == ("1.1.0", "1.0.0", "on_trial")
    return trial


def test_a_trial_won_serves_its_version_on_every_call_and_says_why() -> None:
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    trial = on_trial(state, ledger)
    assert not conclude_trial(state, ledger, trial, "continue", "not yet")
    assert conclude_trial(state, ledger, trial, "activate", "5/5 successes")
    assert served_version(state.promotion("word_stats"), "any-call", after_evolution=False, share=0.25) == "1.1.0"
    assert [(e.event, e.version, e.reason) for e in ledger.changelog("word_stats")][-1] == ("activated", "1.1.0", "5/5 successes")
    # A verdict taken on a promotion read before the change is not applied twice, nor logged.
    assert not conclude_trial(state, ledger, trial, "rollback", "late")
    assert state.promotion("word_stats").status == "active"  # type: ignore[union-attr]
    assert len(ledger.changelog("word_stats")) == 2


def test_a_trial_lost_serves_its_parent_again() -> None:
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    trial = on_trial(state, ledger)
    assert conclude_trial(state, ledger, trial, "rollback", "2/5 successes against 0.90")
    rolled = state.promotion("word_stats")
    assert rolled is not None and rolled.status == "rolled_back" and head_version(rolled) is None  # the original


def test_a_trial_whose_version_tried_against_left_the_tools_directory_is_activated() -> None:
    """QA 51d N4: the version on trial served every call, `tools` and `show` said 25 %."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    on_trial(state, ledger)
    assert activate_trials_left_alone(state, ledger, ["word_stats@1.1.0", "other@1.0.0"]) == []  # not its other side
    assert state.promotion("word_stats").status == "on_trial"  # type: ignore[union-attr]
    (ended,) = activate_trials_left_alone(state, ledger, ["word_stats@1.0.0"])
    assert ended.evolved_version == "1.1.0" and state.promotion("word_stats").status == "active"  # type: ignore[union-attr]
    assert ledger.changelog("word_stats")[-1].reason == ("word_stats@1.0.0, the version it was tried against, left the "
                                                         "tools directory: word_stats@1.1.0 serves every call")
    assert activate_trials_left_alone(state, ledger, ["word_stats@1.0.0"]) == []  # told twice: concluded once


def test_a_rollback_by_hand_undoes_a_promotion_by_hand_one_at_a_time() -> None:
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    registry = registry_of("1.0.0", "1.1.0", "1.2.0")
    promote_by_hand(state, ledger, registry, "word_stats", "1.1.0")
    promote_by_hand(state, ledger, registry, "word_stats", "1.2.0")
    with pytest.raises(AlreadyPromoted, match="word_stats@1.2.0 is served already"):
        promote_by_hand(state, ledger, registry, "word_stats", "1.2.0")
    with pytest.raises(PromotionError, match=r"word_stats has no version 9.9.9 \(known: 1.0.0, 1.1.0, 1.2.0\)"):
        promote_by_hand(state, ledger, registry, "word_stats", "9.9.9")
    rollback(state, ledger, "word_stats")
    assert served_version(state.promotion("word_stats"), "any-call", after_evolution=False, share=0.25) == "1.1.0"
    rollback(state, ledger, "word_stats")
    assert served_version(state.promotion("word_stats"), "any-call", after_evolution=False, share=0.25) is None
    with pytest.raises(PromotionError, match="rolled back already"):
        rollback(state, ledger, "word_stats")


# QA 58b: behaviours a single mutation changed while every unit test passed
def manifest(version: str, parent: str | None = None) -> ToolManifest:
    return ToolManifest(name="word_stats", version=version, parent_version=parent, description="Counts words.",
                        implementation=HTTP)


def served(state: InMemoryStateStore) -> str | None:
    return served_version(state.promotion("word_stats"), "any-call", after_evolution=False, share=0.25)


def test_rollbacks_by_hand_undo_three_promotions_by_hand_one_at_a_time() -> None:
    """Mutant R1 (RESTORES_KEPT 8 -> 1) survived: the unit test promotes twice only."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    registry = registry_of("1.0.0", "1.1.0", "1.2.0", "1.3.0")
    for version in ("1.1.0", "1.2.0", "1.3.0"):
        promote_by_hand(state, ledger, registry, "word_stats", version)
    seen = []
    for _ in range(3):
        rollback(state, ledger, "word_stats")
        seen.append(served(state))
    assert seen == ["1.2.0", "1.1.0", None]


def test_a_deprecated_version_cannot_be_promoted_by_hand() -> None:
    """Mutant R9 (`if manifest.deprecated:` -> `if False:`) survived."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    with pytest.raises(PromotionError, match="deprecated"):
        promote_by_hand(state, ledger, registry_of("1.0.0", "1.1.0", deprecated=("1.1.0",)), "word_stats", "1.1.0")
    assert state.promotion("word_stats") is None


def test_an_evolved_version_starts_on_trial_with_its_parents_quality() -> None:
    """Mutant R2 (`set_quality(new.key, quality)` -> 1.0) survived."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    state.set_quality("word_stats@1.0.0", 0.4)
    promote_on_trial(state, ledger, manifest("1.1.0", "1.0.0"), manifest("1.0.0"), "1.0.0", before=None,
                     reason="r", mutation="m", job_id="j", trigger="failure")
    assert state.stats(["word_stats@1.1.0"])["word_stats@1.1.0"].quality == pytest.approx(0.4)


def test_a_trial_interrupted_by_an_evolution_of_its_version_goes_on_after_that_ones_rollback() -> None:
    """Mutants R3 (no `_restore` after a verdict's rollback), R5 and R11 survived. README: evolved from the
    version on trial, it interrupts that trial, which goes on after such a rollback."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    (trial,) = trial_new_manifests(state, ledger, registry_of("1.0.0", "1.1.0"), ["word_stats"])
    child = promote_on_trial(state, ledger, manifest("1.2.0", "1.1.0"), manifest("1.1.0"), "1.0.0", before=trial,
                             reason="r", mutation="m", job_id="j", trigger="manual")
    # R5; tried against what the interrupted trial was against, which serves the rest of the calls (QA 65b)
    assert child is not None and child.resumes is not None and child.parent_version == "1.0.0"
    drawn = [served_version(child, f"call-{i}", after_evolution=False, share=0.25) for i in range(40)]
    assert "1.1.0" not in drawn and drawn.count(None) > 20  # None: the original
    assert conclude_trial(state, ledger, child, "rollback", "worse than 1.1.0")
    back = state.promotion("word_stats")
    assert back is not None and (back.evolved_version, back.status) == ("1.1.0", "on_trial")  # R3
    # evolved from a version that is not the one on trial: nothing is interrupted (R11)
    state2, ledger2 = InMemoryStateStore(), InMemoryEvolutionState()
    (trial2,) = trial_new_manifests(state2, ledger2, registry_of("1.0.0", "1.1.0"), ["word_stats"])
    other = promote_on_trial(state2, ledger2, manifest("1.2.0", "1.0.0"), manifest("1.0.0"), "1.0.0", before=trial2,
                             reason="r", mutation="m", job_id="j", trigger="failure")
    assert other is not None and other.resumes is None


def test_rolling_back_a_by_hand_promotion_serves_the_one_it_replaced_without_the_rolled_back_as_fallback() -> None:
    """Mutant R4 (_restore keeps `parent_version`) survived. promotions.py: `promote 1.0.0` during
    1.1.0's trial, `promote 1.1.0`, `rollback`: 1.1.0 went on running as 1.0.0's fallback (QA learning F1)."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    registry = registry_of("1.0.0", "1.1.0")
    trial_new_manifests(state, ledger, registry, ["word_stats"])
    promote_by_hand(state, ledger, registry, "word_stats", "1.0.0")
    promote_by_hand(state, ledger, registry, "word_stats", "1.1.0")
    rollback(state, ledger, "word_stats")
    back = state.promotion("word_stats")
    assert back is not None and back.evolved_version == "1.0.0" and back.parent_version is None


def test_versions_of_a_namespace_none_of_which_ran_are_not_unseen() -> None:
    """Mutant R8 (`if ran:` -> `if True:`) survived: at a start with no history every manual version
    of a namespace would be taken for one that came while no worker watched."""
    from evolution.promotions import unseen_versions

    state = InMemoryStateStore()
    assert unseen_versions(state, registry_of("1.0.0", "1.1.0"), ["word_stats"]) == set()


def test_a_manifest_versions_promotion_rolled_back_already_is_not_retired_again() -> None:
    """Mutant R12 (retire skips no rolled-back promotion) survived: each tools-watch pass logged
    another rollback of a version long gone."""
    from evolution.promotions import retire_removed_manifest_versions

    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    (trial,) = trial_new_manifests(state, ledger, registry_of("1.0.0", "1.1.0"), ["word_stats"])
    assert conclude_trial(state, ledger, trial, "rollback", "worse")
    logged = len(ledger.changelog("word_stats"))
    assert retire_removed_manifest_versions(state, ledger, registry_of("1.0.0"), ["word_stats"]) == []
    assert len(ledger.changelog("word_stats")) == logged


def test_an_evolved_versions_promotion_is_rolled_back_once_the_version_it_evolved_from_left() -> None:
    """QA 64c: an evolved caps 1.1.0, active, stayed the served version after its parent's manifest
    left the tools directory (beside another manifest version of caps), and `fittest health` took it
    for a lost evolved directory. Dropped by the tools watch (or not served at a start), its
    promotion ends; an evolved version the registry merely has not loaded yet is left alone."""
    from evolution.promotions import retire_removed_manifest_versions

    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    active = Promotion(namespace="word_stats", evolved_version="1.1.0", original_version="1.0.0", parent_version="1.0.0",
                       reason="evolved", mutation="input coercion: rename content→text", status="active")
    state.promote(active)
    left = registry_of("1.2.0")  # 1.0.0 and the 1.1.0 evolved from it are no longer served
    assert retire_removed_manifest_versions(state, ledger, left, ["word_stats"]) == []  # not known to be gone: kept
    (retired,) = retire_removed_manifest_versions(state, ledger, left, ["word_stats"], removed=["word_stats@1.1.0"])
    assert retired.status == "rolled_back" and "the version it evolved from left the tools directory" in retired.reason
    assert head_version(state.promotion("word_stats")) is None  # the registry's original, 1.2.0, is served
    assert [e.event for e in ledger.changelog("word_stats")] == ["rolled_back"]


def test_a_rollback_to_a_version_served_no_more_is_refused_and_what_is_served_is_named() -> None:
    """QA 64d: caps 1.2.0 served after the caps 1.1.0 it was tried against left with its manifest
    version; `fittest rollback caps` put 1.1.0 back as the served version, which no call could run,
    every caps call failing, and a second rollback said 1.1.0 was served."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    state.promote(Promotion(namespace="word_stats", evolved_version="1.2.0", original_version="1.0.0", parent_version="1.1.0",
                            reason="the version it was tried against left", mutation="new manifest version", status="active"))
    left = registry_of("1.2.0")
    with pytest.raises(PromotionError, match=r"word_stats@1.2.0 replaced word_stats@1.1.0, which is served no more .*: "
                                             r"nothing to roll back to"):
        rollback(state, ledger, "word_stats", left)
    current = state.promotion("word_stats")
    assert current is not None and current.status == "active" and ledger.changelog("word_stats") == []
    # Without the registry (a caller that cannot tell), as before; and rolled back, the served original is named.
    rollback(state, ledger, "word_stats")
    state.promote(Promotion(namespace="word_stats", evolved_version="1.3.0", original_version="1.0.0",
                            reason="evolved", mutation="input coercion", status="rolled_back"))
    with pytest.raises(PromotionError, match=r"word_stats@1.3.0 is rolled back already; word_stats@1.2.0 is served"):
        rollback(state, ledger, "word_stats", left)


def test_a_second_rollback_rolls_back_the_evolved_version_a_by_hand_promotion_had_replaced() -> None:
    """QA 64c-4: with an evolved 1.0.1 served, `promote word_stats 1.2.0` then `rollback` served 1.0.1
    again, and a second `rollback` said 1.2.0 was rolled back already: 1.0.1 could not be rolled back."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    registry = registry_of("1.0.0", "1.2.0")
    registry.add(ToolManifest(name="word_stats", version="1.0.1", description="Counts words.", implementation=HTTP,
                              parent_version="1.0.0"))
    state.promote(Promotion(namespace="word_stats", evolved_version="1.0.1", original_version="1.0.0", parent_version="1.0.0",
                            reason="won its trial", mutation="input coercion", status="active"))
    promote_by_hand(state, ledger, registry, "word_stats", "1.2.0")
    rollback(state, ledger, "word_stats", registry)
    again = state.promotion("word_stats")
    assert again is not None and (again.evolved_version, again.status) == ("1.0.1", "active")
    rolled = rollback(state, ledger, "word_stats", registry)
    assert (rolled.evolved_version, rolled.status) == ("1.0.1", "rolled_back")
    assert head_version(state.promotion("word_stats")) is None  # the original, 1.0.0
    with pytest.raises(PromotionError, match="rolled back already"):
        rollback(state, ledger, "word_stats", registry)


def test_rollbacks_step_back_past_a_trial_won_after_a_later_trial_is_rolled_back() -> None:
    """QA 65a: 1.1.0 won its trial, 1.2.0 went on trial against it and was rolled back: 1.1.0 served,
    and the next rollback said 1.2.0 was rolled back already, where the operator meant 1.1.0."""
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    (trial,) = trial_new_manifests(state, ledger, registry_of("1.0.0", "1.1.0"), ["word_stats"])
    assert conclude_trial(state, ledger, trial, "activate", "5/5 successes")
    registry = registry_of("1.0.0", "1.1.0", "1.2.0")
    (later,) = trial_new_manifests(state, ledger, registry, ["word_stats"])
    assert (later.evolved_version, later.parent_version) == ("1.2.0", "1.1.0")
    rollback(state, ledger, "word_stats", registry)  # the trial of 1.2.0
    assert ledger.changelog("word_stats")[-1].reason == ("served again: word_stats@1.2.0, a new manifest version tried "
                                                         "against it, was rolled back")  # QA 65c: "evolved from it"
    again = state.promotion("word_stats")
    assert again is not None and (again.evolved_version, again.status) == ("1.1.0", "active")
    assert served_version(again, "any-call", after_evolution=False, share=0.25) == "1.1.0"
    rollback(state, ledger, "word_stats", registry)  # 1.1.0's trial win
    assert head_version(state.promotion("word_stats")) is None  # the original, 1.0.0
    with pytest.raises(PromotionError, match="rolled back already"):
        rollback(state, ledger, "word_stats", registry)
    # A trial lost by its verdict serves the version it was tried against again, its promotion with it.
    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    (trial,) = trial_new_manifests(state, ledger, registry_of("1.0.0", "1.1.0"), ["word_stats"])
    conclude_trial(state, ledger, trial, "activate", "5/5 successes")
    (later,) = trial_new_manifests(state, ledger, registry, ["word_stats"])
    assert conclude_trial(state, ledger, later, "rollback", "0/5 successes")
    again = state.promotion("word_stats")
    assert again is not None and (again.evolved_version, again.status) == ("1.1.0", "active")
    assert manifest_to_trial(registry.versions("word_stats"), again, state.promotion_history("word_stats")) is None  # 1.2.0 competed once


def test_the_originals_promotion_by_hand_is_logged_undone_and_not_counted_as_a_rollback() -> None:
    """QA 65a: `fittest rollback` said the original's promotion by hand was undone; the changelog said
    "rolled back by hand", and fittest_rollbacks_total counted it."""
    from workers.metrics import evolution_events

    state, ledger = InMemoryStateStore(), InMemoryEvolutionState()
    registry = registry_of("1.0.0", "1.1.0")
    promote_by_hand(state, ledger, registry, "word_stats", "1.1.0")
    promote_by_hand(state, ledger, registry, "word_stats", "1.0.0")
    rollback(state, ledger, "word_stats", registry)  # undoes the original's promote: 1.1.0 served again
    assert ledger.changelog("word_stats")[-2].reason == ("its promotion by hand undone: the original stays the fallback "
                                                         "of every version")
    assert ledger.changelog("word_stats")[-1].reason == "served again: word_stats@1.0.0, promoted by hand in its place, was undone"
    rollback(state, ledger, "word_stats", registry)  # 1.1.0 rolled back
    assert ledger.changelog("word_stats")[-1].reason == "rolled back by hand"
    assert [p.evolved_version for p in evolution_events(state.promotion_history("word_stats"))[1]] == ["1.1.0"]

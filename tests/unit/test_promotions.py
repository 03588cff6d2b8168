"""The promotion rules (evolution/promotions.py) on the in-memory stores: a trial concluded, a
change that meets another one made meanwhile, a trial that lost a side, a rollback that serves what
was served before. tests/integration/test_evolution_lifecycle.py runs them on Redis with real tools."""

from __future__ import annotations

import pytest

from evolution.promotions import (AlreadyPromoted, PromotionError, activate_trials_left_alone, conclude_trial,
                                  promote_by_hand, rollback, trial_new_manifests)
from evolution.served_version import head_version, served_version
from selection.manifest import ToolManifest
from selection.models import Promotion
from selection.registry import ToolRegistry
from tests.fakes_evolution import InMemoryEvolutionState
from tests.fakes_state import InMemoryStateStore

HTTP = {"kind": "http", "url": "http://127.0.0.1:9/run"}


def registry_of(*versions: str) -> ToolRegistry:
    registry = ToolRegistry()
    for version in versions:
        registry.add(ToolManifest(name="word_stats", version=version, description="Counts words.", implementation=HTTP))
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

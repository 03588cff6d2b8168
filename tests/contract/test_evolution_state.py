"""Contract of the EvolutionLedger ports (evolution/ports.py): one suite, every implementation.

Runs against EvolutionState on the session's private Redis (with a bytes client and with a
decode_responses client, the test's own prefix, removed at the end) and InMemoryEvolutionState.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from evolution.models import ChangelogEntry, SuccessfulRun
from evolution.ports import CHANGELOG_LIMIT, RECENT_SUCCESSES_LIMIT, REPEATS_LOOKED_AT, EvolutionLedger
from evolution.trial import TrialCounts
from tests.fakes_evolution import InMemoryEvolutionState
from workers.state.evolution import EvolutionState

NS = "sort_numbers"
KEY = "sort_numbers@1.0.0"
MANIFEST = "Sort a list of numbers in ascending order."


@pytest.fixture(params=["redis", "redis-decoded", "memory"])
def ledger(request: pytest.FixtureRequest) -> Iterator[EvolutionLedger]:
    # Each implementation is given to the tests as the port: mypy checks that it is one.
    if request.param == "memory":
        memory: EvolutionLedger = InMemoryEvolutionState()
        yield memory
        return
    prefix = request.getfixturevalue("run_prefix")
    client = redis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=request.param == "redis-decoded")
    port: EvolutionLedger = EvolutionState(client, prefix)
    try:
        yield port
    finally:
        for key in client.scan_iter(match=prefix + "*"):
            client.delete(key)
        client.close()


def aid() -> str:
    return uuid.uuid4().hex


def entry(event: str = "no_fix", reason: str = "no mutator proposed a fix", namespace: str = NS, **more: str) -> ChangelogEntry:
    return ChangelogEntry.model_validate({"namespace": namespace, "event": event, "parent": KEY, "reason": reason, **more})


# ----------------------------------------------------------------------------------- changelog
def test_a_change_told_by_several_processes_is_logged_once(ledger: EvolutionLedger) -> None:
    """Review 51: each memory worker's tools watch logged the same `added` and `removed` lines."""
    from workers.tasks.selection import log_watched

    came, gone = {KEY: "served from tools/sort/tool.yaml"}, {KEY: "tools/sort/tool.yaml is gone"}
    for change in (("added", came), ("added", came), ("removed", gone), ("removed", gone),  # two workers saw each
                   ("added", came), ("removed", gone), ("removed", gone)):  # put back, then gone again
        log_watched(ledger, *change)
    assert [e.event for e in ledger.changelog(NS)] == ["added", "removed", "added", "removed"]
    ledger.log(entry("verified", version="1.1.0"), once="t")
    ledger.log(entry("verified", version="1.1.0"), once="t")
    assert [e.event for e in ledger.changelog(NS)][-1:] == ["verified"] and len(ledger.changelog(NS)) == 5


def test_the_changelog_keeps_entries_oldest_first_per_namespace(ledger: EvolutionLedger) -> None:
    ledger.log(entry("verified", version="1.1.0"))
    ledger.log(entry("promoted", version="1.1.0"))
    ledger.log(entry("verified", namespace="hash_text"))
    assert [(e.event, e.version) for e in ledger.changelog(NS)] == [("verified", "1.1.0"), ("promoted", "1.1.0")]
    assert [e.namespace for e in ledger.changelog("hash_text")] == ["hash_text"]
    assert ledger.changelog("nothing_logged") == []


def test_the_changelog_keeps_its_newest_entries_up_to_its_limit(ledger: EvolutionLedger) -> None:
    for i in range(CHANGELOG_LIMIT + 3):
        ledger.log(entry("verified", reason=str(i)))
    kept = ledger.changelog(NS)
    assert len(kept) == CHANGELOG_LIMIT and (kept[0].reason, kept[-1].reason) == ("3", str(CHANGELOG_LIMIT + 2))


def test_an_outcome_that_repeats_while_nothing_else_happened_is_logged_once(ledger: EvolutionLedger) -> None:
    assert ledger.log_unless_repeated(entry("skipped", mutator="timeout", mutation="timeout 2s -> 8s"))
    assert ledger.log_unless_repeated(entry("no_fix"))
    assert not ledger.log_unless_repeated(entry("skipped", mutator="timeout", mutation="timeout 2s -> 8s"))
    assert not ledger.log_unless_repeated(entry("no_fix"))
    assert ledger.log_unless_repeated(entry("no_fix", reason="another reason"))  # it says something else
    ledger.log(entry("verified", version="1.1.0"))  # something happened since
    assert ledger.log_unless_repeated(entry("no_fix"))
    assert [e.event for e in ledger.changelog(NS)] == ["skipped", "no_fix", "no_fix", "verified", "no_fix"]


def test_a_repeat_is_looked_for_among_the_latest_entries_only(ledger: EvolutionLedger) -> None:
    ledger.log_unless_repeated(entry("no_fix"))
    for i in range(REPEATS_LOOKED_AT):
        assert ledger.log_unless_repeated(entry("no_fix", reason=str(i)))
    assert ledger.log_unless_repeated(entry("no_fix"))  # the first one is past the look-back


# ----------------------------------------------------------------------------------- cool-downs
def test_a_cooldown_runs_once_until_it_ends(ledger: EvolutionLedger) -> None:
    assert ledger.cooldown("evolve:sort_numbers", 60)
    assert not ledger.cooldown("evolve:sort_numbers", 60)
    assert ledger.cooldown("evolve:hash_text", 60)
    assert ledger.cooldown("evolve:sort_numbers", 0) and ledger.cooldown("evolve:sort_numbers", -1)  # none asked for


# --------------------------------------------------------------------------------------- trials
def test_each_attempt_counts_once_in_its_trial(ledger: EvolutionLedger) -> None:
    first = aid()
    assert ledger.trial_record(NS, "1.1.0", "evolved", True, first) == (True, TrialCounts(evolved_successes=1))
    assert ledger.trial_record(NS, "1.1.0", "evolved", True, first) == (False, TrialCounts(evolved_successes=1))  # sent again
    ledger.trial_record(NS, "1.1.0", "evolved", False, aid())
    ledger.trial_record(NS, "1.1.0", "parent", True, aid())
    counted, counts = ledger.trial_record(NS, "1.1.0", "parent", False, aid())
    assert counted and counts == TrialCounts(evolved_successes=1, evolved_failures=1, parent_successes=1, parent_failures=1)
    assert ledger.trial_record(NS, "1.2.0", "evolved", True, aid())[1] == TrialCounts(evolved_successes=1)  # its own trial


def test_an_output_judged_wrong_counts_as_a_failure_and_judged_right_again_as_a_success(ledger: EvolutionLedger) -> None:
    ledger.trial_record(NS, "1.1.0", "evolved", True, aid(), call_id="c1")
    ledger.trial_record(NS, "1.1.0", "evolved", True, aid(), call_id="c2")
    assert ledger.trial_judge(NS, "1.1.0", "evolved", "c1", "negative") == (True, TrialCounts(evolved_successes=1, evolved_failures=1))
    assert ledger.trial_judge(NS, "1.1.0", "evolved", "c1", "negative") == (False, TrialCounts(evolved_successes=1, evolved_failures=1))
    assert ledger.trial_judge(NS, "1.1.0", "evolved", "c1", "positive") == (True, TrialCounts(evolved_successes=2))
    assert ledger.trial_judge(NS, "1.1.0", "evolved", "c2", "positive") == (False, TrialCounts(evolved_successes=2))  # as it counts
    # the parent's output in the same call is another member; a call the trial never counted changes nothing
    assert ledger.trial_judge(NS, "1.1.0", "parent", "c1", "negative") == (False, TrialCounts(evolved_successes=2))
    assert ledger.trial_judge(NS, "1.1.0", "evolved", "never-ran", "negative") == (False, TrialCounts(evolved_successes=2))


def test_a_success_judged_wrong_before_it_is_counted_counts_as_a_failure(ledger: EvolutionLedger) -> None:
    counted, counts = ledger.trial_record(NS, "1.1.0", "parent", True, aid(), call_id="c1", judged="negative")
    assert counted and counts == TrialCounts(parent_failures=1)
    assert ledger.trial_judge(NS, "1.1.0", "parent", "c1", "positive") == (True, TrialCounts(parent_successes=1))


# ----------------------------------------------------------------------------- recent successes
def run(n: int) -> SuccessfulRun:
    return SuccessfulRun(scenario=f"sort {n}", input={"numbers": [n, 1]})


def test_recent_successes_are_kept_newest_first_once_per_attempt_and_capped(ledger: EvolutionLedger) -> None:
    ids = [aid() for _ in range(RECENT_SUCCESSES_LIMIT + 2)]
    assert ledger.push_successes([(KEY, ids[0], run(0)), (KEY, ids[0], run(0)), ("hash_text@1.0.0", ids[1], run(1))]) == [True, False, True]
    assert ledger.push_successes([(KEY, i, run(n)) for n, i in enumerate(ids[2:], 2)]) == [True] * RECENT_SUCCESSES_LIMIT
    kept = ledger.recent_successes(KEY)
    assert [r.scenario for r in kept] == [f"sort {n}" for n in range(RECENT_SUCCESSES_LIMIT + 1, 1, -1)]
    assert ledger.recent_successes("hash_text@1.0.0") == [run(1)] and ledger.recent_successes("none@1.0.0") == []


# ------------------------------------------------------------------------- description variants
def test_the_first_variant_records_the_manifests_description_as_the_active_variant_0(ledger: EvolutionLedger) -> None:
    added = ledger.add_variant(KEY, "  Put   numbers in order ", MANIFEST)
    assert (added.id, added.text, added.status, added.source) == ("1", "Put numbers in order", "testing", "operator")
    second = ledger.add_variant(KEY, "Order numbers for production", MANIFEST, environment="production")
    assert [(v.id, v.text, v.status, v.environment, v.source) for v in ledger.variants(KEY)] == [
        ("0", MANIFEST, "active", "any", "manifest"), ("1", "Put numbers in order", "testing", "any", "operator"),
        ("2", second.text, "testing", "production", "operator")]
    assert ledger.variants("hash_text@1.0.0") == []


@pytest.mark.parametrize(("text", "says"), [
    ("   ", "a description variant needs some text"),
    ("x" * 4001, "a description variant is limited to 4000 characters"),
    (MANIFEST.replace(" ", "  "), "sort_numbers@1.0.0 has this text already (the manifest's description)"),
])
def test_a_variant_without_something_new_to_say_is_refused(ledger: EvolutionLedger, text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        ledger.add_variant(KEY, text, MANIFEST)
    assert ledger.variants(KEY) == []


def test_a_variant_of_a_text_the_version_has_for_its_environment_is_refused(ledger: EvolutionLedger) -> None:
    ledger.add_variant(KEY, "Put numbers in order", MANIFEST)
    with pytest.raises(ValueError, match=r"has this text already \(variant #1\)"):
        ledger.add_variant(KEY, "Put numbers  in order", MANIFEST)
    assert ledger.add_variant(KEY, "Put numbers in order", MANIFEST, environment="production").id == "2"  # another environment


def test_all_variants_lists_every_version_that_has_some(ledger: EvolutionLedger) -> None:
    ledger.add_variant(KEY, "Put numbers in order", MANIFEST)
    ledger.add_variant("hash_text@1.0.0", "Digest a text", "Hash a text with SHA-256.")
    assert {k: [v.id for v in vs] for k, vs in ledger.all_variants().items()} == {"hash_text@1.0.0": ["0", "1"], KEY: ["0", "1"]}
    assert list(ledger.all_variants([KEY, "none@1.0.0"])) == [KEY]
    assert ledger.all_variants([]) == {}


def test_a_call_is_credited_to_its_variant_once(ledger: EvolutionLedger) -> None:
    ledger.add_variant(KEY, "Put numbers in order", MANIFEST)
    assert ledger.record_variant(KEY, "1", "c1", first=True, success=True)
    assert not ledger.record_variant(KEY, "1", "c1", first=True, success=True)  # sent again
    assert ledger.record_variant(KEY, "1", "c2", first=True, success=False)
    assert ledger.record_variant(KEY, "1", "c3", first=False, success=True)  # served, not what made the first match
    assert not ledger.record_variant(KEY, "0", "c3", first=True, success=True)  # a call is credited once per tool version
    variant = next(v for v in ledger.variants(KEY) if v.id == "1")
    assert (variant.accesses, variant.trials, variant.successes, variant.effectiveness) == (3, 2, 1, 0.5)


def test_a_variants_status_changes_only_from_the_status_the_caller_saw(ledger: EvolutionLedger) -> None:
    ledger.add_variant(KEY, "Put numbers in order", MANIFEST)
    assert not ledger.set_variant_status(KEY, "1", "active", "deprecated")
    assert ledger.set_variant_status(KEY, "1", "testing", "active")
    assert not ledger.set_variant_status(KEY, "1", "testing", "deprecated")  # another worker acted first
    assert not ledger.set_variant_status(KEY, "9", "testing", "active")  # no such variant
    assert [(v.id, v.status) for v in ledger.variants(KEY)] == [("0", "active"), ("1", "active")]

"""Contract of the StateStore port (selection/ports.py): one suite, every implementation.

Runs against RedisStateStore on the session's private Redis (with a bytes client and with a
decode_responses client, the test's own prefix, cleared at the end) and InMemoryStateStore.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from selection.models import FailureCount, Promotion, Severity
from selection.ports import DURATIONS_KEPT, SelectionWeights, StateStore, ToolStats
from selection.quality import FULL_QUALITY_BP, apply_failure_bp, bp_to_quality
from selection.percentile import percentile
from tests.fakes_state import InMemoryStateStore
from workers.state.redis import RedisStateStore

KEY = "translate_text@1.0.0"
OTHER = "summarise_text@1.0.0"


@pytest.fixture(params=["redis", "redis-decoded", "memory"])
def store(request: pytest.FixtureRequest):
    # Each implementation is given to the tests as the port: mypy checks that it is one, with the
    # port's signatures (an isinstance check of the runtime_checkable Protocol sees only the names).
    if request.param == "memory":
        memory: StateStore = InMemoryStateStore()
        yield memory
        return
    url = request.getfixturevalue("redis_url")
    prefix = request.getfixturevalue("run_prefix")
    client = redis.Redis.from_url(url, decode_responses=request.param == "redis-decoded")
    s = RedisStateStore(client, prefix)
    port: StateStore = s
    try:
        yield port
    finally:
        s.clear()
        assert list(client.scan_iter(match=prefix + "*")) == []
        client.close()


def aid() -> str:
    return uuid.uuid4().hex


def count_success(store, key: str, attempt_id: str) -> bool:
    return store.record_successes([(key, attempt_id)])[0]


def feed(store, key: str, success: bool, threshold: int, cooldown_s: float) -> str | None:
    """One run of `key` with this outcome, as the executor reports it (its duration is 1 ms)."""
    return store.record_run(key, 1.0, success, threshold=threshold, cooldown_s=cooldown_s)


def recent(store, key: str) -> tuple[int, float | None]:
    """How many recent runs of `key` the store keeps, and their p95 (ms): what the adaptive timeout reads."""
    stats = store.stats_and_breakers([key])[0][key]
    return stats.recent_runs, stats.recent_p95_ms


def breakers(store, keys: list[str]) -> dict[str, str]:
    return store.stats_and_breakers(keys)[1]


def expected_chain(severities: list[Severity]) -> list[tuple[int, int]]:
    """(quality bp, failures) after each failure, applied one by one with selection/quality.py."""
    q, f, out = FULL_QUALITY_BP, 0, []
    for s in severities:
        q, f = apply_failure_bp(q, f, s)
        out.append((q, f))
    return out


# Quality --------------------------------------------------------------------------------------


def test_default_stats_for_unknown_keys(store):
    assert store.stats([KEY, "other@2.0.0"]) == {KEY: ToolStats(), "other@2.0.0": ToolStats()}
    assert store.stats([KEY])[KEY].quality == 1.0
    assert store.stats([]) == {}


@pytest.mark.parametrize(("severity", "quality"), [(Severity.low, 0.99), (Severity.medium, 0.95), (Severity.high, 0.90)])
def test_one_failure_costs_its_severity(store, severity, quality):
    result = store.mark_failure(KEY, aid(), severity)
    assert (result.applied, result.quality, result.failures) == (True, quality, 1)
    assert store.stats([KEY])[KEY] == ToolStats(quality=quality, successes=0, failures=1)


def test_extra_penalty_past_5_and_past_10_failures(store):
    qualities = [store.mark_failure(KEY, aid(), Severity.low).quality for _ in range(12)]
    # 1..5: -0.01 each; 6..10: -0.01 - 0.05 each; 11 on: -0.01 - 0.10 each (not -0.15).
    assert qualities[4] == 0.95
    assert qualities[5] == 0.89
    assert qualities[9] == 0.65
    assert qualities[10] == 0.54
    assert qualities[11] == 0.43
    assert store.stats([KEY])[KEY].failures == 12


def test_forgiven_failures_give_back_what_they_cost_once(store):
    """QA 56a M3: a recovered outage's failures were flagged forgiven, and the version stayed at the
    quality they took it to (0.77 -> 0.21), where its successes give no feedback at all."""
    early = [store.mark_failure(KEY, aid(), Severity.high) for _ in range(6)]
    assert early[-1].quality == 0.35  # the 6th cost the extra 0.05
    outage = [(a, store.mark_failure(KEY, a, Severity.high)) for a in [aid() for _ in range(4)]]
    assert [applied.quality for _, applied in outage] == [0.2, 0.05, 0.0, 0.0]  # the floor: the last cost nothing
    costs = [(a, applied.cost_bp) for a, applied in outage]
    assert [cost for _, cost in costs] == [1500, 1500, 500, 0]
    before = store.versions().state
    assert store.forgive_failures(KEY, costs) == 4
    stats = store.stats([KEY])[KEY]
    assert (stats.quality, stats.failures) == (0.35, 6)  # as before the outage
    assert store.versions().state > before  # selection's cached searches see the new quality
    assert store.forgive_failures(KEY, costs[:1]) == 0  # sent again: nothing
    assert store.stats([KEY])[KEY] == stats
    # Its next failure costs what a 7th costs: the forgiven ones no longer raise the extra.
    assert store.mark_failure(KEY, aid(), Severity.high).quality == 0.2


@pytest.mark.parametrize("counted", [FailureCount.refused_input, FailureCount.not_its_job, FailureCount.declared_refusal])
def test_a_failure_counted_without_demotion_leaves_the_quality_and_the_cost_of_later_failures(store, counted):
    """QA AE: refused inputs that were the callers' mistakes took a tool from 1.00 to 0.43; QA ops:
    counted among its failures, ten of them made its next crash cost 0.20, not 0.10. QA new user:
    a fallback's refusals of another tool's job took two tools to 0.21 and 0.34."""
    for _ in range(11):
        result = store.mark_failure(KEY, aid(), Severity.low, counted)
        assert result.applied and result.quality == 1.0
    stats = store.stats([KEY])[KEY]
    assert (stats.failures, stats.refused_inputs) == (0, 11)
    assert store.stats_and_breakers([KEY])[0][KEY].refused_inputs == 11  # what `fittest tools` reads
    assert store.mark_failure(KEY, aid(), Severity.high).quality == 0.9  # its first failure: the base penalty, no extra
    assert store.stats([KEY])[KEY].failures == 1


def test_a_refusal_of_another_tools_job_moves_the_state_version_the_caller_s_mistake_does_not(store):
    """The first is remembered near its job as a failure, which selection's cached searches must
    see; the second is set aside, and nothing selection reads changes."""
    before = store.versions().state
    store.mark_failure(KEY, aid(), Severity.low, FailureCount.refused_input)
    assert store.versions().state == before
    store.mark_failure(KEY, aid(), Severity.low, FailureCount.not_its_job)
    assert store.versions().state > before


def test_a_success_ends_a_versions_run_of_refused_inputs(store):
    """A version that refuses every input may be broken: selection counts its refusals since its
    last success (selection/job_record.py `does_the_job`)."""
    for _ in range(3):
        store.mark_failure(KEY, aid(), Severity.low, FailureCount.refused_input)
    store.mark_failure(KEY, aid(), Severity.low)  # a failure of its own neither ends the run nor adds to it
    # nor does a refusal of another tool's job: that input was never its to take; nor one its test
    # cases expect, the tool doing its job (QA 65b)
    store.mark_failure(KEY, aid(), Severity.low, FailureCount.not_its_job)
    store.mark_failure(KEY, aid(), Severity.low, FailureCount.declared_refusal)
    assert (store.stats([KEY])[KEY].refused_in_a_row, store.stats_and_breakers([KEY])[0][KEY].refused_in_a_row) == (3, 3)
    assert count_success(store, KEY, aid())
    store.mark_failure(KEY, aid(), Severity.low, FailureCount.refused_input)
    assert (store.stats([KEY])[KEY].refused_in_a_row, store.stats([KEY])[KEY].refused_inputs) == (1, 6)


def test_a_failure_says_whether_it_took_the_quality_under_a_threshold(store):
    """Only the failure that crosses the threshold starts a quality-triggered evolution; a
    version below it already is not evolved again at every failure."""
    first = store.mark_failure("t@1", "a1", Severity.high)  # 1.00 -> 0.90
    assert (first.quality_before, first.quality) == (1.0, 0.9) and first.fell_below(0.95) and not first.fell_below(0.9)
    second = store.mark_failure("t@1", "a2", Severity.high)  # 0.90 -> 0.80
    assert second.quality_before == 0.9 and not second.fell_below(0.95) and second.fell_below(0.85)
    again = store.mark_failure("t@1", "a2", Severity.high)  # a redelivery: nothing applied, nothing crossed
    assert not again.applied and not again.fell_below(0.85)

def test_mixed_severities_match_quality_rule_step_by_step(store):
    severities = [list(Severity)[(i * 7 + i // 3) % 3] for i in range(25)]
    got = []
    for s in severities:
        r = store.mark_failure(KEY, aid(), s)
        got.append((round(r.quality * FULL_QUALITY_BP), r.failures))
    assert got == expected_chain(severities)


def test_quality_floors_at_zero(store):
    for _ in range(15):
        r = store.mark_failure(KEY, aid(), Severity.high)
    assert (r.quality, r.failures) == (0.0, 15)
    assert store.stats([KEY])[KEY].quality == 0.0


def test_same_attempt_id_applies_once(store):
    attempt = aid()
    first = store.mark_failure(KEY, attempt, Severity.high)
    version = store.versions().state
    again = store.mark_failure(KEY, attempt, Severity.high)
    other_severity = store.mark_failure(KEY, attempt, Severity.low)
    assert first.applied and not again.applied and not other_severity.applied
    assert (again.quality, again.failures) == (0.9, 1) == (other_severity.quality, other_severity.failures)
    assert store.stats([KEY])[KEY] == ToolStats(quality=0.9, failures=1)
    assert store.versions().state == version


def test_a_success_counts_once_and_keeps_quality(store):
    store.mark_failure(KEY, aid(), Severity.medium)
    version = store.versions().state
    attempt = aid()
    assert count_success(store, KEY, attempt) is True
    assert count_success(store, KEY, attempt) is False
    assert count_success(store, KEY, aid()) is True
    assert store.stats([KEY])[KEY] == ToolStats(quality=0.95, successes=2, failures=1)
    assert store.versions().state == version  # a success changes no quality: caches stay valid


def test_record_successes_counts_each_attempt_once_in_order(store):
    first, second, other = aid(), aid(), aid()
    assert store.record_successes([]) == []
    assert store.record_successes([(KEY, first), (KEY, second), (KEY, first), (OTHER, other)]) == [True, True, False, True]
    assert store.record_successes([(KEY, second), (OTHER, other)]) == [False, False]  # a redelivered batch
    stats = store.stats([KEY, OTHER])
    assert (stats[KEY].successes, stats[OTHER].successes) == (2, 1)


def test_an_output_judged_wrong_counts_as_a_failure_once_and_judged_right_again_as_a_success(store):
    """QA W: `fittest tools` counted 31 outputs people judged wrong as successes."""
    store.record_successes([(KEY, aid()), (KEY, aid())])
    assert store.judge_output(KEY, "c1", "negative") is True
    assert store.judge_output(KEY, "c1", "negative") is False  # sent again: once
    assert (store.stats([KEY])[KEY].successes, store.stats([KEY])[KEY].failures) == (1, 1)
    assert store.judge_output(KEY, "c1", "positive") is True  # a person changed their mind
    assert (store.stats([KEY])[KEY].successes, store.stats([KEY])[KEY].failures) == (2, 0)
    assert store.judge_output(KEY, "c2", "positive") is False  # right as it ran: nothing to move
    assert (store.stats([KEY])[KEY].successes, store.stats([KEY])[KEY].failures) == (2, 0)
    assert store.stats([KEY])[KEY].quality == 1.0  # quality is the failures' severity: unchanged


def test_a_judgement_that_comes_before_its_calls_success_is_counted_counts_that_call_once(store):
    """QA 59b F4: a person's judgement, found by the call's stored result, can be applied before the
    batched outcome counts the call's success. A version with no success yet counted the call as a
    success and a failure, and, judged right again, as two successes."""
    judged = "judged-early"
    assert store.judge_output(KEY, judged, "negative")
    store.record_successes([(KEY, f"{judged}:0")])
    assert (store.stats([KEY])[KEY].successes, store.stats([KEY])[KEY].failures) == (0, 1)
    assert store.judge_output(KEY, judged, "positive")
    assert (store.stats([KEY])[KEY].successes, store.stats([KEY])[KEY].failures) == (1, 0)

    other, other_key = "judged-then-right", "summarize_text@1.0.0"  # judged wrong, then right, then counted
    assert store.judge_output(other_key, other, "negative")
    assert store.judge_output(other_key, other, "positive")
    store.record_successes([(other_key, f"{other}:1")])
    assert (store.stats([other_key])[other_key].successes, store.stats([other_key])[other_key].failures) == (1, 0)
    store.record_successes([(other_key, aid()), (other_key, aid())])  # a version with successes: moved at once
    assert store.judge_output(other_key, "later", "negative")
    store.record_successes([(other_key, "later:0")])
    assert (store.stats([other_key])[other_key].successes, store.stats([other_key])[other_key].failures) == (3, 1)

    # QA 59f F2: a call judged wrong early whose success never comes (set aside) holds nothing back of
    # another call's: judged wrong and then right again, that one counts as the success it is
    third = "summarize_rows@1.0.0"
    assert store.judge_output(third, "never-counted", "negative")
    store.record_successes([(third, "other-call:0")])
    assert store.judge_output(third, "other-call", "negative") and store.judge_output(third, "other-call", "positive")
    assert (store.stats([third])[third].successes, store.stats([third])[third].failures) == (1, 1)


def test_outputs_judged_wrong_leave_the_cost_of_later_failures_as_it_was(store):
    """QA ops: one output judged wrong made a version's 5th timeout its 6th failure, which cost the
    extra 0.05 of a sixth; after the same 5 timeouts it stood at 0.70 where its fallback, not judged,
    stood at 0.75."""
    calls = [f"c{i}" for i in range(6)]
    store.record_successes([(KEY, aid()) for _ in calls])
    for call in calls:
        assert store.judge_output(KEY, call, "negative")
    assert store.judge_output(KEY, calls[0], "positive")  # one taken back: 5 judged wrong
    qualities = [store.mark_failure(KEY, aid(), Severity.low).quality for _ in range(6)]
    assert qualities[4] == 0.95 and qualities[5] == 0.89  # as for a version nobody judged: the extra from its 6th
    assert store.stats([KEY])[KEY].failures == 11  # the 5 judged wrong are failures still, as `fittest tools` shows


def test_an_attempt_counts_once_as_a_success_or_a_failure_whichever_comes_first(store):
    """QA resilience: an executor frozen past its lease woke and marked its attempt a timeout, while
    the copy given back to the queue had run it to a success: the attempt counted as both, and a
    correct tool fell from 1.00 to 0.95 beside its success."""
    attempt = aid()
    assert count_success(store, KEY, attempt)
    assert not store.mark_failure(KEY, attempt, Severity.low).applied
    assert store.stats([KEY])[KEY] == ToolStats(quality=1.0, successes=1, failures=0)
    failed = aid()
    assert store.mark_failure(KEY, failed, Severity.low).applied
    assert store.record_successes([(KEY, failed)]) == [False]
    assert store.stats([KEY])[KEY] == ToolStats(quality=0.99, successes=1, failures=1)
    # its breaker is fed once per attempt, by its own guard
    assert store.record_run(KEY, 1.0, False, threshold=5, cooldown_s=60, attempt_id=attempt) == "closed"


def test_set_quality(store):
    v0 = store.versions().state
    store.set_quality(KEY, 0.73)
    assert store.versions().state > v0
    assert store.stats([KEY])[KEY] == ToolStats(quality=0.73)
    assert store.mark_failure(KEY, aid(), Severity.low).quality == 0.72
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError):
            store.set_quality(KEY, bad)


def test_stats_of_many_keys(store):
    keys = [f"tool_{i}@1.0.0" for i in range(30)]
    for i, key in enumerate(keys[:10]):
        for _ in range(i):
            store.mark_failure(key, aid(), Severity.low)
        count_success(store, key, aid())
    stats = store.stats(keys)
    assert list(stats) == keys
    for i, key in enumerate(keys[:10]):
        assert stats[key] == ToolStats(quality=bp_to_quality(expected_chain([Severity.low] * i)[-1][0]) if i else 1.0, successes=1, failures=i)
    assert all(stats[key] == ToolStats() for key in keys[10:])


def test_all_stats_are_those_of_every_version_counted_or_set(store):
    assert store.all_stats() == {}
    store.set_quality(KEY, 0.5)
    count_success(store, OTHER, aid())
    store.mark_failure("third@1.0.0", aid(), Severity.low)
    store.stats(["never_counted@1.0.0"])
    assert store.all_stats() == store.stats([KEY, OTHER, "third@1.0.0"])


def test_concurrent_failures_from_threads_lose_nothing(store):
    def work(t: int) -> None:
        for j in range(40):
            store.mark_failure(KEY, f"th{t}-{j}", Severity.low)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert store.stats([KEY])[KEY].failures == 240
    assert store.stats([KEY])[KEY].quality == bp_to_quality(expected_chain([Severity.low] * 240)[-1][0])


# Newcomers ------------------------------------------------------------------------------------


def test_the_first_catalog_has_no_newcomers_and_a_namespace_added_later_is_one(store):
    assert store.note_namespaces(["slugify", "word_stats"], now=100.0) == []  # the catalog it started with
    assert store.newcomers() == {}
    before = store.versions()
    assert store.note_namespaces(["word_stats", "toml2json", "slugify"], now=200.0) == ["toml2json"]
    after = store.versions()
    # Selectors cache what they read per promotions version: a newcomer must move it.
    assert after.promotions > before.promotions and after.state > before.state
    assert store.note_namespaces(["toml2json", "slugify"], now=300.0) == []  # once, when it came
    assert store.versions() == after
    assert store.newcomers() == {"toml2json": 200.0}
    assert store.note_namespaces([], now=400.0) == []



def test_a_namespace_whose_original_was_replaced_is_a_newcomer_again(store):
    store.note_namespaces(["slugify", "tidy_list"], now=100.0)
    before = store.versions()
    store.renew_newcomers(["tidy_list"], now=500.0)
    assert store.newcomers() == {"tidy_list": 500.0}
    after = store.versions()
    assert after.promotions > before.promotions and after.state > before.state
    store.renew_newcomers([], now=600.0)
    assert store.versions() == after and store.newcomers() == {"tidy_list": 500.0}


# Promotions -----------------------------------------------------------------------------------


def promotion(ns: str, evolved: str, status: str = "on_trial") -> Promotion:
    return Promotion(namespace=ns, evolved_version=evolved, original_version="1.0.0", reason="all failed",
                     mutation="timeout", status=status)


def test_promote_and_history(store):
    assert store.promotion("translate_text") is None
    assert store.promotion_history("translate_text") == []
    v0 = store.versions().state
    first = promotion("translate_text", "1.1.0")
    second = promotion("translate_text", "1.2.0", status="active")
    store.promote(first)
    store.promote(second)
    store.promote(promotion("summarise", "2.1.0"))
    assert store.promotion("translate_text") == second
    assert store.promotion_history("translate_text") == [first, second]
    assert [p.evolved_version for p in store.promotion_history("summarise")] == ["2.1.0"]
    assert store.versions().state == v0 + 3


def test_all_promotion_histories_are_those_of_every_namespace_promoted(store):
    assert store.all_promotion_histories() == {}
    store.promote(promotion("translate_text", "1.1.0"))
    store.promote(promotion("translate_text", "1.2.0", status="active"))
    store.promote(promotion("summarise", "2.1.0"))
    assert store.all_promotion_histories() == {ns: store.promotion_history(ns) for ns in ("translate_text", "summarise")}


def test_promote_if_changes_only_the_promotion_it_was_decided_on(store):
    assert not store.promote_if(promotion("translate_text", "1.1.0", "active"), "1.1.0", ["on_trial"])  # none yet
    trial = promotion("translate_text", "1.1.0")
    store.promote(trial)
    v0 = store.versions().state
    active = promotion("translate_text", "1.1.0", status="active")
    assert not store.promote_if(active, "1.0.5", ["on_trial"])  # another version
    assert not store.promote_if(active, "1.1.0", ["active", "rolled_back"])  # another status
    assert store.versions().state == v0 and store.promotion("translate_text") == trial
    assert store.promote_if(active, "1.1.0", ["on_trial"])
    assert not store.promote_if(promotion("translate_text", "1.1.0", "rolled_back"), "1.1.0", ["on_trial"])  # decided already
    assert store.promotion("translate_text") == active
    assert store.promotion_history("translate_text") == [trial, active]
    assert store.versions().state == v0 + 1
    assert not store.promote_if(trial, None, ["on_trial"])  # None: only while there is no promotion
    first = promotion("summarise", "2.0.0")
    assert store.promote_if(first, None, ["on_trial"]) and store.promotion("summarise") == first
    assert not store.promote_if(promotion("summarise", "2.1.0"), None, ["on_trial"])  # one came meanwhile


def test_promote_if_is_atomic_under_concurrent_verdicts(store):
    store.promote(promotion("translate_text", "1.1.0"))
    verdicts = [promotion("translate_text", "1.1.0", status=s) for s in ("active", "rolled_back") * 8]
    won: list[bool] = []
    threads = [threading.Thread(target=lambda p=p: won.append(store.promote_if(p, "1.1.0", ["on_trial"]))) for p in verdicts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won.count(True) == 1
    assert len(store.promotion_history("translate_text")) == 2


def test_promotions_of_many_namespaces_at_once(store):
    assert store.promotions([]) == {}
    current = promotion("translate_text", "1.2.0", status="active")
    store.promote(promotion("translate_text", "1.1.0"))
    store.promote(current)
    got = store.promotions(["translate_text", "never_promoted", "translate_text"])
    assert got == {"translate_text": current, "never_promoted": None}


# Weights --------------------------------------------------------------------------------------


def test_weights_default_versioning_and_history(store):
    assert store.weights() == SelectionWeights()
    assert store.weights().version == 0
    assert store.weights_history() == []
    v0 = store.versions().state

    w1 = store.set_weights(SelectionWeights(version=99, weights={"phase": 0.5, "language": 0.5}, evidence={"records": 12}))
    w2 = store.set_weights(SelectionWeights(weights={"phase": 0.1, "history": 0.9}, updated_at=123.5))
    assert (w1.version, w2.version) == (1, 2)  # the store numbers versions; the caller's is ignored
    assert w1.weights == {"phase": 0.5, "language": 0.5} and w1.evidence.records == 12 and w1.updated_at > 0
    assert w2.updated_at == 123.5
    assert store.weights() == w2
    assert store.weights_history(10) == [w2, w1]
    assert store.weights_history(1) == [w2]
    assert store.versions().state == v0 + 2

    with pytest.raises(ValueError):
        store.set_weights(SelectionWeights(weights={"phase": float("inf")}))
    assert store.weights() == w2


def test_the_tool_classifier_is_stored_with_its_weights(store):
    assert store.classifier() is None
    w1 = store.set_weights(SelectionWeights(classifier="rev1"), classifier="model text 1")
    assert (w1.classifier, store.classifier()) == ("rev1", "model text 1")
    # Weights stored without a classifier keep the stored one (they name it again).
    w2 = store.set_weights(SelectionWeights(weights={"phase": 1.0}, classifier="rev1"))
    assert (w2.version, store.weights().classifier, store.classifier()) == (2, "rev1", "model text 1")
    store.set_weights(SelectionWeights(classifier="rev2"), classifier="model text 2")
    assert store.classifier() == "model text 2"
    assert [w.classifier for w in store.weights_history(3)] == ["rev2", "rev1", "rev1"]
    store.clear()
    assert store.classifier() is None


def test_state_version_grows_with_every_change(store):
    seen = [store.versions().state]

    def changed() -> None:
        seen.append(store.versions().state)
        assert seen[-1] > seen[-2]

    store.mark_failure(KEY, aid(), Severity.low)
    changed()
    store.set_quality(KEY, 0.5)
    changed()
    store.promote(promotion("translate_text", "1.1.0"))
    changed()
    store.set_weights(SelectionWeights())
    changed()
    feed(store, KEY, False, threshold=1, cooldown_s=30)
    changed()  # a breaker opening changes what selection may offer
    feed(store, KEY, True, threshold=1, cooldown_s=30)
    changed()
    before = store.versions()
    assert before.judgements == 0
    store.note_judgement()  # a person's feedback, kept in the vector memory
    changed()
    after = store.versions()
    assert (after.promotions, after.weights, after.epoch, after.judgements) == (
        before.promotions, before.weights, before.epoch, 1)


# Circuit breakers -----------------------------------------------------------------------------


# Long enough that a busy machine's stall between two steps (F saw ~0.3 s) does not outlast it.
COOL_S = 1.0


def test_breaker_opens_half_opens_and_closes(store):
    other = "other@1.0.0"
    assert breakers(store, [KEY, other]) == {KEY: "closed", other: "closed"}
    assert feed(store, KEY, False, threshold=3, cooldown_s=COOL_S) == "closed"
    assert feed(store, KEY, False, threshold=3, cooldown_s=COOL_S) == "closed"
    assert feed(store, KEY, False, threshold=3, cooldown_s=COOL_S) == "open"
    assert breakers(store, [KEY, other]) == {KEY: "open", other: "closed"}
    time.sleep(COOL_S * 1.5)
    assert breakers(store, [KEY]) == {KEY: "half_open"}
    assert feed(store, KEY, False, threshold=3, cooldown_s=COOL_S) == "open"  # the probe failed
    assert breakers(store, [KEY]) == {KEY: "open"}
    time.sleep(COOL_S * 1.5)
    assert breakers(store, [KEY]) == {KEY: "half_open"}
    assert feed(store, KEY, True, threshold=3, cooldown_s=COOL_S) == "recovered"  # the probe succeeded
    assert breakers(store, [KEY]) == {KEY: "closed"}
    assert feed(store, KEY, True, threshold=3, cooldown_s=COOL_S) == "closed"  # a success of a closed breaker
    # closed again: it takes `threshold` consecutive failures to open it anew
    assert feed(store, KEY, False, threshold=3, cooldown_s=COOL_S) == "closed"


def test_breaker_counts_consecutive_failures_only(store):
    for _ in range(2):
        feed(store, KEY, False, threshold=3, cooldown_s=30)
    feed(store, KEY, True, threshold=3, cooldown_s=30)
    for _ in range(2):
        assert feed(store, KEY, False, threshold=3, cooldown_s=30) == "closed"
    assert breakers(store, [KEY]) == {KEY: "closed"}


def test_breaker_late_failures_do_not_extend_the_cool_down(store):
    feed(store, KEY, False, threshold=1, cooldown_s=2 * COOL_S)
    time.sleep(COOL_S)  # half way through the cool-down
    assert feed(store, KEY, False, threshold=1, cooldown_s=2 * COOL_S) == "open"
    time.sleep(COOL_S * 1.5)  # past the first cool-down's end, before an extended one's
    assert breakers(store, [KEY]) == {KEY: "half_open"}


def test_a_run_with_bad_arguments_is_refused_and_changes_nothing(store):
    with pytest.raises(ValueError, match="threshold"):
        feed(store, KEY, False, threshold=0, cooldown_s=1)
    with pytest.raises(ValueError, match="cooldown_s"):
        feed(store, KEY, False, threshold=1, cooldown_s=-1)
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError, match="duration"):
            store.record_run(KEY, bad, False, threshold=1, cooldown_s=1)
    assert recent(store, KEY) == (0, None)
    assert breakers(store, [KEY]) == {KEY: "closed"}
    # an outcome that says nothing about the tool does not feed the breaker, so its settings are not asked for
    assert store.record_run(KEY, 1.0, None, threshold=0, cooldown_s=-1) is None


# Durations ------------------------------------------------------------------------------------


def test_the_most_recent_durations_are_kept(store):
    for ms in [10.0, 20.5, 30.25, 40.0, 50.125, 60.0, 12.345]:
        store.record_run(KEY, ms, None, threshold=1, cooldown_s=0)
    assert recent(store, KEY) == (7, 60.0)
    assert recent(store, "never@1.0.0") == (0, None)
    for ms in [100.0] * 10 + [1.5] * (DURATIONS_KEPT + 10):
        store.record_run("many@1.0.0", ms, None, threshold=1, cooldown_s=0)
    assert recent(store, "many@1.0.0") == (DURATIONS_KEPT, 1.5)  # the oldest went; kept, they would give 100.0


# Locks ----------------------------------------------------------------------------------------


def test_lock_is_exclusive_and_released_only_by_its_owner(store):
    assert store.acquire_lock("evolve:translate_text", "worker-a", ttl_s=30)
    assert not store.acquire_lock("evolve:translate_text", "worker-b", ttl_s=30)
    assert not store.acquire_lock("evolve:translate_text", "worker-a", ttl_s=30)  # not re-entrant
    assert store.acquire_lock("evolve:summarise", "worker-b", ttl_s=30)  # locks are per name
    assert not store.release_lock("evolve:translate_text", "worker-b")
    assert not store.acquire_lock("evolve:translate_text", "worker-b", ttl_s=30)
    assert store.release_lock("evolve:translate_text", "worker-a")
    assert not store.release_lock("evolve:translate_text", "worker-a")
    assert store.acquire_lock("evolve:translate_text", "worker-b", ttl_s=30)


def test_a_lock_is_reclaimed_by_its_own_owner_only(store):
    """An evolution job delivered again after its run was killed holding the lock goes on at once."""
    assert store.acquire_lock("evolve:x", "job-a", ttl_s=0.3)
    assert not store.acquire_lock("evolve:x", "job-b", ttl_s=30, reclaim=True)
    assert store.acquire_lock("evolve:x", "job-a", ttl_s=30, reclaim=True)
    time.sleep(0.45)
    assert not store.acquire_lock("evolve:x", "job-b", ttl_s=30)  # reclaimed with a fresh TTL
    assert store.release_lock("evolve:x", "job-a")
    assert store.acquire_lock("evolve:x", "job-b", ttl_s=30, reclaim=True)  # a free lock is taken as ever


def test_lock_expires(store):
    assert store.acquire_lock("evolve:x", "worker-a", ttl_s=0.2)
    time.sleep(0.35)
    assert store.acquire_lock("evolve:x", "worker-b", ttl_s=30)
    assert not store.release_lock("evolve:x", "worker-a")  # its lock expired; b's is left alone
    assert store.release_lock("evolve:x", "worker-b")


# Clear ----------------------------------------------------------------------------------------


def populate(store) -> None:
    store.mark_failure(KEY, aid(), Severity.high)
    count_success(store, KEY, aid())
    store.record_run(KEY, 1.0, False, threshold=5, cooldown_s=60, attempt_id="populate:0")  # an idempotency key
    store.promote(promotion("translate_text", "1.1.0"))
    store.set_weights(SelectionWeights())
    feed(store, KEY, False, threshold=1, cooldown_s=30)  # a breaker and a duration
    store.acquire_lock("evolve:translate_text", "a", ttl_s=30)


def test_clear_resets_everything(store):
    populate(store)
    before = store.versions()
    store.clear()
    assert store.stats([KEY])[KEY] == ToolStats()
    assert store.promotion("translate_text") is None and store.promotion_history("translate_text") == []
    assert store.weights() == SelectionWeights() and store.weights_history() == []
    after = store.versions()
    assert (after.state, after.promotions, after.weights) == (0, 0, 0)  # the versions start again...
    assert after.epoch and after.epoch != before.epoch  # ...under a new epoch
    assert breakers(store, [KEY]) == {KEY: "closed"}
    assert recent(store, KEY) == (0, None)
    assert store.acquire_lock("evolve:translate_text", "b", ttl_s=30)
    assert store.record_run(KEY, 1.0, False, threshold=5, cooldown_s=60, attempt_id="populate:0") == "closed"


def test_clear_removes_only_its_own_prefix(redis_client: redis.Redis, run_prefix: str):
    def under(prefix: str) -> list[bytes]:
        return [k for k in redis_client.scan_iter(match=f"{run_prefix}*") if k.startswith(prefix.encode())]

    neighbour_prefix = run_prefix[:-1] + "X"  # same length, differs in the last character
    foreign = [f"foreign_{run_prefix}", f"{neighbour_prefix}tool:{KEY}", run_prefix[:-1]]
    # A prefix of glob characters: unescaped, its SCAN pattern would match `lookalike` and miss
    # the store's own keys.
    glob_store = RedisStateStore(redis_client, f"{run_prefix}*?[x]\\:")
    lookalike = f"{run_prefix}Zsx:tool:{KEY}"
    mine = RedisStateStore(redis_client, run_prefix)
    try:
        for key in [*foreign, lookalike]:
            redis_client.set(key, "not yours")
        populate(glob_store)
        assert len(under(glob_store.prefix)) >= 8

        glob_store.clear()
        assert under(glob_store.prefix) == []
        assert all(redis_client.get(k) == b"not yours" for k in [*foreign, lookalike])

        populate(mine)
        mine.clear()
        assert under(run_prefix) == []
        assert all(redis_client.get(k) == b"not yours" for k in foreign)
    finally:
        redis_client.delete(*foreign, lookalike)
        glob_store.clear()
        mine.clear()


def test_empty_prefix_is_refused(redis_client: redis.Redis):
    with pytest.raises(ValueError):
        RedisStateStore(redis_client, "")


def test_stats_and_breakers_reads_counters_breakers_and_recent_runs_at_once(store):
    other = "summarise@2.0.0"
    store.mark_failure(KEY, aid(), Severity.high)
    for _ in range(2):
        feed(store, other, False, threshold=2, cooldown_s=60)
    stats, states = store.stats_and_breakers([KEY, other, KEY])
    counters = store.stats([KEY, other])
    assert {k: (v.quality, v.successes, v.failures) for k, v in stats.items()} == {
        k: (v.quality, v.successes, v.failures) for k, v in counters.items()}
    assert (stats[KEY].recent_runs, stats[other].recent_runs) == (0, 2)
    assert states == {KEY: "closed", other: "open"}
    assert store.stats_and_breakers([]) == ({}, {})


def test_record_run_appends_the_duration_and_feeds_the_breaker(store):
    assert store.record_run(KEY, 12.5, False, threshold=2, cooldown_s=60) == "closed"
    assert store.record_run(KEY, 7.0, None, threshold=2, cooldown_s=60) is None  # breaker untouched
    assert breakers(store, [KEY]) == {KEY: "closed"}
    assert store.record_run(KEY, 3.0, False, threshold=2, cooldown_s=60) == "open"
    assert recent(store, KEY) == (3, 12.5)
    assert store.record_run(KEY, 1.0, True, threshold=2, cooldown_s=60) == "recovered"  # it had opened
    assert recent(store, KEY) == (4, 12.5)


def test_selection_reads_the_recent_run_summary_the_timeout_is_made_of(store):
    """stats_and_breakers carries each version's run count and p95, the figures the attempt's
    adaptive timeout is computed from, so the executor need not read the durations again."""
    runs = [float(ms) for ms in range(10, 210, 10)]  # 20 runs: p95 by nearest rank is the 19th
    for ms in runs:
        store.record_run(KEY, ms, True, threshold=2, cooldown_s=60)
    stats, _ = store.stats_and_breakers([KEY, "never@1.0.0"])
    assert (stats[KEY].recent_runs, stats[KEY].recent_p95_ms) == (20, 190.0)
    assert stats[KEY].recent_p95_ms == percentile(runs, 0.95)
    assert (stats["never@1.0.0"].recent_runs, stats["never@1.0.0"].recent_p95_ms) == (0, None)


def test_record_run_feeds_the_breaker_once_per_attempt(store):
    """A redelivered attempt adds its duration again but cannot count as a second failure; it is
    told what its first delivery was told."""
    assert store.record_run(KEY, 5.0, False, threshold=2, cooldown_s=60, attempt_id="c1:0") == "closed"
    assert store.record_run(KEY, 5.0, False, threshold=2, cooldown_s=60, attempt_id="c1:0") == "closed"
    assert breakers(store, [KEY]) == {KEY: "closed"}
    assert store.record_run(KEY, 5.0, False, threshold=2, cooldown_s=60, attempt_id="c1:1") == "open"


def test_a_probe_delivered_again_still_says_it_recovered_the_tool(store):
    """A probe whose worker died after its run, before the memory worker heard of it, runs again:
    the copy must still say "recovered", or the tool's outage is never forgiven (workers/outage.py)."""
    for i in range(2):
        store.record_run(KEY, 5.0, False, threshold=2, cooldown_s=0.05, attempt_id=f"down{i}:0")
    time.sleep(0.1)
    assert store.record_run(KEY, 5.0, True, threshold=2, cooldown_s=0.05, attempt_id="probe:0") == "recovered"
    assert store.record_run(KEY, 5.0, True, threshold=2, cooldown_s=0.05, attempt_id="probe:0") == "recovered"
    assert store.record_run(KEY, 5.0, True, threshold=2, cooldown_s=0.05, attempt_id="next:0") == "closed"


def test_the_epoch_stays_while_the_store_keeps_its_keys(store):
    v0 = store.versions()
    assert v0.epoch
    store.promote(promotion("translate_text", "1.1.0"))
    store.set_weights(SelectionWeights(weights={"phase": 1.0}))
    store.mark_failure(KEY, aid(), Severity.low)
    assert store.versions().epoch == v0.epoch


def test_versions_move_promotions_and_weights_only_with_their_own_changes(store):
    """A selector keeps the promotions and weights it read while only quality moves."""
    v0 = store.versions()
    store.mark_failure(KEY, aid(), Severity.low)
    store.set_quality(KEY, 0.5)
    v1 = store.versions()
    assert v1.state == v0.state + 2 and (v1.promotions, v1.weights) == (v0.promotions, v0.weights)
    store.promote(promotion("translate_text", "1.1.0"))
    v2 = store.versions()
    assert (v2.state, v2.promotions, v2.weights) == (v1.state + 1, v1.promotions + 1, v1.weights)
    trial = store.promotion("translate_text")
    assert not store.promote_if(trial.model_copy(update={"status": "active"}), "9.9.9", ["on_trial"])
    assert store.versions() == v2  # a compare-and-set that did not apply moves nothing
    assert store.promote_if(trial.model_copy(update={"status": "active"}), trial.evolved_version, [trial.status])
    v3 = store.versions()
    assert (v3.state, v3.promotions, v3.weights) == (v2.state + 1, v2.promotions + 1, v2.weights)
    stored = store.set_weights(SelectionWeights(weights={"phase": 1.0}))
    v4 = store.versions()
    assert (v4.state, v4.promotions, v4.weights) == (v3.state + 1, v3.promotions, stored.version)


def test_every_key_the_redis_store_writes_is_in_its_documented_key_layout(redis_url: str, run_prefix: str) -> None:
    """The key layout in workers/state/redis.py is what an operator reads to know the store's keys
    in Redis (QA P: `namespaces` and `newcomers`, written by note_namespaces.lua, were missing)."""
    import re

    import workers.state.redis as module

    client = redis.Redis.from_url(url=redis_url, decode_responses=True)
    s = RedisStateStore(client, run_prefix)
    try:
        s.set_quality(KEY, 0.9)
        s.mark_failure(KEY, aid(), Severity.low)
        count_success(s, KEY, aid())
        s.promote(Promotion(namespace="translate_text", evolved_version="1.1.0", original_version="1.0.0"))
        s.note_namespaces(["translate_text"], time.time())
        s.note_namespaces(["translate_text", "summarise_text"], time.time())
        s.set_weights(SelectionWeights(), classifier="abc")
        s.record_run(KEY, 1.0, False, threshold=5, cooldown_s=1.0, attempt_id=aid())
        s.acquire_lock("evolve:translate_text", "me", 5.0)
        s.versions()
        layout = re.findall(r"^    P (\S+)", module.__doc__ or "", flags=re.M)
        patterns = [re.compile(re.escape(run_prefix) + re.sub(r"\\\{\w+\\\}", ".+", re.escape(entry)) + "$") for entry in layout]
        written = sorted(client.scan_iter(match=run_prefix + "*"))
        assert written and [k for k in written if not any(p.match(k) for p in patterns)] == []
    finally:
        s.clear()
        client.close()


def test_the_note_of_a_retrain_that_stored_nothing_is_the_latest_one(store):
    from selection.ports import RetrainNote

    assert store.last_retrain() is None
    store.note_retrain(RetrainNote(at=1.0, evidence={"unchanged": "fewer than 10 records"}))
    store.note_retrain(RetrainNote(at=2.0, evidence={"unchanged": "no component predicts success", "records": 12}))
    assert store.last_retrain() == RetrainNote(at=2.0, evidence={"unchanged": "no component predicts success", "records": 12})


def test_a_change_of_the_vector_memory_moves_the_state_version_on(store):
    """An outage's failures forgiven in the vector memory: no cached search may hide it."""
    before = store.versions()
    store.note_memory_change()
    after = store.versions()
    assert after.state != before.state and (after.promotions, after.weights) == (before.promotions, before.weights)


def test_a_redis_restarted_from_an_older_snapshot_starts_a_new_epoch(tmp_path) -> None:
    """QA 60c F1: a Redis restarted from a snapshot seconds old kept the epoch key and put the
    counters back; once they counted up to a number read before, the selector's cache served the
    promotions it had read then (a promotion made after the restart went unserved on 3 calls of 4)."""
    from tests.conftest import RestartableRedis
    from workers.state.redis import RUN_ID_READ_S

    server = RestartableRedis(tmp_path)
    client = redis.Redis.from_url(server.url)
    try:
        store = RedisStateStore(client, "restarted:")
        before = store.versions()
        assert store.versions().epoch == before.epoch  # the same server: the same epoch
        server.restart()  # from its append-only file: the epoch key and the counters as they were
        time.sleep(RUN_ID_READ_S)
        after = store.versions()
        assert (after.state, after.promotions) == (before.state, before.promotions) and after.epoch != before.epoch
    finally:
        client.close()
        server.stop()

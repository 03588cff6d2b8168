"""A call whose next step was lost (taken off the queue by a worker killed before it recorded the
message as unacknowledged) is sent on again, and only such a call: not one whose step waits in its
queue, is held by a worker, or has ended.

The sweep runs against a private Redis with no worker, so what it sends stays visible in the
queue; the last test runs the real workers, whose own sweep rescues a call."""

from __future__ import annotations

import base64
import gc
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery_batches import SimpleRequest

from selection.models import CallPlan, CallRequest, Candidate, FailureClass, FailureMark, ToolExecutionResult
from tests.broker import queued_messages
from tests.conftest import RedisServer
from tests.integration.conftest import Pipeline, runtime_in_use
from workers.app import make_app
from workers.metrics import reader_for
from workers.rescue import RESENT_HEADER, sweep
from workers.state.base import as_text
from workers.settings import Settings
from workers.state.inflight import DIED_TTL_S, AttemptDeaths, HandedOnStep


@pytest.fixture
def private(tmp_path: Path, model_path: Path, private_redis: RedisServer) -> Iterator[tuple]:
    from workers.runtime import Runtime

    settings = Settings(redis_url=private_redis.url, key_prefix="rescue:", collection_prefix="rescue_", data_dir=tmp_path / "data",
                        tools_dir=tmp_path / "tools", embedding_model_path=model_path, visibility_timeout_s=600)
    (tmp_path / "tools").mkdir()
    try:
        with runtime_in_use(Runtime(settings)) as rt:
            yield make_app(settings), rt, redis.Redis.from_url(private_redis.url)
    finally:
        # A result of this app left in a reference cycle unsubscribes when it is collected: now,
        # while its Redis answers, not in a later module's collection, which retried for ~60 s.
        gc.collect()


def lost(rt, task: str = "fittest.execute", **kwargs) -> HandedOnStep:
    """A step handed on long enough ago to be overdue, whose message went nowhere."""
    step = HandedOnStep(task_id=str(uuid.uuid4()), task=task, args=[{"plan": "p"}, 1], kwargs=kwargs, hop=2)
    rt.inflight.handed_on(step, due_in_s=-1.0)
    rt.inflight.flush()
    return step


def queued(client: redis.Redis, queue: str) -> dict[str, list]:
    """Task id -> positional arguments of the messages waiting in `queue` (any priority)."""
    return {m["headers"]["id"]: json.loads(base64.b64decode(m["body"]))[0] for _, m in queued_messages(client, queue)}


def marked_resent(client: redis.Redis, queue: str) -> dict[str, bool]:
    """Task id -> whether its waiting message is marked as sent again by the sweep."""
    return {m["headers"]["id"]: m["headers"].get(RESENT_HEADER) is True for _, m in queued_messages(client, queue)}


def test_an_overdue_step_that_is_nowhere_is_sent_again_under_the_calls_task_id(private) -> None:
    celery, rt, client = private
    step = lost(rt)
    assert sweep(celery, rt) == [step.task_id]
    assert queued(client, "execution") == {step.task_id: [{"plan": "p"}, 1]}
    assert marked_resent(client, "execution") == {step.task_id: True}  # so that it checks its call has not ended
    [(_, message)] = queued_messages(client, "execution")
    assert message["headers"]["replaced_task_nesting"] == 2  # at its hop: the call's next hand-on counts on
    assert rt.inflight.overdue() == []  # due again one visibility timeout later, not at the next sweep
    assert rt.inflight.count() == 1
    rt.metrics.flush()
    assert reader_for(rt.settings, client).counters()["resent_steps"] == [({"task": "fittest.execute"}, 1)]


def test_a_step_waiting_in_its_queue_or_held_by_a_worker_or_ended_is_not_sent_again(private) -> None:
    celery, rt, client = private
    celery.send_task("fittest.execute", args=[{}, 0], queue="execution", task_id="someone-elses")
    waiting = lost(rt)
    celery.send_task("fittest.execute", args=[{}, 0], queue="execution", task_id=waiting.task_id, priority=9)
    behind = lost(rt)  # lost, while another call's message waits in its queue
    assert sweep(celery, rt) == [behind.task_id]  # QA P: a message of any call in its queue put it off, for good under a backlog
    assert sorted(queued(client, "execution")) == sorted(["someone-elses", waiting.task_id, behind.task_id])

    client.delete(*client.keys("execution*"))
    held = lost(rt)
    client.hset("unacked", "tag1", json.dumps([{"headers": {"id": held.task_id}, "body": ""}, "", "execution"]))
    ended = lost(rt)
    celery.backend.store_result(ended.task_id, {"status": "success"}, "SUCCESS")
    client.delete(*client.keys("rescue:lock:*"))  # the next sweep at once, not one interval later
    rt.inflight.postpone(waiting.task_id, -1.0)
    resent = sweep(celery, rt)
    assert resent == [waiting.task_id]  # its queue is empty now
    assert held.task_id not in resent and ended.task_id not in resent
    assert rt.inflight.overdue() == []
    assert {s.task_id for s in rt.inflight.overdue(now=10**12)} == {waiting.task_id, held.task_id, behind.task_id}  # ended: cleared


def test_a_call_the_client_sent_is_sent_again_when_the_worker_that_took_it_was_killed(private) -> None:
    """Redis has no reliable pop: a worker killed between taking a message off its queue and
    recording it as unacknowledged loses it. For a call's first message only its sender can know."""
    from workers.client import CallSender

    celery, rt, client = private
    kwargs: dict[str, Any] = {"scenario": "sort these numbers", "input": {"numbers": [2, 1]}, "max_attempts": 2}
    sender = CallSender(rt.settings)
    sent = sender.send("resilient_tool_call", **kwargs)
    sender.close()  # writes what it buffered
    assert rt.inflight.current(sent.id) == HandedOnStep(task_id=sent.id, task="fittest.resilient_tool_call",
                                                        kwargs=kwargs, queue="selection")
    due = client.zscore("rescue:inflight:due", sent.id) - time.time()
    assert 600 < due <= 630  # the visibility timeout + 30 s: the broker brings back what a worker holds
    assert list(queued(client, "selection")) == [sent.id]

    client.delete(*client.keys("selection*"))  # taken off the queue by a worker killed at once
    assert sweep(celery, rt) == []  # not overdue yet
    rt.inflight.postpone(sent.id, -1.0)
    client.delete(*client.keys("rescue:lock:*"))
    assert sweep(celery, rt) == [sent.id]
    [(_, message)] = queued_messages(client, "selection")
    assert message["headers"]["id"] == sent.id and message["headers"][RESENT_HEADER] is True
    assert json.loads(base64.b64decode(message["body"]))[:2] == [[], kwargs]  # the call as it was sent


def test_a_step_nowhere_long_after_it_was_recorded_is_sent_again_long_before_its_due_time(private) -> None:
    """QA 52a M3: each SIGKILL of a busy memory worker lost one call's first message (taken off its
    queue, not yet recorded as held), and the call waited for its due time, the visibility timeout
    and more: ~16 min. Nowhere NOWHERE_AFTER_S after it was recorded, it is looked at again one
    confirmation later, and sent again then; a step waiting in its queue, or held, is left alone."""
    from workers.client import CallSender
    from workers.rescue import NOWHERE_AFTER_S, NOWHERE_CONFIRM_S, due_in_s

    celery, rt, client = private
    sender = CallSender(rt.settings)
    lost_call, waiting = (sender.send("resilient_tool_call", scenario=f"sort these numbers {i}", input={"numbers": [2, 1]})
                          for i in range(2))
    sender.close()
    held = lost(rt)
    client.hset("unacked", "tag1", json.dumps([{"headers": {"id": held.task_id}, "body": ""}, "", "execution"]))
    for key in client.keys("selection*"):  # taken off the queue by a worker killed at once
        for raw in client.lrange(key, 0, -1):
            if json.loads(raw)["headers"]["id"] == lost_call.id:
                client.lrem(key, 1, raw)
    assert list(queued(client, "selection")) == [waiting.id]
    long_ago = time.time() + due_in_s(rt) - NOWHERE_AFTER_S - 1  # recorded NOWHERE_AFTER_S ago, and more
    client.zadd("rescue:inflight:due", {lost_call.id: long_ago, waiting.id: long_ago, held.task_id: long_ago})

    assert sweep(celery, rt) == []  # looked at early: not sent yet
    soon = {i: client.zscore("rescue:inflight:due", i) - time.time() for i in (lost_call.id, waiting.id, held.task_id)}
    assert 0 < soon[lost_call.id] <= NOWHERE_CONFIRM_S
    assert soon[waiting.id] > 60 and soon[held.task_id] > 60  # waiting in its queue, or held: as they were
    confirm_at = client.zscore("rescue:inflight:due", lost_call.id)
    client.delete(*client.keys("rescue:lock:*"))
    assert sweep(celery, rt) == []  # the next sweep, before the confirmation is due...
    # ...leaves it due then: each sweep made it due 10 s later again, and it never came due (CI)
    assert client.zscore("rescue:inflight:due", lost_call.id) == confirm_at
    rt.inflight.postpone(lost_call.id, -1.0)  # the confirmation's time has passed
    client.delete(*client.keys("rescue:lock:*"))
    assert sweep(celery, rt) == [lost_call.id]
    assert sorted(marked_resent(client, "selection").items()) == sorted({lost_call.id: True, waiting.id: False}.items())


def test_a_message_taken_by_a_worker_that_died_before_claiming_it_is_given_back_a_lease_later(private) -> None:
    """QA 52c: a memory worker killed under load had taken a message (kombu recorded it as
    unacknowledged) and died before its claim reached Redis: no silent worker held it, and it came
    back only at the visibility timeout, ~16 min. Given back a lease after its delivery when no
    worker claims it; one a live worker claims, a recent one and another program's are left alone."""
    from workers.worker_lease import give_back_unclaimed

    celery, rt, client = private
    ids = {}
    for name in ("lost", "claimed", "recent"):
        ids[name] = celery.send_task("fittest.resilient_tool_call", kwargs={"scenario": name}, queue="selection").id
    celery.send_task("billing.charge", kwargs={}, queue="selection", task_id="foreign")
    for key in client.keys("selection*"):  # each taken off its queue by a worker, as kombu records it
        while (raw := client.rpop(key)) is not None:
            message = json.loads(raw)
            tag = message["headers"]["id"]
            client.hset("unacked", tag, json.dumps([message, "", "selection"]))
            client.zadd("unacked_index", {tag: time.time() - (1 if tag == ids["recent"] else 100)})
    rt.holders.beat("live@h:1:a", [ids["claimed"]])
    assert give_back_unclaimed(celery, rt.holders, lease_s=30.0) == 1
    assert list(queued(client, "selection")) == [ids["lost"]]
    assert {as_text(t) for t in client.hkeys("unacked")} == {ids["claimed"], ids["recent"], "foreign"}
    assert give_back_unclaimed(celery, rt.holders, lease_s=30.0) == 0  # once


def test_the_clients_record_of_a_call_never_replaces_a_later_step_or_brings_back_an_ended_call(private) -> None:
    """The client and the worker that hands the call on flush their writes on their own clocks."""
    _, rt, _ = private
    first = {"task": "fittest.resilient_tool_call", "kwargs": {"scenario": "s", "input": {}}}
    moved_on = HandedOnStep(task_id=str(uuid.uuid4()), task="fittest.execute", args=[{}, 0])
    rt.inflight.handed_on(moved_on, due_in_s=60.0)
    rt.inflight.flush()
    rt.inflight.sent(HandedOnStep(task_id=moved_on.task_id, **first), due_in_s=60.0)
    rt.inflight.flush()
    assert rt.inflight.current(moved_on.task_id) == moved_on

    ended = str(uuid.uuid4())
    rt.inflight.finished(ended)
    rt.inflight.flush()
    rt.inflight.sent(HandedOnStep(task_id=ended, **first), due_in_s=60.0)
    rt.inflight.flush()
    assert rt.inflight.current(ended) is None

    fresh = HandedOnStep(task_id=str(uuid.uuid4()), **first)
    rt.inflight.sent(fresh, due_in_s=60.0)
    rt.inflight.flush()
    assert rt.inflight.current(fresh.task_id) == fresh
    rt.inflight.handed_on(moved_on.model_copy(update={"task_id": fresh.task_id}), due_in_s=60.0)
    rt.inflight.flush()
    assert rt.inflight.current(fresh.task_id).task == "fittest.execute"  # the worker's hand-on replaces it


def test_one_sweep_per_interval_across_workers(private) -> None:
    celery, rt, _ = private
    first = lost(rt)
    assert sweep(celery, rt) == [first.task_id]
    lost(rt)
    assert sweep(celery, rt) == []  # another worker's sweep within the interval holds the lock


def test_the_workers_rescue_a_call_whose_step_was_lost_and_forget_it_once_it_ends(pipeline: Pipeline) -> None:
    from workers.state.inflight import InflightCalls

    inflight = InflightCalls(redis.Redis.from_url(pipeline.settings.redis_url), pipeline.settings.key_prefix)
    step = HandedOnStep(task_id=str(uuid.uuid4()), task="fittest.resilient_tool_call",
                        kwargs={"scenario": "show which argv the program gets", "namespace": "echo_args",
                                "input": {"text": "rescued"}})

    def resent_and_ran() -> int:
        rows = reader_for(pipeline.settings).counters().get("redelivered_steps", [])
        return sum(n for labels, n in rows
                   if labels == {"task": "fittest.resilient_tool_call", "by": "sweep", "outcome": "ran"})

    ran = resent_and_ran()
    inflight.handed_on(step, due_in_s=-1.0)  # never sent: as if a killed worker had taken it
    inflight.flush()
    result = pipeline.client.wait(pipeline.client.celery.AsyncResult(step.task_id), 60)
    assert (result["status"], result["output"], result["call_id"]) == ("success", {"argv": ["rescued"]}, step.task_id), result
    pipeline.wait_for(lambda: inflight.count() == 0, timeout=20)
    # it ran as the call's current step, though it checked that its call had not ended meanwhile
    pipeline.wait_for(lambda: resent_and_ran() == ran + 1, timeout=20)


def test_a_call_is_forgotten_once_it_ends_wherever_it_ends(pipeline: Pipeline) -> None:
    """Whether its result comes from an attempt or from its first step (a payload refused there)."""
    from workers.state.inflight import InflightCalls

    inflight = InflightCalls(redis.Redis.from_url(pipeline.settings.redis_url), pipeline.settings.key_prefix)
    refused = HandedOnStep(task_id=str(uuid.uuid4()), task="fittest.resilient_tool_call",
                           kwargs={"scenario": "", "input": {}}, queue="selection")
    inflight.sent(refused, due_in_s=600.0)  # recorded before it is sent: the worker cannot be first
    inflight.flush()
    message = pipeline.client.celery.send_task(refused.task, kwargs=refused.kwargs, task_id=refused.task_id,
                                               queue="selection")
    assert pipeline.client.wait(message, 30)["status"] == "invalid"
    served = pipeline.client.send("resilient_tool_call", scenario="show which argv the program gets",
                                  namespace="echo_args", input={"text": "served"})
    assert pipeline.client.wait(served, 60)["status"] == "success"
    pipeline.wait_for(lambda: inflight.current(refused.task_id) is None and inflight.current(served.id) is None,
                      timeout=20)


def test_a_hand_on_that_reaches_redis_after_the_calls_end_is_not_recorded(private) -> None:
    """The selection worker and the executor flush their buffers on their own clocks."""
    from workers.state.inflight import InflightCalls

    _, rt, client = private
    ender = InflightCalls(client, rt.settings.key_prefix)
    step = HandedOnStep(task_id=str(uuid.uuid4()), task="fittest.execute", args=[{}, 0])
    ender.finished(step.task_id)
    ender.flush()
    rt.inflight.handed_on(step, due_in_s=60.0)
    rt.inflight.flush()
    assert rt.inflight.count() == 0
    other = HandedOnStep(task_id=str(uuid.uuid4()), task="fittest.execute", args=[{}, 0])
    rt.inflight.handed_on(other, due_in_s=60.0)
    rt.inflight.flush()
    assert rt.inflight.count() == 1  # a call that has not ended is recorded


def test_an_older_hand_on_that_reaches_redis_after_a_newer_one_does_not_replace_it(private) -> None:
    """execute -> prepare_evolution is written by the executor, prepare_evolution -> evolve by the
    selection worker; each process flushes on its own clock, so the older may come last."""
    from workers.state.inflight import InflightCalls

    _, rt, client = private
    executor, selector = InflightCalls(client, rt.settings.key_prefix), InflightCalls(client, rt.settings.key_prefix)
    call = str(uuid.uuid4())
    prepare = HandedOnStep(task_id=call, task="fittest.prepare_evolution", args=[{"plan": "p"}], hop=2)
    evolve = HandedOnStep(task_id=call, task="fittest.evolve", args=[{"job": "j"}], hop=3)
    executor.handed_on(prepare, due_in_s=60.0)
    selector.handed_on(evolve, due_in_s=60.0)
    selector.flush()
    executor.flush()
    assert rt.inflight.current(call) == evolve
    assert rt.inflight.current(call).carries("fittest.evolve", [{"job": "j"}], {})  # delivered again, it runs

    older = HandedOnStep(task_id=str(uuid.uuid4()), task="fittest.execute", args=[{}, 0])
    client.hset(executor.steps_key, older.task_id, older.model_dump_json(exclude={"hop"}))  # before hops
    executor.handed_on(older.model_copy(update={"task": "fittest.prepare_evolution", "hop": 1}), due_in_s=60.0)
    executor.flush()
    assert rt.inflight.current(older.task_id).task == "fittest.prepare_evolution"  # a record without one counts as 0

    executor.finished(call)
    executor.finished(older.task_id)
    executor.flush()
    assert client.hlen(executor.hops_key) == 0 and rt.inflight.count() == 0


def test_a_step_is_recorded_at_the_hop_its_replacing_message_carries(private, monkeypatch) -> None:
    """The hop is Celery's `replaced_task_nesting`, which `Task.replace` counts in the messages."""
    from workers.rescue import hand_on
    from workers.tasks.evolution import evolve, prepare_evolution

    _, rt, _ = private
    sent: list[Any] = []
    monkeypatch.setattr("workers.rescue.runtime", lambda: rt)
    monkeypatch.setattr(prepare_evolution, "on_replace", sent.append)  # instead of sending it
    prepare_evolution.push_request(id="call-1", replaced_task_nesting=2)
    try:
        hand_on(prepare_evolution, evolve.si({"job": "j"}))
    finally:
        prepare_evolution.pop_request()
    rt.inflight.flush()
    assert rt.inflight.current("call-1").hop == 3 == sent[0].options["replaced_task_nesting"]


def test_the_deaths_of_an_attempts_process_are_counted_and_expire(private) -> None:
    """What an execute step's next delivery reads to tell a tool that kills its process from a
    worker killed once: every death counted, the last one's reason and run time, and a TTL so
    that no record outlives the steps it concerns."""
    _, rt, client = private
    assert rt.inflight.deaths("c1:0") == AttemptDeaths()
    assert rt.inflight.died("c1:0", "exitcode 3", 12.34) == 1
    assert rt.inflight.died("c1:0", "signal 11 (SIGSEGV)", 7.0) == 2
    assert rt.inflight.deaths("c1:0") == AttemptDeaths(count=2, reason="signal 11 (SIGSEGV)", ms=7.0)
    assert rt.inflight.deaths("c1:1") == AttemptDeaths()  # per attempt
    assert 0 < client.ttl("rescue:inflight:died:c1:0") <= DIED_TTL_S
    # A death told by its run's mark is counted once for as long as the mark may be read again (24 h)
    assert rt.inflight.died("c1:0", "its worker w1 died while running it", 0.0, once="run:m1") == 3
    assert rt.inflight.died("c1:0", "its worker w1 died while running it", 0.0, once="run:m1") == 3
    assert client.ttl("rescue:once:died:run:m1") > DIED_TTL_S - 60


def sent_to(celery, monkeypatch, task, queue: str) -> None:
    """`task`'s messages go to the private Redis's `queue`, where no worker reads them."""
    monkeypatch.setattr(task, "apply_async", lambda args, task_id=None, **options: celery.send_task(
        task.name, args=args, task_id=task_id, queue=queue, **options))


def lost_on_the_way(client, queue: str) -> dict[str, list]:
    """The messages waiting in `queue` (task id -> arguments), taken off it as a worker whose
    connection dropped took them (Redis stopped as it handed them over), and made overdue (a
    visibility timeout and its margin later)."""
    messages = queued(client, queue)
    for key, _ in queued_messages(client, queue):
        client.delete(key)
    for task_id in client.zrange("rescue:inflight:effects:due", 0, -1):
        client.zadd("rescue:inflight:effects:due", {task_id: 0})
    if locks := client.keys("rescue:lock:*"):
        client.delete(*locks)  # the next sweep at once, not one interval later
    return messages


def run_batch(task, task_id: str, payload: Any) -> None:
    """A batched task run on its message sent again, then on the lost one delivered after all."""
    for _ in range(2):
        task([SimpleRequest(id=task_id, name=task.name, args=(payload,), kwargs={}, delivery_info={}, hostname="h",
                            ignore_result=True, reply_to=None, correlation_id=None, request_dict={})])


@pytest.fixture
def effects_sent_here(private, monkeypatch) -> tuple:
    from workers.tasks.feedback import mark_failure, record_outcome
    from workers.tasks.learning import learn

    celery, rt, client = private
    for where in ("workers.rescue.runtime", "workers.tasks.feedback.runtime", "workers.tasks.learning.runtime"):
        monkeypatch.setattr(where, lambda: rt)
    sent_to(celery, monkeypatch, mark_failure, "feedback")
    sent_to(celery, monkeypatch, record_outcome, "feedback")
    sent_to(celery, monkeypatch, learn, "learning")
    return private


def nap_plan(**request: Any) -> CallPlan:
    from selection.manifest import load_manifest

    manifest = load_manifest(Path(__file__).parent / "reliability_tools" / "nap" / "tool.yaml")
    return CallPlan(request=CallRequest(scenario="take a nap", namespace="nap", version="1.0.0", max_attempts=1, **request),
                    candidates=[Candidate(key="nap@1.0.0", manifest=manifest, score=1.0)])


def test_a_failure_mark_lost_on_its_way_to_the_memory_worker_is_sent_again_and_applied_once(effects_sent_here) -> None:
    """QA: Redis stopped in the instant the memory worker popped a call's failure mark (the append-
    only file: LPUSH feedback, RPOP feedback, then the restarted server), and nothing brought it
    back: nap's failures stayed one short of its failed calls. A mark is no step of a call, and
    only call steps were recorded for the sweep."""
    from workers.tasks.execution import send_failure
    from workers.tasks.feedback import mark_failure

    celery, rt, client = effects_sent_here
    failed = ToolExecutionResult(attempt_id="c1:0", call_id="c1", tool="nap", version="1.0.0", success=False,
                                 error_class=FailureClass.crash, error_message="RuntimeError: nap was told to fail")
    send_failure(nap_plan(), failed)
    rt.effects.flush()
    [mark_id] = lost_on_the_way(client, "feedback")
    assert sweep(celery, rt) == [mark_id]  # nothing was sent again before: the mark was not recorded
    [(args, )] = queued(client, "feedback").values()
    assert FailureMark.model_validate(args).attempt_id == "c1:0"

    for _ in range(2):  # the mark sent again, then the lost one delivered after all: applied once
        mark_failure.push_request(id=mark_id)
        try:
            mark_failure(args)
        finally:
            mark_failure.pop_request()
    rt.effects.flush()
    assert rt.effects.count() == 0  # once run, it is forgotten
    assert rt.inflight.count() == 0  # and it was never counted as a call in flight
    stats = rt.state.stats(["nap@1.0.0"])["nap@1.0.0"]
    assert (stats.failures, stats.quality) == (1, 0.9)


def test_an_outcome_and_its_learner_records_lost_on_their_way_are_sent_again_and_applied_once(effects_sent_here) -> None:
    """QA: the Redis-restart test's learner was once short of a call's execution record; the
    outcome (`fittest.record_outcome`) and the learner's message (`fittest.learn`) of a call can be
    lost as a mark can, and were not recorded."""
    from workers.tasks.execution import send_outcome
    from workers.tasks.feedback import record_outcome
    from workers.tasks.learning import learn

    celery, rt, client = effects_sent_here
    plan = nap_plan(call_id="c2")
    plan.attempts.append(ToolExecutionResult(attempt_id="c2:0", call_id="c2", tool="nap", version="1.0.0", success=True))
    send_outcome(plan)
    rt.effects.flush()
    [outcome_id] = lost_on_the_way(client, "feedback")
    assert sweep(celery, rt) == [outcome_id]
    [(outcome, )] = queued(client, "feedback").values()
    run_batch(record_outcome, outcome_id, outcome)
    rt.effects.flush()
    assert rt.state.stats(["nap@1.0.0"])["nap@1.0.0"].successes == 1  # applied once

    records = lost_on_the_way(client, "learning")  # each run of the outcome sent the call's records
    assert len(records) == 2 and sorted(sweep(celery, rt)) == sorted(records)
    for task_id, (payload, ) in queued(client, "learning").items():
        run_batch(learn, task_id, payload)
    assert [r.call_id for r in rt.learning.recent()] == ["c2"]  # learned once
    rt.effects.flush()
    assert (rt.effects.count(), rt.inflight.count()) == (0, 0)


def test_a_call_that_ended_without_clearing_its_record_leaves_the_calls_in_flight_a_sweep_after_it_is_looked_at(private) -> None:
    """QA 55b L2: an executor killed as its pool processes stored two calls' results left their
    records, and `fittest_calls_in_flight` counted them until their due time, 16.5 min later."""
    from workers.rescue import NOWHERE_AFTER_S, due_in_s

    celery, rt, client = private
    ended, running = lost(rt), lost(rt)
    client.hset("unacked", "tag1", json.dumps([{"headers": {"id": running.task_id}, "body": ""}, "", "execution"]))
    celery.backend.store_result(ended.task_id, {"status": "success"}, "SUCCESS")
    long_ago = time.time() + due_in_s(rt) - NOWHERE_AFTER_S - 1  # recorded NOWHERE_AFTER_S ago, due much later
    client.zadd("rescue:inflight:due", {ended.task_id: long_ago, running.task_id: long_ago})
    assert reader_for(rt.settings, client).calls_in_flight() == (2, 0)

    assert sweep(celery, rt) == []
    assert reader_for(rt.settings, client).calls_in_flight() == (1, 0)
    assert rt.inflight.current(ended.task_id) is None and rt.inflight.current(running.task_id) == running

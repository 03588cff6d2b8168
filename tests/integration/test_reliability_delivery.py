"""At-least-once delivery without double effects, with real workers killed for real.

Each test breaks an execution worker in the middle of an attempt of `nap` (a tool that logs each
run, then sleeps), or delivers an attempt again, and checks what a user would: the call still ends
with its result, the tool ran again only because a run was cut short, and the tool's counters and
quality are exactly what one delivery gives.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from selection.manifest import load_manifest
from selection.models import CallPlan, CallRequest, Candidate, Severity
from selection.quality import apply_failure_bp, bp_to_quality, quality_to_bp
from tests.integration.conftest import Pipeline
from tests.integration.delivery import (BRITTLE, NAP, TOOLS, VISIBILITY_S, assert_one_delivery, breaker_opened_then_closed,
                                        foreign_sender, nap_call, nap_pipeline, nap_then_brittle, restart_executor,
                                        runs, wait_runs)
from workers.metrics import UNACKED_KEY, reader_for
from workers.rescue import resend
from workers.redis_connection import redis_client
from workers.state.inflight import HandedOnStep, InflightCalls
from workers.state.run_marks import RunMark, RunMarks, message_key
from workers.attempt_deaths import CRASH_AFTER_DEATHS, PROBE_CRASH_AFTER_DEATHS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    try:
        with nap_pipeline(tmp_path_factory.mktemp("delivery"), redis_url, model_path) as p:
            yield p
    finally:
        client = redis.Redis.from_url(redis_url)  # what sending to PARKED declared (no worker reads it)
        client.delete(PARKED, f"_kombu.binding.{PARKED}")
        client.close()


def redeliveries(p: Pipeline, outcome: str, by: str = "broker") -> int:
    """Attempts the broker gave back (or the rescue sweep sent again) that ran again or were
    ignored (`fittest metrics`)."""
    rows = reader_for(p.settings).counters().get("redelivered_steps", [])
    return sum(n for labels, n in rows if labels == {"task": "fittest.execute", "by": by, "outcome": outcome})


def test_killed_pool_process_attempt_is_taken_over(pipeline: Pipeline, tmp_path: Path) -> None:
    """kill -9 of the process running the attempt: the worker rejects the message back to the queue."""
    p, log = pipeline, tmp_path / "runs.log"
    p.settled()  # the bookkeeping of earlier calls is applied before the counters are read
    before = p.state().stats([NAP])[NAP]
    sent = nap_call(p, log, 3000)
    (victim,) = wait_runs(p, log, 1)
    inflight = InflightCalls(redis.Redis.from_url(p.settings.redis_url), p.settings.key_prefix)
    # The selection worker handed the call on at the message's next hop; its record is buffered and
    # sent every 0.1 s, later when the worker is busy (a clean-clone run once read it before that).
    def handed_on() -> bool:
        step = inflight.current(sent.id)
        return step is not None and (step.task, step.hop) == ("fittest.execute", 1)

    p.wait_for(handed_on, timeout=2.0)
    os.kill(victim, signal.SIGKILL)
    result = p.client.wait(sent, 60)
    assert result["status"] == "success", result
    first, second = runs(log)
    assert first == victim and second != victim and result["output"]["pid"] == second
    assert result["attempts"][0]["isolated"]  # run again in a process of its own: a death there is its own
    assert_one_delivery(p, NAP, before.successes + 1, before.failures, before.quality)


def test_killed_worker_attempt_is_taken_over_by_a_new_worker(pipeline: Pipeline, tmp_path: Path) -> None:
    """kill -9 of the whole execution worker (as a lost machine): its unacknowledged message comes
    back after the visibility timeout and a worker started afterwards completes the call."""
    p, log = pipeline, tmp_path / "runs.log"
    p.settled()  # the bookkeeping of earlier calls is applied before the counters are read
    before = p.state().stats([NAP])[NAP]
    ran = redeliveries(p, "ran")
    sent = nap_call(p, log, 3000)
    wait_runs(p, log, 1)
    p.stack.stop("executor", signal.SIGKILL)
    restart_executor(p)
    result = p.client.wait(sent, VISIBILITY_S + 60)
    assert result["status"] == "success", result
    # it came back through the broker as a redelivery of the call's current step, which runs
    p.wait_for(lambda: redeliveries(p, "ran") == ran + 1)
    assert len(runs(log)) == 2
    assert_one_delivery(p, NAP, before.successes + 1, before.failures, before.quality)


def test_an_attempt_delivered_twice_applies_its_effects_once(pipeline: Pipeline, tmp_path: Path) -> None:
    """What a lost acknowledgement causes: the same attempt runs twice; quality, counters and the
    failure record change once."""
    p, log = pipeline, tmp_path / "runs.log"
    scenario = f"a nap that fails, delivered twice {uuid.uuid4().hex[:6]}"
    manifest = load_manifest(TOOLS / "nap" / "tool.yaml")
    request = CallRequest(scenario=scenario, namespace="nap", version="1.0.0", max_attempts=1,
                          input={"ms": 0, "fail": True, "log": str(log)})
    plan = CallPlan(request=request, candidates=[Candidate(key=NAP, manifest=manifest, score=1.0)]).model_dump(mode="json")
    p.settled()  # the bookkeeping of earlier calls is applied before the counters are read
    before = p.state().stats([NAP])[NAP]
    sender = Celery("foreign", broker=p.settings.redis_url, backend=p.settings.redis_url)
    sender.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    deliveries = [sender.send_task("fittest.execute", args=[plan, 0], queue="execution") for _ in range(2)]
    outcomes = [p.client.wait(d, 60) for d in deliveries]
    sender.close()
    assert [o["status"] for o in outcomes] == ["failed", "failed"]
    assert len(runs(log)) == 2
    assert_one_delivery(p, NAP, before.successes, before.failures + 1, round(before.quality - 0.10, 4))
    ranked = p.client.wait(p.client.send("explain", scenario=scenario, namespace="nap", version="1.0.0"), 30)
    assert ranked["ranking"][0]["breakdown"]["similar_failures"] == 1  # one failure record, not two


def executed(p: Pipeline, plan: dict[str, Any], resent: bool = False) -> dict[str, Any]:
    """The result of a `nap_then_brittle` plan's execute step, sent as a foreign client would (with
    `resent`, as the rescue sweep sends a step again, a delivery that reads its attempt's deaths):
    `nap` failed, and `brittle` answered."""
    sender = foreign_sender(p)
    try:
        if resent:
            task_id = f"call-{uuid.uuid4().hex}"
            resend(sender, HandedOnStep(task_id=task_id, task="fittest.execute", args=[plan, 0]))
            result = sender.AsyncResult(task_id).get(timeout=60)
        else:
            result = sender.send_task("fittest.execute", args=[plan, 0], queue="execution").get(timeout=60)
    finally:
        sender.close()
    assert result["status"] == "success" and result["tool"] == "brittle", result
    return result


@pytest.mark.parametrize("die", ["exit", "segfault"])
def test_a_tool_that_kills_its_process_fails_as_a_crash_and_the_call_falls_back(
        pipeline: Pipeline, tmp_path: Path, die: str) -> None:
    """A python tool runs in the pool process; one that ends it (os._exit, a segfault) used to make
    the broker give its attempt back for ever, each delivery killing another pool process. Now the
    attempt runs again in a process of its own, whose end is the tool's crash, recorded once; its
    breaker opens, and the next candidate answers."""
    p, log = pipeline, tmp_path / "runs.log"
    plan = nap_then_brittle(f"a nap that kills its process ({die})", log, die=die)
    p.settled()
    before = p.state().stats([NAP, BRITTLE])
    result = executed(p, plan)
    first, second = result["attempts"]
    assert first["error_class"] == "crash" and first["isolated"], first
    assert ("exit status 3" if die == "exit" else "killed by SIGSEGV") in first["error_message"], first
    assert "(run in a process of its own: a worker process running this attempt had died)" in first["error_message"]
    assert second["outcome"] == "success" and second["tool"] == "brittle"
    assert len(runs(log)) == 2  # in the pool process, which it killed, then in its own
    # The executor's log names the tool that took its pool process down.
    said = (p.stack.log_dir / "executor.log").read_text()
    assert f"the pool process running attempt {plan['request']['call_id']}:0 ({NAP}) died" in said
    died = [json.loads(line) for line in said.splitlines() if '"event": "attempt_process_died"' in line]
    mine = [e for e in died if e["call_id"] == plan["request"]["call_id"]]
    assert mine and [(e["tool"], e["version"]) for e in mine] == [tuple(NAP.split("@"))] * len(mine), died  # as `attempt` lines
    assert_one_delivery(p, NAP, before[NAP].successes, before[NAP].failures + 1, round(before[NAP].quality - 0.10, 4))
    assert p.state().stats([BRITTLE])[BRITTLE].successes == before[BRITTLE].successes + 1
    breaker_opened_then_closed(p, NAP)
    # the executor still serves
    assert p.client.wait(nap_call(p, tmp_path / "after.log", 0), 30)["status"] == "success"


@pytest.mark.parametrize("probe", [False, True])
def test_a_step_the_sweep_sends_again_after_its_process_died_too_often_is_not_run(
        pipeline: Pipeline, tmp_path: Path, probe: bool) -> None:
    """The rescue sweep's copy of a step (`fittest_resent`) reads the deaths of its attempt as a
    redelivery does: after CRASH_AFTER_DEATHS it is a crash, and the tool does not run. A breaker's
    probe (a version that failed again and again, tried once more) is a crash after one death."""
    p, log = pipeline, tmp_path / "runs.log"
    plan = nap_then_brittle(f"a nap whose process died before the sweep sent it (probe: {probe})", log)
    if probe:
        plan["probe"] = NAP
    client = redis_client(p.settings)
    try:
        inflight = InflightCalls(client, p.settings.key_prefix)
        for _ in range(PROBE_CRASH_AFTER_DEATHS if probe else CRASH_AFTER_DEATHS):
            inflight.died(f"{plan['request']['call_id']}:0", "signal 9 (SIGKILL)", 5.0)
    finally:
        client.close()
    result = executed(p, plan, resent=True)
    assert result["attempts"][0]["error_class"] == "crash" and "SIGKILL" in result["attempts"][0]["error_message"]
    assert ("died once" if probe else f"died {CRASH_AFTER_DEATHS} times") in result["attempts"][0]["error_message"]
    assert runs(log) == []
    breaker_opened_then_closed(p, NAP)


def test_an_attempt_that_died_then_had_its_breaker_opened_by_another_call_is_its_crash_not_passed_over(
        pipeline: Pipeline, tmp_path: Path) -> None:
    """QA 48 recheck: a call's killer, its processes dead in this call, then had its breaker opened by
    another call of it, and the call listed it among the versions not tried (no attempt, no failure)."""
    p, log = pipeline, tmp_path / "runs.log"
    plan = nap_then_brittle("a nap whose process died, its breaker opened since", log)
    client = redis_client(p.settings)
    try:
        InflightCalls(client, p.settings.key_prefix).died(f"{plan['request']['call_id']}:0", "signal 9 (SIGKILL)", 5.0)
    finally:
        client.close()
    p.state().record_run(NAP, 1.0, False, 1, 600.0)  # opened by another call's crash
    result = executed(p, plan, resent=True)
    first = result["attempts"][0]
    assert (first["tool"], first["error_class"]) == ("nap", "crash") and "died once" in first["error_message"], first
    assert NAP not in result["held_back"] and runs(log) == []
    breaker_opened_then_closed(p, NAP)


def test_an_attempt_whose_whole_worker_died_running_it_twice_is_a_crash_and_the_call_falls_back(
        pipeline: Pipeline, tmp_path: Path) -> None:
    """QA live F3: a python tool that kills its executor's main process had its message given back
    at each worker lease's end and killed the restarted executor again, for ever: no process of the
    worker lived to count the death. The run's mark its worker never cleared counts it at the next
    delivery: the first death runs the tool again, the second is a crash."""
    p, log = pipeline, tmp_path / "runs.log"
    client = redis_client(p.settings)
    inflight, marks = InflightCalls(client, p.settings.key_prefix), RunMarks(client, p.settings.key_prefix)
    sender = foreign_sender(p)
    try:
        for deaths_before, runs_after in ((0, 1), (1, 0)):
            plan = nap_then_brittle(f"a nap whose worker died running it, {deaths_before} death(s) before", log)
            aid, task_id = f"{plan['request']['call_id']}:0", f"call-{uuid.uuid4().hex}"
            for _ in range(deaths_before):
                inflight.died(aid, "signal 9 (SIGKILL)", 5.0)
            # taken by a worker that marked its run and died: what its message and mark look like
            give_back_unacknowledged(p, sender.send_task("fittest.execute", args=[plan, 0], queue=PARKED, task_id=task_id),
                                     before=lambda tag: marks.running(message_key(task_id, tag), RunMark(
                                         attempt_id=aid, holder="executor@gone (pid 7)", worker=f"executor@gone:{6 + deaths_before}")))
            result = sender.AsyncResult(task_id).get(timeout=VISIBILITY_S + 60)
            assert inflight.deaths(aid).count == deaths_before + 1
            if runs_after:  # one death is not the tool's doing for sure: it runs again, isolated
                assert result["status"] == "success" and result["tool"] == "nap", result
                assert result["attempts"][0]["isolated"], result
            else:
                assert result["status"] == "success" and result["tool"] == "brittle", result
                first = result["attempts"][0]
                assert first["error_class"] == "crash" and "its worker executor@gone (pid 7) died while running it" in \
                    first["error_message"], first
                breaker_opened_then_closed(p, NAP)
            assert len(runs(log)) == runs_after
            log.unlink(missing_ok=True)
            p.wait_for(lambda: not client.keys(f"{p.settings.key_prefix}inflight:running:{task_id}:*"))  # its own run's mark, cleared
        # A death beside another run is no one's for sure (QA recheck 47: a nap that ran beside a
        # worker-killing tool twice was recorded as a crash): counted for neither, and each runs
        # isolated, where a tool that kills its parent kills its pool process, whose death is its own
        # (review 48: runs taking turns left a killer beside new calls, its deaths never counted).
        plan = nap_then_brittle("a nap whose worker died as it ran beside another tool", log)
        aid, task_id = f"{plan['request']['call_id']}:0", f"call-{uuid.uuid4().hex}"
        inflight.died(aid, "signal 9 (SIGKILL)", 5.0)
        beside = RunMark(attempt_id="other-call:0", holder="executor@gone (pid 8)", worker="executor@gone:9")
        marks.running(message_key("other-call", "other-tag"), beside)
        give_back_unacknowledged(p, sender.send_task("fittest.execute", args=[plan, 0], queue=PARKED, task_id=task_id),
                                 before=lambda tag: marks.running(message_key(task_id, tag), RunMark(
                                     attempt_id=aid, holder="executor@gone (pid 7)", worker="executor@gone:9")))
        result = sender.AsyncResult(task_id).get(timeout=VISIBILITY_S + 60)
        assert result["status"] == "success" and result["tool"] == "nap", result  # ran again, not a crash
        assert result["attempts"][0]["isolated"], result
        assert inflight.deaths(aid).count == 1 and len(runs(log)) == 1
        assert marks.running_in("executor@gone:9") >= {message_key("other-call", "other-tag")}  # the dead worker's runs, as it died
    finally:
        sender.close()
        client.close()


def test_a_tool_that_kills_its_worker_beside_another_call_is_a_crash_and_the_other_call_succeeds(
        pipeline: Pipeline, tmp_path: Path) -> None:
    """Review 48: a tool that kills its executor's main process while another call's tool runs in the
    other pool process: the death is no one's for sure, so each comes back to run isolated, where
    the killer kills only its pool process, a death counted against it alone. It ends a crash, its
    breaker open, and the call beside it succeeds (before, runs took turns, the killer ran beside
    new calls, and its deaths were never counted)."""
    p, killer_log, nap_log = pipeline, tmp_path / "killer.log", tmp_path / "nap.log"
    p.settled()
    before = p.state().stats([NAP])[NAP]
    beside = nap_call(p, nap_log, 4000)
    wait_runs(p, nap_log, 1)
    sender = foreign_sender(p)
    try:
        plan = nap_then_brittle("a nap that kills its worker beside another call", killer_log, die="parent", ms=300)
        killer = sender.send_task("fittest.execute", args=[plan, 0], queue="execution")
        assert p.stack.procs["executor"].wait(timeout=30) == -signal.SIGKILL
        restart_executor(p)
        result = killer.get(timeout=VISIBILITY_S + 90)
    finally:
        sender.close()
    assert result["status"] == "success" and result["tool"] == "brittle", result
    first = result["attempts"][0]
    assert first["error_class"] == "crash" and f"died {CRASH_AFTER_DEATHS} times" in first["error_message"], first
    assert first["isolated"], first  # its last run was (QA 48 recheck: marked only when its own process ended)
    assert len(runs(killer_log)) == 1 + CRASH_AFTER_DEATHS  # in the pool process, then twice isolated, killing its pool process
    other = p.client.wait(beside, 60)
    assert other["status"] == "success" and other["attempts"][0]["isolated"], other
    assert len(runs(nap_log)) == 2
    # The restarted executor's log names the tool whose run its predecessor died in.
    said = (p.stack.log_dir / "executor.log").read_text()
    assert f"the worker running attempt {plan['request']['call_id']}:0 ({NAP}) died beside 1 other run(s)" in said
    # The killer returns at once: the pool process that ran it, its parent killed a moment before,
    # recorded nothing (QA 48: its success stood for the attempt, and its breaker never opened).
    crashed_bp, _ = apply_failure_bp(quality_to_bp(before.quality), before.failures, Severity.high)
    assert_one_delivery(p, NAP, before.successes + 1, before.failures + 1, bp_to_quality(crashed_bp))
    # (its breaker opened, and the other call's success of the same version may have closed it since)
    client = redis_client(p.settings)
    try:
        assert RunMarks(client, p.settings.key_prefix).killer(NAP)  # its probes run isolated
        client.delete(f"{p.settings.key_prefix}breaker:{NAP}", f"{p.settings.key_prefix}inflight:killer:{NAP}")
    finally:
        client.close()


def test_the_probe_of_a_version_that_killed_its_processes_runs_isolated(pipeline: Pipeline, tmp_path: Path) -> None:
    """QA 48: each breaker probe of a tool that kills its executor cost an executor restart, and
    under a short worker lease `fittest up` gave up. A version whose attempt ended a crash by its
    deaths has its probes run in a process of their own, where it kills only that process."""
    p, log = pipeline, tmp_path / "runs.log"
    client = redis_client(p.settings)
    try:
        RunMarks(client, p.settings.key_prefix).note_killer(NAP)
        plan = nap_then_brittle("a nap that kills its process, probed", log, die="exit")
        plan["probe"] = NAP
        first = executed(p, plan)["attempts"][0]
        assert first["isolated"] and first["probe"] and first["error_class"] == "crash", first
        assert "exit status 3 (run in a process of its own: its breaker's probe, of a version that killed" in first["error_message"]
        assert len(runs(log)) == 1 and InflightCalls(client, p.settings.key_prefix).deaths(f"{plan['request']['call_id']}:0").count == 0
        breaker_opened_then_closed(p, NAP)
    finally:
        client.delete(f"{p.settings.key_prefix}inflight:killer:{NAP}")
        client.close()


PARKED = "parked"  # a queue no worker reads


def give_back_unacknowledged(p: Pipeline, sent: Any, before: Callable[[str], None] | None = None) -> None:
    """Make the message just sent to PARKED one that a worker of `execution` took and never
    acknowledged, a visibility timeout ago: kombu's unacked hash and index, as its Redis transport
    writes them. The workers' restore sweep then gives it back to `execution` as kombu does with
    every such message, marked `redelivered`. `before` is given the message's delivery tag first."""
    client = redis.Redis.from_url(p.settings.redis_url)
    try:
        raw = client.rpop(PARKED)
        assert isinstance(raw, bytes), raw  # one message (a list only when given a count; None when none)
        message = json.loads(raw)
        assert message["headers"]["id"] == sent.id
        tag = message["properties"]["delivery_tag"]
        if before is not None:
            before(tag)
        message["properties"]["delivery_info"]["routing_key"] = "execution"  # as sent to execution (workers/routing.py)
        client.hset(UNACKED_KEY, tag, json.dumps([message, "", "execution"]))  # Celery sends to the anon exchange
        client.zadd(f"{UNACKED_KEY}_index", {tag: time.time() - VISIBILITY_S - 1})
    finally:
        client.close()


@pytest.mark.parametrize("by", ["broker", "sweep"])
def test_a_step_delivered_again_after_its_call_ended_is_ignored(pipeline: Pipeline, tmp_path: Path, by: str) -> None:
    """A call's last step comes again after the call returned its result, under the call's task id:
    - by the broker, after a lost acknowledgement ("Couldn't ack"), a visibility timeout later;
    - by the rescue sweep, which looked whether the call had its result just before it ended.
    The tool must not run again, and the caller's result must stay the one it got."""
    p, log = pipeline, tmp_path / "runs.log"
    manifest = load_manifest(TOOLS / "nap" / "tool.yaml")
    request = CallRequest(scenario=f"take a nap once ({by})", namespace="nap", version="1.0.0", max_attempts=1,
                          input={"ms": 0, "log": str(log)})
    plan = CallPlan(request=request, candidates=[Candidate(key=NAP, manifest=manifest, score=1.0)]).model_dump(mode="json")
    p.settled()
    before = p.state().stats([NAP])[NAP]
    sender = Celery("foreign", broker=p.settings.redis_url, backend=p.settings.redis_url)
    sender.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    task_id = f"call-{uuid.uuid4().hex}"
    ignored = redeliveries(p, "ignored", by)
    try:
        first = sender.send_task("fittest.execute", args=[plan, 0], queue="execution", task_id=task_id).get(timeout=60)
        assert first["status"] == "success" and len(runs(log)) == 1
        if by == "broker":
            give_back_unacknowledged(p, sender.send_task("fittest.execute", args=[plan, 0], queue=PARKED, task_id=task_id))
        else:
            resend(sender, HandedOnStep(task_id=task_id, task="fittest.execute", args=[plan, 0]))
        # operators see it in `fittest metrics`
        p.wait_for(lambda: redeliveries(p, "ignored", by) == ignored + 1, timeout=VISIBILITY_S + 30)
        p.settled()
        assert len(runs(log)) == 1  # the tool did not run again
        assert sender.AsyncResult(task_id).get(timeout=10) == first  # the caller's result is untouched
    finally:
        sender.close()
    assert_one_delivery(p, NAP, before.successes + 1, before.failures, before.quality)


def test_a_step_given_back_after_its_call_was_revoked_ends_the_call_counted_as_revoked(
        pipeline: Pipeline, tmp_path: Path) -> None:
    """QA live F8: a call revoked while a dead worker held its step ended when the step came back
    (to a worker started since, which never heard of the revoke), but `fittest_calls_total`
    counted no `revoked` for it. Two copies of the step given back together count it once."""
    p, log = pipeline, tmp_path / "runs.log"
    manifest = load_manifest(TOOLS / "nap" / "tool.yaml")
    request = CallRequest(scenario="a nap revoked while its worker was gone", namespace="nap", version="1.0.0",
                          max_attempts=1, input={"ms": 0, "log": str(log)})
    plan = CallPlan(request=request, candidates=[Candidate(key=NAP, manifest=manifest, score=1.0)]).model_dump(mode="json")
    task_id = f"call-{uuid.uuid4().hex}"
    client = redis_client(p.settings)
    sender = foreign_sender(p)

    def revoked() -> float:
        return sum(n for labels, n in reader_for(p.settings).counters().get("calls", []) if labels == {"status": "revoked"})

    try:
        inflight = InflightCalls(client, p.settings.key_prefix)
        inflight.sent(HandedOnStep(task_id=task_id, task="fittest.execute", args=[plan, 0]), 600)
        inflight.flush()
        sender.backend.mark_as_revoked(task_id)  # what the revoke wrote, before the worker holding the step died
        before, ignored = revoked(), redeliveries(p, "ignored")
        for _ in range(2):  # and a copy of it, given back with it: the call is counted once
            give_back_unacknowledged(p, sender.send_task("fittest.execute", args=[plan, 0], queue=PARKED, task_id=task_id))
        p.wait_for(lambda: redeliveries(p, "ignored") == ignored + 2, timeout=VISIBILITY_S + 30)
        p.wait_for(lambda: revoked() == before + 1 and inflight.current(task_id) is None)
        time.sleep(0.5)  # past the metrics' buffered flush
        assert revoked() == before + 1
        assert runs(log) == []  # the tool did not run
    finally:
        sender.close()
        client.close()


def test_a_step_delivered_again_after_its_call_moved_on_is_ignored(pipeline: Pipeline, tmp_path: Path) -> None:
    """The same, for a step whose call is still in flight: attempt 0 timed out and handed the call
    on to attempt 1, then its message comes back. Running it would run the tool again and start a
    second copy of the call."""
    p, log = pipeline, tmp_path / "runs.log"
    manifest = load_manifest(TOOLS / "nap" / "tool.yaml")
    request = CallRequest(scenario="take a long nap, twice if need be", namespace="nap", version="1.0.0",
                          max_attempts=2, input={"ms": 7000, "log": str(log)})
    candidates = [Candidate(key=NAP, manifest=manifest, score=1.0, timeout_s=1.0),  # times out
                  Candidate(key=NAP, manifest=manifest, score=0.9, timeout_s=8.0)]  # sleeps 7 s, succeeds
    plan = CallPlan(request=request, candidates=candidates).model_dump(mode="json")
    p.settled()
    sender = Celery("foreign", broker=p.settings.redis_url, backend=p.settings.redis_url)
    sender.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    task_id = f"call-{uuid.uuid4().hex}"
    ignored = redeliveries(p, "ignored")
    try:
        call = sender.send_task("fittest.execute", args=[plan, 0], queue="execution", task_id=task_id)
        wait_runs(p, log, 2, timeout=30)  # attempt 0 timed out; attempt 1 sleeps
        give_back_unacknowledged(p, sender.send_task("fittest.execute", args=[plan, 0], queue=PARKED, task_id=task_id))
        p.wait_for(lambda: redeliveries(p, "ignored") == ignored + 1, timeout=VISIBILITY_S)
        assert not call.ready()  # ignored while the call was still in attempt 1, not because it had ended
        result = call.get(timeout=30)
    finally:
        sender.close()
    assert result["status"] == "success" and len(result["attempts"]) == 2, result
    p.settled()
    assert len(runs(log)) == 2  # attempt 0 did not run again, and no second copy of the call went on


def test_a_step_delivered_again_whose_hand_on_record_was_lost_runs(pipeline: Pipeline, tmp_path: Path) -> None:
    """QA recheck N1: a pool process that handed a call on to attempt 3 took that step itself and
    was killed by its tool (os._exit) before its buffered record of the hand-on reached Redis. The
    broker gave the step back, and it was ignored as "moved on" (the record still named attempt 2),
    so the call waited for the sweep, 14.5 min. A step of a later hop than the one recorded runs."""
    p, log = pipeline, tmp_path / "runs.log"
    manifest = load_manifest(TOOLS / "nap" / "tool.yaml")
    request = CallRequest(scenario="take a short nap", namespace="nap", version="1.0.0", max_attempts=2,
                          input={"ms": 10, "log": str(log)})
    candidates = [Candidate(key=NAP, manifest=manifest, score=1.0, timeout_s=8.0) for _ in range(2)]
    plan = CallPlan(request=request, candidates=candidates).model_dump(mode="json")
    p.settled()
    sender = Celery("foreign", broker=p.settings.redis_url, backend=p.settings.redis_url)
    sender.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])
    task_id = f"call-{uuid.uuid4().hex}"
    ran, ignored = redeliveries(p, "ran"), redeliveries(p, "ignored")
    client = redis.Redis.from_url(p.settings.redis_url)
    try:
        inflight = InflightCalls(client, p.settings.key_prefix)
        inflight.handed_on(HandedOnStep(task_id=task_id, task="fittest.execute", args=[plan, 0], hop=1), 600.0)
        inflight.flush()  # the record of the step before: the one of the next hop never came
        give_back_unacknowledged(p, sender.send_task("fittest.execute", args=[plan, 1], queue=PARKED, task_id=task_id,
                                                     replaced_task_nesting=2))
        result = sender.AsyncResult(task_id).get(timeout=VISIBILITY_S + 30)
    finally:
        sender.close()
        client.close()
    assert result["status"] == "success" and [a["version"] for a in result["attempts"]] == ["1.0.0"], result
    p.wait_for(lambda: redeliveries(p, "ran") == ran + 1, timeout=10)  # the metrics are buffered
    assert redeliveries(p, "ignored") == ignored and len(runs(log)) == 1


def test_another_job_sent_under_a_running_calls_task_id_leaves_that_call_its_result(pipeline: Pipeline, tmp_path: Path) -> None:
    """QA 57c H6: a service's send_task(task_id=) of a running call's id, with another job, stored
    the refusal under that id: the running call's caller was told that her payload was invalid,
    and her tool's output, which ran, was never stored over it."""
    p, log, other = pipeline, tmp_path / "runs.log", tmp_path / "other.log"
    sent = nap_call(p, log, 3000)
    wait_runs(p, log, 1)  # running
    sender = foreign_sender(p)
    try:
        sender.send_task("fittest.resilient_tool_call", queue="selection", task_id=sent.id, kwargs={
            "scenario": "take a nap and report the process id", "namespace": "nap", "version": "1.0.0",
            "max_attempts": 1, "input": {"ms": 0, "log": str(other)}})
        result = p.client.wait(sent, 60)
        assert result["status"] == "success" and result["output"]["pid"] == runs(log)[0], result
        p.settled()
        assert runs(other) == []  # the other job did not run
        assert sender.AsyncResult(sent.id).get(timeout=10) == result  # and its sender reads the running call's
    finally:
        sender.close()


def test_a_job_refused_under_its_own_task_id_leaves_no_record_the_sweep_would_send_again(pipeline: Pipeline, tmp_path: Path) -> None:
    """QA 60c F2: a call an older client sent, refused as another job under its id (the client had
    claimed the id with its own digest of the job), was neither run nor answered, and what its
    client recorded in flight had the rescue sweep send it again every 45 s for as long as the
    record lived."""
    from workers.state.call_ids import CallIds
    from workers.state.inflight import HandedOnStep, step_due_in_s

    p, log = pipeline, tmp_path / "runs.log"
    call_id = f"older-client-{uuid.uuid4().hex[:8]}"
    kwargs = {"scenario": "take a nap and report the process id", "namespace": "nap", "version": "1.0.0",
              "max_attempts": 1, "input": {"ms": 0, "log": str(log)}}
    client = redis_client(p.settings)
    try:
        assert CallIds(client, p.settings.key_prefix).claim(call_id, "a digest no release of ours computes")[0] == "new"
    finally:
        client.close()
    # sent as a client sends a call (recorded in flight), past the client's own check of the id
    p.client._inflight.sent(HandedOnStep(task_id=call_id, task="fittest.resilient_tool_call", kwargs=kwargs, queue="selection"),
                            step_due_in_s(p.settings.visibility_timeout))
    assert p.client.current_step(call_id) is not None
    sender = foreign_sender(p)
    try:
        sender.send_task("fittest.resilient_tool_call", queue="selection", task_id=call_id, kwargs=kwargs)
        p.wait_for(lambda: p.client.current_step(call_id) is None, timeout=30)
        p.settled()
        assert runs(log) == []  # not run
    finally:
        sender.close()

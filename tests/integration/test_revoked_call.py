"""A call revoked while a worker runs its tool, on real workers: a revoke without terminate stops
only the steps not started yet, so the call goes on and its result is what the caller is told.

QA live F2: `celery control revoke ID` marked the call REVOKED in the result backend at once;
`fittest result ID` said "revoked: it has no result" (exit 1) while the tool ran on, and the call
then succeeded, its effect done: a user who sent the job again had it done twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RedisServer, cli_runner, write_tool
from tests.integration.conftest import Pipeline, pipeline_running
from workers.app import make_app

SCENARIO = "append a line to the ledger after a slow check"
TOOL = '''import time
from pathlib import Path


def run(payload):
    folder = Path(__file__).parent
    (folder / f"started-{payload['tag']}").touch()
    time.sleep(payload["seconds"])
    with open(folder / "ledger", "a") as ledger:
        ledger.write(payload["tag"] + "\\n")
    return {"written": payload["tag"]}
'''


def ledger_stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str, model_path: Path) -> Iterator[Pipeline]:
    tools = tmp_path_factory.mktemp("revoke-tools")
    write_tool(tools, "ledger_append", TOOL, description="Appends a line to a ledger file after a slow check.", timeout_s=30)
    with pipeline_running(tmp_path_factory.mktemp("revoke"), redis_url, model_path, tools, roles=("memory", "executor"),
                          FITTEST_EVOLUTION_ENABLED="false") as p:
        yield p


ledger_pipeline = pytest.fixture(scope="module")(ledger_stack)


@pytest.fixture
def fresh_ledger_pipeline(tmp_path_factory: pytest.TempPathFactory, private_redis: RedisServer,
                          model_path: Path) -> Iterator[Pipeline]:
    """A stack of its own, on a Redis of its own (Celery's queues are not prefixed), whose counters
    no earlier test's calls reach: a call the tests before it terminated or revoked may be ended,
    and counted, again later by a copy of its step given back."""
    yield from ledger_stack(tmp_path_factory, private_redis.url, model_path)


def revoke_while_it_runs(p: Pipeline, call_id: str, tag: str) -> None:
    """Send a call whose tool takes 4 s and revoke it, without terminate, once the tool runs."""
    started = Path(p.settings.tools_dir) / "ledger_append" / f"started-{tag}"
    p.client.send("resilient_tool_call", scenario=SCENARIO, input={"seconds": 4, "tag": tag}, call_id=call_id)
    p.wait_for(started.exists, timeout=60)
    control = make_app(p.settings)  # as Flower's: the workers' control channel
    try:
        control.control.revoke(call_id)
        p.wait_for(lambda: control.AsyncResult(call_id).state == "REVOKED", timeout=10)  # what the caller reads at once
    finally:
        control.close()


def ledger(p: Pipeline) -> list[str]:
    written = Path(p.settings.tools_dir) / "ledger_append" / "ledger"
    return written.read_text().split() if written.exists() else []


def test_fittest_result_of_a_call_revoked_while_its_tool_runs_waits_for_its_result(
        ledger_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    p = ledger_pipeline
    revoke_while_it_runs(p, "revoked-running-cli-1", "cli")
    shown = cli_runner(monkeypatch, p.env)("result", "revoked-running-cli-1", "--timeout", "60", "--json")
    assert shown.exit_code == 0, shown.output
    assert '"status": "success"' in shown.output and '"written": "cli"' in shown.output, shown.output
    assert ledger(p).count("cli") == 1  # done once: nothing told the user to send it again


def test_the_client_waits_for_a_call_revoked_while_its_tool_runs_and_is_told_a_revoke_that_stopped_it(
        ledger_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    from celery.exceptions import TaskRevokedError

    from fittest.client import CallRevoked

    p = ledger_pipeline
    revoke_while_it_runs(p, "revoked-running-client-1", "client")
    result = p.client.result("revoked-running-client-1", timeout=60)
    assert result.status == "success" and result.output == {"written": "client"}, result
    # A call revoked before any worker took it ends without a result, told at once as revoked.
    control = make_app(p.settings)
    try:
        p.client.cancel("revoked-before-1")  # the client's own revoke (QA 52a L4)
        p.wait_for(lambda: "revoked-before-1" in {i for ids in (control.control.inspect(timeout=1).revoked() or {}).values()
                                                  for i in ids}, timeout=30)
    finally:
        control.close()
    p.client.send("resilient_tool_call", scenario=SCENARIO, input={"seconds": 0, "tag": "never"}, call_id="revoked-before-1")
    with pytest.raises(TaskRevokedError, match="call revoked-before-1 was revoked before it ended") as raised:  # QA 52a L4
        p.client.result("revoked-before-1", timeout=30)
    assert isinstance(raised.value, CallRevoked) and raised.value.call_id == "revoked-before-1"
    said = cli_runner(monkeypatch, p.env)("result", "revoked-before-1", "--timeout", "10")
    assert said.exit_code == 1 and "was revoked (by its sender, from Flower or with `celery control revoke`): it has no result" in " ".join(said.output.split())
    assert "never" not in ledger(p)


def test_a_call_terminated_with_sigterm_while_its_tool_runs_stops_it(ledger_pipeline: Pipeline) -> None:
    """`celery control terminate SIGTERM ID` (README) still stops the tool: the pool processes outlive
    only a SIGTERM that came to the whole worker, which starts its warm shutdown (workers/group_stop.py)."""
    p = ledger_pipeline
    started = Path(p.settings.tools_dir) / "ledger_append" / "started-terminated"
    p.client.send("resilient_tool_call", scenario=SCENARIO, input={"seconds": 8, "tag": "terminated"}, call_id="terminated-1")
    p.wait_for(started.exists, timeout=60)
    control = make_app(p.settings)
    try:
        control.control.revoke("terminated-1", terminate=True, signal="SIGTERM")
        p.wait_for(lambda: control.AsyncResult("terminated-1").state == "REVOKED", timeout=10)
    finally:
        control.close()
    after = p.client.wait(p.client.send("resilient_tool_call", scenario=SCENARIO, input={"seconds": 0, "tag": "after"}), 60)
    assert after["status"] == "success", after
    time.sleep(max(0.0, started.stat().st_mtime + 9 - time.time()))  # past the 8 s it would have slept
    assert "terminated" not in ledger(p) and "after" in ledger(p)  # stopped: its line never written


def test_a_call_cancelled_while_its_step_waits_for_a_worker_is_told_revoked_at_once_and_never_runs(
        ledger_pipeline: Pipeline) -> None:
    """QA 52c N3: a call cancelled while its step waited in a queue no worker consumed had `result()`
    wait out its whole timeout, "in flight" taken for "running". And a worker started after the
    revoke never heard it (workers keep revokes in memory, and start without mingle), so it ran the
    step when it came."""
    from fittest.client import CallRevoked

    p = ledger_pipeline
    p.stack.stop("executor")
    try:
        p.client.send("resilient_tool_call", scenario=SCENARIO, input={"seconds": 0, "tag": "queued"}, call_id="revoked-queued-1")
        p.wait_for(lambda: p.client.step_of("revoked-queued-1") == "fittest.execute", timeout=60)  # waits in the execution queue
        p.client.cancel("revoked-queued-1")
        started = time.monotonic()
        with pytest.raises(CallRevoked):
            p.client.result("revoked-queued-1", timeout=120)
        assert time.monotonic() - started < 60  # told, not its 120 s waited out
    finally:
        p.stack.start_roles(["executor"])
        p.stack.wait_for_workers(["executor"])
    p.wait_for(lambda: not p.client.in_flight("revoked-queued-1"), timeout=60)  # the new executor took the step, and dropped it
    assert "queued" not in ledger(p)
    after = p.client.wait(p.client.send("resilient_tool_call", scenario=SCENARIO, input={"seconds": 0, "tag": "after-queued"}), 60)
    assert after["status"] == "success" and "after-queued" in ledger(p)


def test_a_call_cancelled_while_no_worker_runs_is_told_revoked_and_a_result_stored_stays(private_redis: RedisServer) -> None:
    """A revoke is a broadcast: the workers that hear it mark the call revoked in the result backend.
    With none running, nothing marked it, `result()` waited out its timeout, and the first worker to
    start would have run the call. `cancel` marks it itself now; a call that ended keeps its result."""
    from celery import Celery

    from fittest.client import CallRevoked, FittestClient

    client = FittestClient(private_redis.url)
    store = Celery("worker-side", backend=private_redis.url)
    try:
        pending = client.submit("sort these numbers", {"numbers": [2, 1]})  # no worker: it stays queued
        client.cancel(pending)
        started = time.monotonic()
        with pytest.raises(CallRevoked):
            client.result(pending, timeout=60)
        assert time.monotonic() - started < 30  # told, not its 60 s waited out
        ended = client.submit("sort these numbers", {"numbers": [3, 1]})
        store.backend.store_result(ended.id, {"call_id": ended.id, "status": "success"}, "SUCCESS")  # as its worker stores it
        client.cancel(ended)
        assert client.celery.backend.get_task_meta(ended.id, cache=False)["status"] == "SUCCESS"
    finally:
        client.close()
        store.close()


def test_calls_cancelled_as_soon_as_they_are_sent_are_counted_revoked_and_leave_flight(fresh_ledger_pipeline: Pipeline) -> None:
    """QA 55a L1: of 411 calls a client cancelled right after sending them, 251 were counted in
    `fittest_calls_total{status="revoked"}`: the worker that dropped the step ended the call only
    where it found the client's record of it in flight, which the client wrote a moment later, and
    which then stayed in flight until its due time."""
    from fittest.client import CallRevoked
    from workers.metrics import reader_for

    p = fresh_ledger_pipeline
    reader = reader_for(p.settings)

    def revoked_count() -> int:
        return sum(value for labels, value in reader.counters()["calls"] if labels.get("status") == "revoked")

    before = revoked_count()
    sent: list[Any] = []
    for i in range(10):
        pending = p.client.submit(SCENARIO, {"seconds": 0, "tag": f"cancelled-{i}"})
        p.client.cancel(pending)
        sent.append(pending)
    revoked = 0
    for pending in sent:
        try:
            p.client.result(pending, timeout=60)
        except CallRevoked:
            revoked += 1
    assert revoked >= 5  # most were cancelled before a worker began them
    p.wait_for(lambda: not any(p.client.in_flight(pending.id) for pending in sent), timeout=30)
    try:
        p.wait_for(lambda: revoked_count() - before == revoked, timeout=30)
    except AssertionError:  # which way it is off tells which path counted
        raise AssertionError(f"{revoked} calls told revoked, {revoked_count() - before} counted revoked") from None

"""`CallSender.wait` and what it tells of timeouts, revoked calls and expired messages, on an
in-memory result backend (workers/result_backend.py's waits on Redis are tested in
tests/integration/test_result_waits.py)."""

from __future__ import annotations

from celery import Celery
from celery.result import AsyncResult

from workers.client import CallSender


def test_a_call_waited_for_again_after_a_timeout_gets_its_result() -> None:
    """The README's pattern: `result()` timed out (or met Redis away), the call goes on, and a later
    `result()` of the same handle gets it (QA I: the second raised AttributeError once)."""
    from celery.exceptions import TimeoutError as CeleryTimeout
    import pytest

    app = Celery("t", backend="cache+memory://")
    try:
        pending = AsyncResult("call-2", app=app)
        with pytest.raises(CeleryTimeout):
            CallSender.wait(pending, timeout=0.2)
        app.backend.store_result("call-2", {"status": "success"}, "SUCCESS")
        assert CallSender.wait(pending, timeout=5) == {"status": "success"}
    finally:
        app.close()


def test_a_timeout_of_zero_or_less_is_said_at_once_not_taken_for_no_timeout() -> None:
    """QA integrator 1: Celery reads a timeout of 0 as none, and `run(timeout=0)` (a service passing
    what was left of its deadline) waited for ever; a result already there is still returned."""
    import time

    import pytest
    from celery.exceptions import TimeoutError as CeleryTimeout

    app = Celery("t", backend="cache+memory://")
    try:
        for timeout in (0.0, -1.0):
            started = time.monotonic()
            with pytest.raises(CeleryTimeout):
                CallSender.wait(AsyncResult("call-4", app=app), timeout=timeout)
            assert time.monotonic() - started < 1.0
        app.backend.store_result("call-4", {"status": "success"}, "SUCCESS")
        assert CallSender.wait(AsyncResult("call-4", app=app), timeout=0) == {"status": "success"}
    finally:
        app.close()


def test_a_message_dropped_as_expired_is_a_timeout_as_documented(monkeypatch) -> None:
    """QA integrator 4: a judgement whose message a worker dropped as expired raised celery's
    TaskRevokedError, which `except TimeoutError` (what `record_feedback` documents) does not catch."""
    import pytest
    from celery.exceptions import TaskRevokedError
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.settings import Settings

    sender = CallSender(Settings(redis_url="redis://127.0.0.1:1/0"))
    monkeypatch.setattr(sender.celery, "send_task", lambda *a, **k: AsyncResult("fb-1", app=sender.celery))

    def revoked(result: AsyncResult, timeout: float = 0) -> dict:
        raise TaskRevokedError("expired")

    monkeypatch.setattr(CallSender, "wait", staticmethod(revoked))
    with pytest.raises(TimeoutError, match="no worker took it within 0.5 s; it was not done") as raised:
        sender.ask_within("record_feedback", 0.5, queue="feedback")
    assert isinstance(raised.value, CeleryTimeout)  # both: the builtin and celery's (QA recheck F2)


def test_a_timeout_that_is_not_a_number_is_refused_not_waited_on_for_ever() -> None:
    """QA recheck F1: `run(timeout=float("nan"))` waited for ever (NaN compares false with every time)."""
    import pytest

    app = Celery("t", backend="cache+memory://")
    try:
        with pytest.raises(ValueError, match="timeout: not a number"):
            CallSender.wait(AsyncResult("call-5", app=app), timeout=float("nan"))
    finally:
        app.close()


def test_a_wait_for_ever_sends_a_message_that_never_expires(monkeypatch) -> None:
    """Review: `--timeout inf` (or 1e12) of `explain`, `feedback`, `weights --retrain`, `recommend`
    ended in celery's OverflowError computing the message's expiry date, before anything was sent."""
    import math

    from workers.settings import Settings

    sender = CallSender(Settings(redis_url="redis://127.0.0.1:1/0"))
    sent: list[dict] = []

    def send_task(name: str, **kwargs: object) -> AsyncResult:
        sent.append(kwargs)
        return AsyncResult("fb-2", app=sender.celery)

    monkeypatch.setattr(sender.celery, "send_task", send_task)
    monkeypatch.setattr(CallSender, "wait", staticmethod(lambda result, timeout=0: {"status": "recorded"}))
    for timeout in (math.inf, 1e12, 30.0):
        assert sender.ask_within("record_feedback", timeout, queue="feedback") == {"status": "recorded"}
    assert [k["expires"] for k in sent] == [None, None, 30.0]


def test_a_call_revoked_for_good_is_told_revoked_however_little_of_the_wait_is_left(monkeypatch) -> None:
    """Review: with the wait's time used up, a call revoked long ago (no step in flight) was said to be
    revoked "while a worker ran its step", which goes on; only a call whose step a worker holds is.
    QA 52c N3: one whose step waits in its queue, which no worker consumed, waited out the whole
    timeout; it will not run, and is told revoked at once."""
    import pytest
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.settings import Settings
    from workers.state.inflight import HandedOnStep

    sender = CallSender(Settings(redis_url="redis://127.0.0.1:1/0"))
    sender.celery.conf.result_backend = "cache+memory://"
    sender.celery.backend.mark_as_revoked("call-6")
    step = HandedOnStep(task_id="call-6", task="fittest.execute")
    monkeypatch.setattr("workers.client.REVOKED_SETTLE_S", 0.0)
    monkeypatch.setattr(CallSender, "current_step", lambda self, call_id: None)
    assert sender.past_revoke("call-6", 0.0) is None
    monkeypatch.setattr(CallSender, "current_step", lambda self, call_id: step)
    asked: list[tuple[str, str | None]] = []

    def waiting(self: CallSender, call_id: str, task: str, queue: str | None = None) -> bool:
        asked.append((task, queue))
        return True

    monkeypatch.setattr(CallSender, "waits_in_queue", waiting)
    assert sender.past_revoke("call-6", 60.0) is None  # at once: its step waits in its queue
    assert asked == [("fittest.execute", None)]
    for unknown in (False, None):  # taken by a worker, or a queue too long to read
        monkeypatch.setattr(CallSender, "waits_in_queue", lambda self, call_id, task, queue=None, said=unknown: said)
        with pytest.raises(CeleryTimeout, match="a worker still runs its step"):
            sender.past_revoke("call-6", 0.0)
    sender.celery.backend.store_result("call-6", {"status": "success"}, "SUCCESS")  # what the running step stored
    assert sender.past_revoke("call-6", 0.0) == {"status": "success"}


def test_a_revoked_call_whose_running_step_stored_an_error_raises_that_error(monkeypatch) -> None:
    """Review 48: the client raised TaskRevokedError for a revoked call whose running step then
    stored an error over the mark, where `fittest result` tells that error."""
    import pytest
    from celery.exceptions import TaskRevokedError

    from fittest.client import FittestClient
    from workers.settings import Settings

    client = FittestClient(settings=Settings(redis_url="redis://127.0.0.1:1/0"))
    client.celery.conf.result_backend = "cache+memory://"

    def revoked(self, pending, timeout):
        raise TaskRevokedError(pending.id)

    monkeypatch.setattr(CallSender, "wait_for_call", revoked)
    monkeypatch.setattr(CallSender, "past_revoke", lambda self, call_id, timeout: None)
    client.celery.backend.mark_as_revoked("call-7")
    with pytest.raises(TaskRevokedError):
        client.result("call-7", timeout=1)
    client.celery.backend.mark_as_failure("call-7", KeyError("fittest.resilient_tool_call"))
    with pytest.raises(KeyError, match="fittest.resilient_tool_call"):
        client.result("call-7", timeout=1)

"""The JSON log formatter: one parseable object per record, extras kept, wired by Celery's signal."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from celery.signals import after_setup_logger

from workers.logging import EVENT_LOGGER, JsonFormatter, install


def formatted(logger: logging.Logger, log: Callable[[], object]) -> str:
    """What `log` wrote through `logger` with the JSON formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    try:
        log()
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def emit(logger: logging.Logger, **extra: object) -> dict:
    lines = formatted(logger, lambda: logger.info("attempt", extra=extra)).splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def test_an_attempt_event_is_one_json_object_with_its_fields() -> None:
    logger = logging.getLogger("fittest.attempt.test")
    logger.setLevel(logging.INFO)
    doc = emit(logger, event="attempt", call_id="c1", tool="slugify", version="1.0.0", outcome="failure",
               error_class="bad_input", execution_time_ms=2.5)
    assert doc["message"] == "attempt" and doc["level"] == "info" and doc["logger"] == "fittest.attempt.test"
    assert {k: doc[k] for k in ("event", "call_id", "tool", "version", "outcome", "error_class", "execution_time_ms")} == {
        "event": "attempt", "call_id": "c1", "tool": "slugify", "version": "1.0.0", "outcome": "failure",
        "error_class": "bad_input", "execution_time_ms": 2.5}
    assert datetime.fromisoformat(doc["time"]).utcoffset() == timedelta(0) and list(doc)[0] == "time"
    assert "task_id" not in doc  # logged outside any Celery task


def test_a_record_logged_in_a_task_names_it_and_in_a_batch_without_an_id_too() -> None:
    """QA N: the lines of the batch tasks (fittest.learn, fittest.record_outcome) named no task:
    celery-batches runs a batch with a request of no id, which the formatter took for no task."""
    from celery import Celery
    from celery._state import _task_stack
    from celery.app.task import Context

    app = Celery("log-test", set_as_current=False)

    @app.task(name="logtest.learn", shared=False)  # shared (the default): every app, ours too, would get it
    def learn() -> None: ...

    logger = logging.getLogger("fittest.learning.test")
    logger.setLevel(logging.INFO)
    for request, expected in ((Context(id="t-1"), {"task_id": "t-1", "task_name": "logtest.learn"}),
                              (Context(), {"task_name": "logtest.learn"})):
        _task_stack.push(learn)
        learn.request_stack.push(request)
        try:
            doc = emit(logger, event="learn")
        finally:
            learn.request_stack.pop()
            _task_stack.pop()
        assert {k: doc[k] for k in ("task_id", "task_name") if k in doc} == expected


def test_exceptions_and_unserialisable_values_still_give_valid_json() -> None:
    logger = logging.getLogger("fittest.test.exc")

    def failed() -> None:
        try:
            raise ValueError("bad \"quote\"\nand newline")
        except ValueError:
            logger.exception("failed", extra={"obj": object()})

    (line,) = formatted(logger, failed).splitlines()  # the traceback stays inside the one line
    doc = json.loads(line)
    assert doc["level"] == "error" and "ValueError: bad" in doc["exc"] and doc["obj"].startswith("<object")


@pytest.mark.parametrize("log_json", [True, False])
def test_celery_logging_signal_sets_the_formatter_only_when_asked(monkeypatch, log_json: bool) -> None:
    from workers.settings import get_settings

    monkeypatch.setenv("FITTEST_LOG_JSON", str(log_json).lower())
    get_settings.cache_clear()
    install()
    root = logging.Logger("celery-root-under-test")  # noqa: LOG001 - a logger of its own, unregistered
    handler = logging.StreamHandler(io.StringIO())
    plain = logging.Formatter("%(message)s")
    handler.setFormatter(plain)
    root.addHandler(handler)
    try:
        after_setup_logger.send(sender=None, logger=root, loglevel=logging.WARNING, logfile=None, format="", colorize=False)
        assert isinstance(handler.formatter, JsonFormatter) is log_json
        assert logging.getLogger(EVENT_LOGGER).level == logging.INFO  # events pass a WARNING worker
        if not log_json:  # Celery's text line, then the event's fields (QA: a line said only "attempt")
            root.warning("attempt", extra={"event": "attempt", "call_id": "c1", "tool": "fast_sort",
                                           "error_message": "no result within 2s", "probability": 0.5})
            assert handler.stream.getvalue().splitlines()[-1] == (
                'attempt call_id=c1 tool=fast_sort error_message="no result within 2s" probability=0.5')
    finally:
        get_settings.cache_clear()


def test_a_failed_attempt_is_a_warning_that_says_what_failed_and_a_callers_mistake_is_not(caplog) -> None:
    """QA ops: every attempt was logged at info as "attempt", and a tool's error ("RuntimeError: zorp
    engine exploded", a timeout) was in the caller's result only: alerting on warnings saw no failure."""
    from selection.models import FailureClass, ToolExecutionResult
    from workers.tasks.execution import log_attempt

    def attempt(**fields: object) -> ToolExecutionResult:
        return ToolExecutionResult(attempt_id="c1:0", call_id="c1", tool="zorp", version="1.0.0", **fields)

    caplog.set_level(logging.INFO, logger="fittest")
    log_attempt(attempt(success=False, error_class=FailureClass.crash, error_message="RuntimeError: zorp engine exploded"),
                "learned", 0.9, "closed")
    log_attempt(attempt(success=False, error_class=FailureClass.bad_input, error_message="KeyError: 'text'",
                        callers_mistake=True), "learned", 0.9, "closed")
    log_attempt(attempt(success=True, result={"ok": 1}), "learned", 0.9, "closed")
    crash, mistake, success = caplog.records[-3:]
    assert crash.levelno == logging.WARNING and "zorp@1.0.0 failed (crash): RuntimeError: zorp engine exploded" in crash.getMessage()
    assert getattr(crash, "error_message") == "RuntimeError: zorp engine exploded" and getattr(crash, "event") == "attempt"
    assert mistake.levelno == logging.INFO and getattr(mistake, "callers_mistake") is True
    assert success.levelno == logging.INFO and success.getMessage() == "attempt c1:0 of call c1: zorp@1.0.0 succeeded"


def test_every_line_names_the_host_and_process_that_wrote_it() -> None:
    import os
    import socket

    doc = emit(logging.getLogger("fittest.attempt.test"), event="attempt")
    assert doc["host"] == socket.gethostname() and doc["pid"] == os.getpid()


def test_a_traceback_written_to_a_redirected_stderr_is_logged_a_line_at_a_time() -> None:
    """QA 59d L1: the beat's stderr, redirected to a logger by Celery, logged each `write`, and
    Python writes a traceback in pieces: one traceback made 2,251 JSON lines, many a lone "^"."""
    import traceback

    from workers.logging import LineLoggingProxy

    records: list[str] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("test.redirected")
    logger.addHandler(Kept())
    logger.propagate = False
    proxy = LineLoggingProxy(logger, logging.WARNING)
    try:
        raise KeyError("missing")
    except KeyError as exc:
        written = "".join(traceback.format_exception(exc))
        traceback.print_exception(exc, file=proxy)
    proxy.write("a last line without its newline")
    proxy.close()
    assert records == [*written.rstrip("\n").split("\n"), "a last line without its newline"]


def test_what_a_terminal_acts_on_is_written_as_jsons_escapes_and_reads_the_same() -> None:
    """QA 64a: a tool's U+009B (8-bit CSI) and U+202E reached the terminal raw in the JSON lines
    `fittest up` relays; JSON escapes C0 controls only."""
    logger = logging.getLogger("fittest.tool.test")
    line = formatted(logger, lambda: logger.warning("printed a\x9b31m b\u202eRTL é",
                                                    extra={"event": "tool_printed", "text": "\x9b\u2066"}))
    assert not any(ch in line for ch in "\x9b\u202e\u2066") and "é" in line, repr(line)
    doc = json.loads(line)
    assert (doc["message"], doc["text"]) == ("printed a\x9b31m b\u202eRTL é", "\x9b\u2066")

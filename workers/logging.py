"""Structured logs: one JSON object per line, so a log shipper can index every attempt by call id,
tool, version and outcome without parsing prose.

The worker roles get it through Celery's logging signals (`install()` connects them; `workers.app`
calls it), which keep Celery's own handlers, log file and level and only swap their formatter;
`FITTEST_LOG_JSON=false` keeps Celery's text format, with the same fields after each line as
`key=value` (without them an event line said only `attempt`). The `fittest` loggers log at INFO whatever
the worker's `--loglevel`, because their records are the product's event stream (one `attempt`
event per attempt), not debugging chatter.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from typing import Any

from celery.app.log import Logging
from celery.utils.log import LoggingProxy
from kombu.utils.encoding import safe_str

from pythonjsonlogger.core import RESERVED_ATTRS, merge_record_extra
from pythonjsonlogger.json import JsonFormatter as LibraryJsonFormatter

from workers.terminal_controls import escaped_in_json

EVENT_LOGGER = "fittest"
# The event a worker logs once it consumes its queues: `fittest up` (workers/procfile.py) reads it
# in the role's output, and an end after it is no failed start, however soon it comes.
WORKER_READY = "worker_ready"


def says_ready(line: str) -> bool:
    """Whether a line of a role's output is its `WORKER_READY` event, as JSON or as text."""
    return f'"event": "{WORKER_READY}"' in line or f"event={WORKER_READY}" in line

# What our lines call the record's own attributes (python-json-logger's names are LogRecord's).
_FIELD_NAMES = {"levelname": "level", "name": "logger", "exc_info": "exc", "stack_info": "stack"}
_HOST = socket.gethostname()


class JsonFormatter(LibraryJsonFormatter):
    """python-json-logger's formatter, with the field names a log shipper here indexes (time, level,
    logger, message, exc, stack, then the `extra=` fields) and the Celery task the record was
    logged in (task id and name), when there is one: a batch task's (`fittest.learn`,
    `fittest.record_outcome`) has its name only, as celery-batches gives the batch no id (QA N:
    their lines had neither)."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s %(message)s", rename_fields=_FIELD_NAMES, timestamp="time",
                         json_ensure_ascii=False)

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        log_data["level"] = record.levelname.lower()
        # Which process wrote it, for a log shipper that does not add it (QA ops: no line said which
        # worker or host; honcho's "memory |" prefix is `fittest up`'s alone).
        log_data["host"], log_data["pid"] = _HOST, record.process
        task = _current_task()
        if task is not None:
            if task_id := getattr(task.request, "id", None):  # a batch of celery-batches has none of its own
                log_data["task_id"] = task_id
            log_data["task_name"] = task.name
            if worker := getattr(task.request, "hostname", None):  # the worker's node name: executor@host
                log_data["worker"] = worker

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {"time": log_data.pop("time"), **log_data}  # the time first, as a reader scans the lines

    def jsonify_log_record(self, log_record: dict[str, Any]) -> str:
        # JSON escapes the C0 controls only: a tool's U+009B (a terminal's 8-bit CSI) reached the
        # operator's terminal raw through `fittest up` (QA 64a); written as JSON's escapes, it reads the same.
        return escaped_in_json(super().jsonify_log_record(log_record))


class TextWithFields(logging.Formatter):
    """Celery's text line (its own formatter, kept), followed by the record's `extra=` fields."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        line = self.inner.format(record)
        extra = " ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False) if not isinstance(v, str) or ' ' in v else v}"
                         for k, v in fields(record).items() if k != "event")
        if not extra:
            return line
        first, newline, rest = line.partition("\n")  # a traceback stays below the line it belongs to
        return f"{first} {extra}{newline}{rest}"


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """What `extra=` put on the record (anything a LogRecord does not have by itself)."""
    return merge_record_extra(record, {}, reserved=RESERVED_ATTRS)


def _current_task() -> Any:
    try:
        from celery import current_task
    except ImportError:  # pragma: no cover - celery is a dependency; the formatter works without it
        return None
    return current_task._get_current_object() if current_task else None


def use_json(logger: logging.Logger) -> None:
    """Give every handler of `logger` the JSON formatter."""
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())


def _after_setup(logger: logging.Logger, **_: Any) -> None:
    from workers.settings import get_settings

    logging.getLogger(EVENT_LOGGER).setLevel(logging.INFO)
    if get_settings().log_json:
        use_json(logger)
    else:
        for handler in logger.handlers:
            if not isinstance(handler.formatter, TextWithFields):
                handler.setFormatter(TextWithFields(handler.formatter))


def install() -> None:
    """Connect the formatter to Celery's logging setup of every worker and beat process."""
    from celery.signals import after_setup_logger, after_setup_task_logger

    after_setup_logger.connect(_after_setup, weak=False, dispatch_uid="fittest.logging.root")
    after_setup_task_logger.connect(_after_setup, weak=False, dispatch_uid="fittest.logging.task")


class LineLoggingProxy(LoggingProxy):
    """Celery's proxy of a process's stdout and stderr, a record per line written: Celery's own logs
    each `write`, and Python 3.11 writes a traceback in pieces, its carets one at a time, so one
    traceback of the beat ended in 2,251 JSON lines, many a lone "^" (QA 59d L1)."""

    def __init__(self, logger: logging.Logger, loglevel: int | str | None = None) -> None:
        super().__init__(logger, loglevel)
        self._partial = ""
        self._partial_lock = threading.Lock()  # threads of one process write at once (QA 59f F8)

    def write(self, data: Any) -> int:
        with self._partial_lock:
            lines = (self._partial + safe_str(data)).split("\n")
            self._partial = lines.pop()
        for line in lines:
            super().write(line)
        return len(data)

    def flush(self) -> None:
        with self._partial_lock:
            partial, self._partial = self._partial, ""
        if partial:
            super().write(partial)

    def close(self) -> None:
        self.flush()
        super().close()


class FittestLogging(Logging):
    """Celery's logging setup (`app.log`), stdout and stderr redirected a line at a time."""

    def redirect_stdouts_to_logger(self, logger: logging.Logger, loglevel: int | str | None = None,
                                   stdout: bool = True, stderr: bool = True) -> LineLoggingProxy:
        proxy = LineLoggingProxy(logger, loglevel)
        if stdout:
            sys.stdout = proxy
        if stderr:
            sys.stderr = proxy
        return proxy

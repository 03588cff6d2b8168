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
import time
from typing import Any

EVENT_LOGGER = "fittest"

# Attributes every LogRecord has; anything else on a record came from `extra=` and is data.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """A record as one JSON line: time, level, logger, message, the `extra=` fields, and the
    Celery task it was logged in (task id and name), when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        task = _current_task()
        if task is not None:
            doc["task_id"] = task.request.id
            doc["task_name"] = task.name
        doc.update(fields(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


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
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def _iso(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


def _current_task() -> Any:
    try:
        from celery import current_task
    except ImportError:  # pragma: no cover - celery is a dependency; the formatter works without it
        return None
    task = current_task._get_current_object() if current_task else None
    return task if task is not None and getattr(task.request, "id", None) else None


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

"""Logging: what each line carries, and what is left out.

- :func:`log_context` names the execution, run and stage a line is about (the engine sets it
  around each stage); :class:`LogContext` puts them, and the OpenTelemetry trace and span ids
  of the current span, on every record: ``[exe_… run_… plan]`` at the end of a text line, or
  fields of a JSON one.
- :class:`JsonLines` writes one JSON object per line (``ALFRED_LOG_FORMAT=json``); the
  readable text stays the default (``make run``).

:class:`QuietScans` keeps the periodic scans (timers every second,
the webhook relay every second, recovery and the lane reconciler every few seconds) out of the log
when they find nothing to do. Celery writes three INFO lines per tick otherwise — beat's "Sending
due task", the worker's "Received task" and "succeeded" — which on ``make run`` is thousands of
lines an hour and buries everything else. A tick that did something (a non-zero count) keeps
its "succeeded" line; warnings and errors are never dropped.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TextIO

from celery.app.trace import LOG_RECEIVED
from opentelemetry import trace

SCAN_TASKS = frozenset(
    {
        "executions.tasks.timers_scan",
        "executions.tasks.webhook_relay",
        "executions.tasks.runs_recover",
        "lanes.tasks.reconcile",
        "executions.tasks.executions_prune",
    }
)
# A worker's heartbeat (every few seconds) says nothing; of a stage's task, its "received"
# line says nothing its "succeeded" line (and the execution's transitions) do not.
SILENT_TASKS = frozenset({"alfred.tasks.worker_heartbeat"})
UNRECEIVED_TASKS = frozenset({"executions.tasks.run_stage"})

FIELDS = ("execution", "run", "stage", "error_code", "trace_id", "span_id")
_context: ContextVar[dict[str, str]] = ContextVar("alfred_log_context", default={})  # noqa: B039


@contextmanager
def log_context(**fields: str) -> Iterator[None]:
    """Within the block, every line logged says which ``execution``, ``run``, ``stage``."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _context.reset(token)


class LogContext(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        known = _context.get()
        for field in ("execution", "run", "stage"):
            if not getattr(record, field, ""):
                setattr(record, field, known.get(field, ""))
        span = trace.get_current_span().get_span_context()
        record.trace_id = format(span.trace_id, "032x") if span.is_valid else ""
        record.span_id = format(span.span_id, "016x") if span.is_valid else ""
        # Only what the line does not say already ("exe_… succeeded (add-subdomain)").
        said = record.getMessage()
        named = [str(getattr(record, f)) for f in ("execution", "run", "stage")]
        named = [name for name in named if name and name not in said]
        record.context = f" [{' '.join(named)}]" if named else ""
        return True


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC), level, logger, message, the context's fields that
    are set, and the exception's traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in FIELDS:
            value = getattr(record, field, "")
            if value:
                line[field] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


class JsonStdout(io.TextIOBase):
    """Text printed to stdout, as JSON lines (``ALFRED_LOG_FORMAT=json``): one object a
    non-blank line, at INFO, from ``logger``.

    Celery prints, rather than logs, its worker's and beat's start-up banners and its "Warm
    shutdown" lines (to ``sys.__stdout__``, before and beside its logging): under JSON logging
    those were dozens of plain-text lines a log pipeline cannot parse. ``alfred.celery``
    puts this in front of a worker's or beat's stdout. Written straight to the stream it
    wraps, never through logging (whose handler may write to stdout too)."""

    def __init__(self, stream: TextIO, logger: str) -> None:
        super().__init__()
        self.stream, self.logger, self._partial = stream, logger, ""
        self._format = JsonLines()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            if line.strip():
                record = logging.LogRecord(
                    self.logger, logging.INFO, __file__, 0, line.rstrip(), None, None
                )
                self.stream.write(self._format.format(record) + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> None:  # type: ignore[override]
        """None, as Celery's own stdout proxy says: a writer to the descriptor itself (Celery's
        ``safe_say``, its "Warm shutdown" line) would bypass the JSON, so it writes nothing
        and the line is logged instead (``alfred.worker_stop``)."""
        return None

    def isatty(self) -> bool:
        return False  # no colours


def stdout_as_json_lines(logger: str) -> None:
    """Every line this process prints to stdout from now on, as a JSON line, and its Python
    warnings as log records (Celery warns of a worker run as root)."""
    if not stdout_is_json():
        wrapper = JsonStdout(sys.__stdout__ or sys.stdout, logger)
        # sys.__stdout__ too: Celery prints its banners there, past any sys.stdout.
        sys.stdout = sys.__stdout__ = wrapper  # type: ignore[misc,assignment]
        logging.captureWarnings(True)


def stdout_is_json() -> bool:
    return isinstance(sys.__stdout__, JsonStdout)


class QuietScans(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not record.name.startswith("celery"):
            return True
        args = record.args
        if isinstance(args, Mapping):  # the worker's "Received task" and "succeeded" lines
            if args.get("name") in SILENT_TASKS:
                return False
            if args.get("name") in UNRECEIVED_TASKS:
                return record.msg != LOG_RECEIVED
            if args.get("name") not in SCAN_TASKS:
                return True
            return str(args.get("return_value", "0")) not in ("0", "None")
        # beat's "Scheduler: Sending due task %s (%s)", entry.name, entry.task
        return not (isinstance(args, tuple) and any(arg in SCAN_TASKS for arg in args))

"""Logging filters.

:class:`QuietScans` keeps the periodic scans (DESIGN §5: timers every second, the webhook relay
every second, recovery and the lane reconciler every few seconds) out of the log when they
find nothing to do. Celery writes three INFO lines per tick otherwise — beat's "Sending due
task", the worker's "Received task" and "succeeded" — which on ``make run`` is thousands of
lines an hour and buries everything else. A tick that did something (a non-zero count) keeps
its "succeeded" line; warnings and errors are never dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

SCAN_TASKS = frozenset(
    {
        "executions.tasks.timers_scan",
        "executions.tasks.webhook_relay",
        "executions.tasks.runs_recover",
        "lanes.tasks.reconcile",
    }
)


class QuietScans(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not record.name.startswith("celery"):
            return True
        args = record.args
        if isinstance(args, Mapping):  # the worker's "Received task" and "succeeded" lines
            if args.get("name") not in SCAN_TASKS:
                return True
            return str(args.get("return_value", "0")) not in ("0", "None")
        # beat's "Scheduler: Sending due task %s (%s)", entry.name, entry.task
        return not (isinstance(args, tuple) and any(arg in SCAN_TASKS for arg in args))

"""The Celery application of the worker and beat processes."""

import os
import sys
from typing import Any

from celery import Celery
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_process_init,
    worker_process_shutdown,
)

from alfred.logs import stdout_as_json_lines
from alfred.telemetry import telemetry_flush, telemetry_setup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "alfred.settings")


def _celery_service() -> str | None:
    """``worker`` or ``beat`` when this process is ``celery … worker`` or ``celery … beat``
    (``python -m celery`` or the ``celery`` script), else None (web, manage.py, the tests)."""
    if not sys.argv[0].endswith(("celery", os.path.join("celery", "__main__.py"))):
        return None
    return next((arg for arg in sys.argv[1:] if arg in ("worker", "beat")), None)


# Celery prints its banners and shutdown lines instead of logging them: under JSON logging,
# each becomes a JSON line too (alfred.logs.JsonStdout). Only in Celery's own processes: a
# command's output (a token printed) stays as it is. Read from the environment as the
# settings read it, before Celery prints anything.
if os.environ.get("ALFRED_LOG_FORMAT") == "json" and (service := _celery_service()):
    stdout_as_json_lines(f"celery.{service}")

app = Celery("alfred")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _connections_kept(task: Any = None, **_: Any) -> None:
    """Around each task, what Django does around each request: a connection past
    ``CONN_MAX_AGE`` (ALFRED_DB_CONN_MAX_AGE) or left unusable by an error is closed, and the
    next statement checks the kept one first (``CONN_HEALTH_CHECKS``). Celery's own rule
    (close every connection around every task, switched off by CELERY_DB_REUSE_MAX) costs a
    new PostgreSQL backend per task, and its prepared statements prepared again. A task run
    eagerly (``apply``) runs in its caller's connection and transaction: left alone."""
    from django.db import close_old_connections

    if task is not None and getattr(task.request, "is_eager", False):
        return
    close_old_connections()


@worker_process_init.connect
def _tracing_in_each_pool_process(**_: Any) -> None:
    """The SDK in each pool process, after the fork (its exporter's thread would not survive
    one); off unless an OTLP endpoint is configured (alfred.telemetry)."""
    telemetry_setup("alfred-worker")


@worker_process_shutdown.connect
def _spans_flushed(**_: Any) -> None:
    telemetry_flush()

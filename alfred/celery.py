"""The Celery application of the worker and beat processes."""

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "alfred.settings")

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

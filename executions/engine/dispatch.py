"""Publishing work to Celery. The database is the source of truth; a message is only a hint
that work is ready, so every publisher is safe to call twice and a lost message is found again
by the recovery scan (``start_pending`` work, expired leases)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, current_app
from django.db import transaction
from django.utils import timezone

from executions.engine.projections import start_state_set
from executions.models import Execution, StartState

log = logging.getLogger(__name__)

RUN_START_TASK = "executions.tasks.run_start"


def run_publish(run_id: str, app: Celery | None = None) -> None:
    """Send the run's start message. Called after commit; on failure the execution records
    ``start_failed`` with the error projected (the recovery scan may re-dispatch it)."""
    try:
        (app or current_app).send_task(RUN_START_TASK, args=[run_id], queue="stages")
    except Exception as exc:
        log.exception("publishing run %s failed", run_id)
        run_start_failed(run_id, exc)


def run_dispatch_on_commit(run_id: str) -> None:
    transaction.on_commit(lambda: run_publish(run_id))


def run_start_failed(run_id: str, exc: BaseException) -> None:
    error: dict[str, Any] = {
        "code": "start_failed",
        "type": type(exc).__name__,
        "message": str(exc)[:500],
        "at": timezone.now().isoformat(),
    }
    with transaction.atomic():
        execution = (
            Execution.objects.select_for_update()
            .filter(current_run_id=run_id, start_state=StartState.START_PENDING)
            .first()
        )
        if execution is None:
            return  # already bound by a worker, or superseded by another run
        start_state_set(execution, StartState.START_FAILED, run_id=run_id, error=error)

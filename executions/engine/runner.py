"""Running a run under a fenced lease.

For now a run is *bound* only: the worker that receives the start message takes the lease
(``fence += 1``) and marks the execution ``started``. Stages arrive with the engine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from executions.events.outbox import event_emit, event_key
from executions.models import Execution, Run, RunStatus, StartState

log = logging.getLogger(__name__)

LEASE_SECONDS = 60


@dataclass(frozen=True)
class BindResult:
    bound: bool
    fence: int | None = None
    reason: str = ""


def run_bind(run_id: str, worker: str) -> BindResult:
    """Claim ``run_id`` for ``worker``. A duplicate message for a run already bound, or held
    under a live lease by another worker, binds nothing and says why."""
    now = timezone.now()
    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            return BindResult(False, reason="unknown run")
        if run.status not in (RunStatus.PENDING, RunStatus.RUNNING):
            return BindResult(False, reason=f"run is {run.status}")
        if run.lease_expires_at and run.lease_expires_at > now and run.lease_owner != worker:
            log.warning(
                "run %s is leased by %s until %s", run_id, run.lease_owner, run.lease_expires_at
            )
            return BindResult(False, reason=f"leased by {run.lease_owner}")
        execution = Execution.objects.select_for_update().get(pk=run.execution_id)
        if execution.current_run_id != run.id:
            return BindResult(False, reason="superseded by a newer run")

        run.fence += 1
        run.lease_owner = worker
        run.lease_expires_at = now + timedelta(seconds=LEASE_SECONDS)
        run.started_at = run.started_at or now
        run.save(update_fields=["fence", "lease_owner", "lease_expires_at", "started_at"])
        if execution.start_state != StartState.STARTED:
            execution.start_state = StartState.STARTED
            execution.start_error = None
            execution.save(update_fields=["start_state", "start_error", "updated_at"])
            event_emit(
                execution_id=execution.id,
                type="execution.started",
                key=event_key(execution.id, f"{run.id}:started"),
                payload={"run": run.id, "worker": worker, "fence": run.fence},
            )
        # No stage runs yet (the engine comes next): give the lease back at once so that the
        # next worker does not wait for it to expire.
        Run.objects.filter(pk=run.id, fence=run.fence).update(lease_owner="", lease_expires_at=None)
        return BindResult(True, fence=run.fence)

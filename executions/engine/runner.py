"""Running a run under a fenced lease.

For now a run is *bound* only: the worker that receives the start message takes the lease
(``fence += 1``) and marks the execution ``started``. Stages (and the lease's renewal and
expiry) arrive with the engine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from executions.engine.projections import start_state_set
from executions.models import Execution, Run, RunStatus, StartState

log = logging.getLogger(__name__)

LEASE_SECONDS = 60


@dataclass(frozen=True)
class BindResult:
    bound: bool
    fence: int | None = None
    reason: str = ""


def run_bind(run_id: str, worker: str) -> BindResult:
    """Claim ``run_id`` for ``worker`` (``host:pid``): take the lease, ``fence += 1``, mark the
    execution ``started``. Binding happens once per run: a duplicate start message (a
    redelivery, a second worker) binds nothing and reports the run's holder instead.

    Callers publish only runs that may start (lane owners, lane-free workflows); the run's
    lane is not re-checked here, the engine knows no lanes.
    """
    now = timezone.now()
    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            return BindResult(False, reason="unknown run")
        execution = Execution.objects.select_for_update().get(pk=run.execution_id)
        if execution.current_run_id != run.id:
            return BindResult(False, reason="superseded by a newer run")
        if run.status not in (RunStatus.PENDING, RunStatus.RUNNING):
            return BindResult(False, reason=f"run is {run.status}")
        if run.fence > 0 and execution.start_state == StartState.STARTED:
            log.warning(
                "duplicate start of run %s ignored: bound by %s (fence %d)",
                run.id, run.lease_owner, run.fence,
            )  # fmt: skip
            return BindResult(False, fence=run.fence, reason=f"already bound by {run.lease_owner}")

        run.fence += 1
        run.lease_owner = worker
        run.lease_expires_at = now + timedelta(seconds=LEASE_SECONDS)
        run.started_at = run.started_at or now
        run.save(update_fields=["fence", "lease_owner", "lease_expires_at", "started_at"])
        start_state_set(
            execution, StartState.STARTED, run_id=run.id, worker=worker, fence=run.fence
        )
        return BindResult(True, fence=run.fence)

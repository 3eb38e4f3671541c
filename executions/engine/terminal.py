"""The terminal transition (DESIGN §2.7): one transaction sets the terminal status, records
the result or error, purges the run's pending timers and hooks, cancels pending children,
emits the terminal event; after commit, the lane is asked to act and a waiting parent wakes."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.dispatch import Signal
from django.utils import timezone

from executions.events.outbox import event_emit, event_key
from executions.models import (
    TERMINAL_STATUSES,
    Execution,
    ExecutionStatus,
    Hook,
    HookStatus,
    Run,
    RunStatus,
    Stage,
    StageStatus,
    Timer,
    TimerStatus,
)

# Sent after the commit of every terminal transition, with ``execution_id`` and ``lane_key``:
# the lane reconciler listens (the engine knows no lanes).
execution_finished = Signal()

_RUN_STATUS = {
    ExecutionStatus.SUCCEEDED: RunStatus.SUCCEEDED,
    ExecutionStatus.FAILED: RunStatus.FAILED,
    ExecutionStatus.CANCELED: RunStatus.CANCELED,
    ExecutionStatus.ROLLED_BACK: RunStatus.SUCCEEDED,
}


def execution_stop(
    execution: Execution, *, actor: str, reason: str = "", code: str = "canceled"
) -> bool:
    """Cancel ``execution`` (its row locked by the caller). A run with a stage in flight is
    asked to stop at its next step boundary, so that the step it is in finishes and records
    its receipt (a mutation left without one could never be undone); anything else is
    canceled at once. Returns whether it was canceled at once."""
    run = Run.objects.select_for_update().get(pk=execution.current_run_id)
    if run.status == RunStatus.RUNNING and run.lease_owner:
        if run.cancel_requested_at is None:
            run.cancel_requested_at = timezone.now()
            run.save(update_fields=["cancel_requested_at"])
            event_emit(
                execution_id=execution.id,
                type="execution.cancel_requested",
                key=event_key(execution.id, f"{run.id}:cancel_requested"),
                payload={"run": run.id, "by": actor, "reason": reason},
            )
        return False
    error = {"code": code, "message": reason or f"canceled by {actor}"}
    execution_finish(execution, ExecutionStatus.CANCELED, error=error)
    return True


def execution_finish(
    execution: Execution,
    status: str,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> bool:
    """Move ``execution`` (its row locked by the caller's transaction) to terminal ``status``.
    Returns False, changing nothing, when it is terminal already."""
    if execution.status in TERMINAL_STATUSES:
        return False
    now = timezone.now()
    run_id = execution.current_run_id
    execution.status = status
    execution.result = result
    execution.error = error
    execution.finished_at = now
    execution.save(update_fields=["status", "result", "error", "finished_at", "updated_at"])
    # The fence moves: a worker still running a stage of this run is fenced out at its next
    # write (it cannot bring a finished execution back).
    Run.objects.filter(pk=run_id).update(
        status=_RUN_STATUS[ExecutionStatus(status)],
        finished_at=now,
        error=error,
        lease_owner="",
        lease_expires_at=None,
        fence=F("fence") + 1,
    )
    Stage.objects.filter(
        run_id=run_id, status__in=[StageStatus.RUNNING, StageStatus.WAITING]
    ).update(status=StageStatus.FAILED, error=error or {"code": status}, finished_at=now)
    Timer.objects.filter(run_id=run_id, status=TimerStatus.PENDING).update(
        status=TimerStatus.CANCELED
    )
    Hook.objects.filter(run_id=run_id, status=HookStatus.PENDING).update(
        status=HookStatus.CANCELED, resolved_at=now
    )
    for child in Execution.objects.select_for_update().filter(
        parent_id=execution.id, status__in=sorted(set(ExecutionStatus) - TERMINAL_STATUSES)
    ):
        execution_stop(
            child,
            actor=f"execution:{execution.id}",
            reason=f"parent {execution.id} became {status}",
            code="parent_finished",
        )
    event_emit(
        execution_id=execution.id,
        type=f"execution.{status}",
        key=event_key(execution.id, f"{run_id}:{status}"),
        payload={"run": run_id, "result": result, "error": error},
    )
    if execution.parent_id:
        from executions.engine.dispatch import run_wake

        parent_run = (
            Execution.objects.filter(pk=execution.parent_id)
            .values_list("current_run_id", flat=True)
            .first()
        )
        if parent_run:
            run_wake(parent_run)
    execution_id, lane_key = execution.id, execution.lane_key
    transaction.on_commit(
        lambda: execution_finished.send(Execution, execution_id=execution_id, lane_key=lane_key)
    )
    return True

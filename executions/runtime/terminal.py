"""The terminal transition (docs/architecture.md, "Life of an execution"): one transaction sets the
terminal status, records the result or error, purges the run's pending timers and hooks, cancels
pending children, emits the terminal event; after commit, the lane is asked to act and a waiting
parent wakes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone

from alfred.db import Statement, statements_run
from executions.events import EventType
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
from executions.outbox import Event, event_emit, event_key, events_emit_statement
from executions.runtime.dispatch import run_wake
from executions.runtime.writes import Change, rows_update_statement

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
                type=EventType.CANCEL_REQUESTED,
                key=event_key(execution.id, f"{run.id}:cancel_requested"),
                payload={"run": run.id, "by": actor, "reason": reason},
            )
        return False
    error = {"code": code, "message": reason or f"canceled by {actor}"}
    execution_finish(execution, ExecutionStatus.CANCELED, error=error)
    return True


def run_purge_parts(*, when: str = "TRUE", besides: str = "NULL") -> str:
    """The terminal transition's ``WITH`` parts that end what its run left unfinished: each
    stage in flight failed (with parameter ``stage_error``), each pending timer and hook
    canceled, at parameter ``now``, for run ``run``. ``when``: an SQL condition they wait
    for (a statement that tests under its locks first); ``besides``: a stage left alone
    (one the statement ends itself)."""
    return f"""
    stages AS (
        UPDATE {Stage._meta.db_table}
        SET status = '{StageStatus.FAILED}', error = %(stage_error)s, finished_at = %(now)s
        WHERE run_id = %(run)s AND id IS DISTINCT FROM {besides}
          AND status IN ('{StageStatus.RUNNING}', '{StageStatus.WAITING}') AND {when}
    ), timers AS (
        UPDATE {Timer._meta.db_table} SET status = '{TimerStatus.CANCELED}'
        WHERE run_id = %(run)s AND status = '{TimerStatus.PENDING}' AND {when}
    ), hooks AS (
        UPDATE {Hook._meta.db_table}
        SET status = '{HookStatus.CANCELED}', resolved_at = %(now)s
        WHERE run_id = %(run)s AND status = '{HookStatus.PENDING}' AND {when}
    )"""  # noqa: S608 - our own names and conditions; every value is bound


_FINISH_SQL = f"""
    WITH execution AS (
        UPDATE {Execution._meta.db_table}
        SET status = %(status)s, result = %(result)s, error = %(error)s,
            finished_at = %(now)s, updated_at = %(now)s
        WHERE id = %(execution)s
    ), run AS (
        UPDATE {Run._meta.db_table}
        SET status = %(run_status)s, finished_at = %(now)s, error = %(error)s,
            lease_owner = '', lease_expires_at = NULL, fence = fence + 1
        WHERE id = %(run)s
    ), {run_purge_parts()}
    SELECT EXISTS (
        SELECT 1 FROM {Execution._meta.db_table}
        WHERE parent_id = %(execution)s AND NOT (status = ANY(%(terminal)s))
    )
"""  # noqa: S608
_TERMINAL = sorted(TERMINAL_STATUSES)


def terminal_event(
    execution_id: str,
    run_id: str | None,
    status: str,
    *,
    result: Any,
    error: dict[str, Any] | None,
) -> Event:
    """The execution's terminal event, ``execution.<status>``."""
    return Event(
        type=EventType(f"execution.{status}"),
        key=event_key(execution_id, f"{run_id}:{status}"),
        payload={"run": run_id, "result": result, "error": error},
    )


def execution_finish(
    execution: Execution,
    status: str,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    events: Sequence[Event] = (),
    rows: Sequence[Change] = (),
) -> bool:
    """Move ``execution`` (its row locked by the caller's transaction) to terminal ``status``:
    the caller's ``rows`` (such as the last stage's end), one statement for its own rows, and
    ``events`` (the caller's) with the terminal event in one emission, all three in one round
    trip; then its pending children. Returns False, changing nothing, when it is terminal
    already."""
    if execution.status in TERMINAL_STATUSES:
        return False
    now = timezone.now()
    run_id = execution.current_run_id
    execution.status = status
    execution.result = result
    execution.error = error
    execution.finished_at = execution.updated_at = now
    json = Execution._meta.get_field("result")
    terminal = terminal_event(execution.id, run_id, status, result=result, error=error)
    # The fence moves: a worker still running a stage of this run is fenced out at its next
    # write (it cannot bring a finished execution back).
    finish = Statement(
        _FINISH_SQL,
        {
            "execution": execution.id,
            "run": run_id,
            "status": status,
            "run_status": _RUN_STATUS[ExecutionStatus(status)],
            "result": json.get_db_prep_save(result, connection),
            "error": json.get_db_prep_save(error, connection),
            "stage_error": json.get_db_prep_save(error or {"code": status}, connection),
            "now": now,
            "terminal": _TERMINAL,
        },
        lambda found: found[0][0],  # whether children are still active
    )
    _, children, _ = statements_run(
        [
            rows_update_statement(rows),
            finish,
            events_emit_statement(execution.id, [*events, terminal]),
        ]
    )
    if children:
        for child in Execution.objects.select_for_update().filter(
            parent_id=execution.id, status__in=sorted(set(ExecutionStatus) - TERMINAL_STATUSES)
        ):
            execution_stop(
                child,
                actor=f"execution:{execution.id}",
                reason=f"parent {execution.id} became {status}",
                code="parent_finished",
            )
    if execution.parent_id:
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

"""Operator and integration controls: one function per transition (DESIGN §4). Each opens a
durable transaction, re-reads the execution under its row lock, checks that the state allows
the move, writes, records its event (and an audit entry for operators) and dispatches after
commit."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from executions.engine.dispatch import run_dispatch_on_commit
from executions.engine.records import run_again
from executions.engine.terminal import execution_stop
from executions.events.outbox import event_emit, event_key
from executions.lane_holding import execution_lane_claim
from executions.models import (
    TERMINAL_STATUSES,
    AuditEntry,
    Execution,
    ExecutionStatus,
    RunKind,
)
from executions.workflows.base import InvalidInput
from executions.workflows.registry import get_workflow
from lanes.services import LaneConflict, lane_leave


class InvalidState(Exception):
    def __init__(self, execution: Execution, action: str) -> None:
        super().__init__(f"cannot {action} an execution that is {execution.status}")
        self.execution_id = execution.id
        self.status = execution.status


class NotRetryable(InvalidState):
    pass


@dataclass(frozen=True)
class CancelResult:
    execution: Execution
    immediate: bool  # False: the running step finishes, the run stops at the next boundary


def execution_cancel(*, execution_id: str, actor: str, reason: str = "") -> CancelResult:
    """A suspended or not yet started run is canceled at once; a running one at its next step
    boundary (the request is recorded on the run, which the step boundary checks)."""
    with transaction.atomic(durable=True):
        execution = Execution.objects.select_for_update().get(pk=execution_id)
        if execution.status in TERMINAL_STATUSES:
            raise InvalidState(execution, "cancel")
        _audit(actor, "execution.cancel", execution.id, reason)
        # A queued execution leaves its lane's queue with the cancel, not at the next handover.
        lane_leave(execution_id=execution.id)
        immediate = execution_stop(execution, actor=actor, reason=reason)
        return CancelResult(execution, immediate=immediate)


def execution_retry(*, execution_id: str, actor: str) -> Execution:
    """A new run (kind retry, no step cache) on a failed or canceled execution, once its
    persisted input still fits the workflow's current schema. A rolled-back execution is an
    audit record: never retried."""
    with transaction.atomic(durable=True):
        execution = Execution.objects.select_for_update().get(pk=execution_id)
        if execution.status == ExecutionStatus.ROLLED_BACK:
            raise NotRetryable(execution, "retry")
        if execution.status not in (ExecutionStatus.FAILED, ExecutionStatus.CANCELED):
            raise InvalidState(execution, "retry")
        workflow = get_workflow(execution.workflow)
        workflow.validate(execution.input)  # InvalidInput: 422, nothing changed
        previous = execution.status
        run = run_again(
            execution,
            kind=RunKind.RETRY,
            stages=workflow.stages,
        )
        # LaneConflict: 409, nothing changed (the transaction rolls back)
        lane = execution_lane_claim(execution, workflow.lane(execution.input), urgent=True)
        event_emit(
            execution_id=execution.id,
            type="execution.retried",
            key=event_key(execution.id, f"{run.id}:retried"),
            payload={
                "run": run.id,
                "from_status": previous,
                "by": actor,
                "lane": None if lane is None else {"key": lane.key, "role": lane.role},
            },
        )
        _audit(actor, "execution.retry", execution.id, "")
        if lane is None or lane.may_start:
            run_dispatch_on_commit(run.id)
        return execution


def _audit(actor: str, action: str, execution_id: str, reason: str) -> None:
    AuditEntry.objects.create(
        actor=actor,
        action=action,
        target_type="execution",
        target_id=execution_id,
        reason=reason,
    )


__all__ = [
    "InvalidInput",
    "InvalidState",
    "LaneConflict",
    "NotRetryable",
    "execution_cancel",
    "execution_retry",
]

"""Operator and integration controls: one function per transition (DESIGN §4). Each opens a
durable transaction, re-reads the execution under its row lock, checks that the caller may
act on it and that its state allows the move, writes, records its event and an audit entry,
and dispatches after commit.

Who may act (DESIGN §8) is decided here, so the API, the admin and the commands agree: an
operator acts on anything; an integration on what it owns (``Execution.principal``, the
stable id of the principal that first accepted it); a viewer on nothing. A caller who may
not read the execution gets ``Execution.DoesNotExist`` (the API's 404), one who may read but
not act ``NotPermitted`` (403)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from alfred.principals import Caller
from alfred.readonly import ReadOnlyInstance, writes_allowed
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


class NotPermitted(Exception):
    def __init__(self, execution: Execution, action: str) -> None:
        super().__init__(f"only its owner or an operator may {action} execution {execution.id}")
        self.execution_id = execution.id


def _locked_for(caller: Caller, execution_id: str, action: str) -> Execution:
    """The execution under its row lock, once ``caller`` may ``action`` it."""
    writes_allowed()
    execution = Execution.objects.select_for_update().get(pk=execution_id)
    if caller.may_act_on(execution.principal):
        return execution
    if not caller.reads_all and not execution.keys.filter(principal=caller.principal).exists():
        raise Execution.DoesNotExist(execution_id)
    raise NotPermitted(execution, action)


@dataclass(frozen=True)
class CancelResult:
    execution: Execution
    immediate: bool  # False: the running step finishes, the run stops at the next boundary


def execution_cancel(*, execution_id: str, caller: Caller, reason: str = "") -> CancelResult:
    """A suspended or not yet started run is canceled at once; a running one at its next step
    boundary (the request is recorded on the run, which the step boundary checks)."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, "cancel")
        if execution.status in TERMINAL_STATUSES:
            raise InvalidState(execution, "cancel")
        audit_record(caller, "execution.cancel", execution.id, reason)
        # A queued execution leaves its lane's queue with the cancel, not at the next handover.
        lane_leave(execution_id=execution.id)
        immediate = execution_stop(execution, actor=caller.principal, reason=reason)
        return CancelResult(execution, immediate=immediate)


def execution_retry(*, execution_id: str, caller: Caller) -> Execution:
    """A new run (kind retry, no step cache) on a failed or canceled execution, once its
    persisted input still fits the workflow's current schema. A rolled-back execution is an
    audit record: never retried."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, "retry")
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
                "by": caller.principal,
                "lane": None if lane is None else {"key": lane.key, "role": lane.role},
            },
        )
        audit_record(caller, "execution.retry", execution.id, "")
        if lane is None or lane.may_start:
            run_dispatch_on_commit(run.id)
        return execution


def audit_record(
    caller: Caller, action: str, execution_id: str, reason: str, **data: object
) -> None:
    """One audit entry, in the caller's transaction: actor is the stable principal id, the
    name (a token's, a user's) rides along in ``data`` for people reading the log."""
    AuditEntry.objects.create(
        actor=caller.principal,
        action=action,
        target_type="execution",
        target_id=execution_id,
        reason=reason,
        data={"actor_name": caller.name, "role": caller.role, **data},
    )


__all__ = [
    "InvalidInput",
    "InvalidState",
    "LaneConflict",
    "NotPermitted",
    "NotRetryable",
    "ReadOnlyInstance",
    "execution_cancel",
    "execution_retry",
]

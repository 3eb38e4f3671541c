"""Operator and integration controls: one function per transition (docs/architecture.md, "States").
Each opens a durable transaction, re-reads the execution under its row lock, checks that the caller
may act on it and that its state allows the move, writes, records its event and an audit entry,
and dispatches after commit.

Who may act (docs/contract.md, "Authentication, roles and ownership") is decided here, so the API,
the admin and the commands agree: an operator acts on anything; an integration on what it owns
(``Execution.principal``, the stable id of the principal that first accepted it); a viewer on
nothing. A caller who may not read the execution gets ``Execution.DoesNotExist`` (the API's 404),
one who may read but not act ``NotPermitted`` (403).

Which states each control acts in is one :class:`Control` rule, checked by the service under
the row lock and read by :func:`execution_controls` for the resource's links and the admin,
so what is offered and what is done cannot disagree. The same rule says whether the control
needs a reason (``reason_required``), which the API, the admin and the commands ask for alike
(docs/contract.md, "Input rules": free text): a reason is required where an operator undoes
work (rollback; the lanes' recovery, ``lanes.services``), optional elsewhere: on cancel and
retry, which integrations use, and on approve and reject, whose plan hash is the consent the
audit entry records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from alfred.principals import Caller
from alfred.readonly import ReadOnlyInstance, writes_allowed
from executions import approvals
from executions.acceptance import execution_accept
from executions.audit import audit_record
from executions.catalog import InvalidInput, execution_subject, workflow_get
from executions.drift import drift_accept, recorded_outputs
from executions.events import EventType
from executions.lanes.holding import execution_lane_claim
from executions.models import (
    TERMINAL_STATUSES,
    Approval,
    Drift,
    Execution,
    ExecutionStatus,
    Hook,
    RunKind,
)
from executions.outbox import event_emit, event_key
from executions.runtime.clock import db_now
from executions.runtime.dispatch import run_dispatch_on_commit
from executions.runtime.hooks import hook_signal_locked
from executions.runtime.records import run_again
from executions.runtime.rollback import STAGES as ROLLBACK_STAGES
from executions.runtime.terminal import execution_stop
from lanes.services import LaneConflict, lane_leave


class InvalidState(Exception):
    """The execution's state forbids ``action`` (or, given, ``message`` says what)."""

    def __init__(self, execution: Execution, action: str = "", *, message: str = "") -> None:
        super().__init__(message or f"cannot {action} an execution that is {execution.status}")
        self.execution_id = execution.id
        self.status = execution.status


class NotRetryable(InvalidState):
    pass


class NotPermitted(Exception):
    def __init__(self, execution: Execution, action: str, *, operators_only: bool = False) -> None:
        who = "an operator" if operators_only else "its owner or an operator"
        super().__init__(f"only {who} may {action} execution {execution.id}")
        self.execution_id = execution.id


# Every way a control refuses (its message says why, for a person): what the admin and the
# command line turn into a message instead of an error page or a traceback.
REFUSALS = (InvalidState, InvalidInput, LaneConflict, NotPermitted, ReadOnlyInstance)


def cancel_allowed(execution: Execution) -> bool:
    """Anything not yet terminal (a running step finishes first)."""
    return execution.status not in TERMINAL_STATUSES


def retry_allowed(execution: Execution) -> bool:
    """Failed or canceled. Not rolled back: that is an audit record, never retried."""
    return execution.status in (ExecutionStatus.FAILED, ExecutionStatus.CANCELED)


@dataclass(frozen=True)
class Control:
    """A control, declared once: every face is made from this (the API's view, route, OpenAPI
    entry and link, the command's subcommand, the admin's confirmation page), and
    :func:`control_perform` calls its service.

    ``allows``: the states it acts in; who may use it (an operator, or unless
    ``operators_only`` the execution's owner); whether its caller must say why
    (``reason_required``: something besides whitespace, ``alfred.text``); ``summary``: what it
    does, in one line; ``title`` and ``done``: its button, and what its caller is told once it
    is recorded; what its caller sends besides the reason: the pending plan's hash
    (``plan_hash``: what that hash is of, said to the caller) and the blast-radius override
    (``force``)."""

    name: str
    allows: Callable[[Execution], bool]
    summary: str = ""
    title: str = ""  # its button and confirmation page
    done: str = ""  # what its caller is told once it is recorded ({plan_hash}: the one named)
    operators_only: bool = False
    reason_required: bool = False
    plan_hash: str = ""
    force: bool = False

    def usable_by(self, caller: Caller, execution: Execution) -> bool:
        return caller.may_act_on(execution.principal) and (
            caller.operates or not self.operators_only
        )


def approve_allowed(execution: Execution) -> bool:
    """Paused on an operator's checkpoint (a pending operator hook)."""
    return (
        execution.status == ExecutionStatus.PAUSED and execution.hooks.awaiting_operator().exists()
    )


def rollback_allowed(execution: Execution) -> bool:
    """Terminal and not rolled back: an active execution is canceled first (docs/architecture.md,
    "States"). Not once retention pruned its receipts: what it changed can no longer be found."""
    return execution.pruned_at is None and execution.status in (
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.CANCELED,
    )


CANCEL = Control(
    "cancel",
    cancel_allowed,
    "Cancel: at once when waiting or queued, at the next step boundary when running",
    title="Cancel",
    done="cancel recorded",
)
RETRY = Control(
    "retry",
    retry_allowed,
    "Retry a failed or canceled execution: a new run, no step cache",
    title="Retry",
    done="retry recorded: a new run is queued",
)
APPROVE = Control(
    "approve",
    approve_allowed,
    "Approve the pending plan, named by its hash (operators, as the approval policy allows; "
    "another plan's hash is refused)",
    title="Approve the plan",
    done="approved the plan {plan_hash}",
    operators_only=True,
    plan_hash="The hash of the pending plan (pending_approval.plan_hash).",
    force=True,
)
# The cancel of a paused execution bound, like approve, to the plan the operator saw.
REJECT = Control(
    "reject",
    approve_allowed,
    "Reject the pending plan, named by its hash: the execution is canceled (operators)",
    title="Reject the plan",
    done="rejected the plan {plan_hash}: the execution is canceled",
    operators_only=True,
    plan_hash="The hash of the pending plan you reject (pending_approval.plan_hash).",
)
ROLLBACK = Control(
    "rollback",
    rollback_allowed,
    "Roll back what the execution changed, from its receipts (operators)",
    title="Roll back",
    done="rollback recorded: a rollback run is queued",
    operators_only=True,
    reason_required=True,
)


def drift_open(execution: Execution) -> bool:
    """Succeeded, and the drift watch found what it did changed (an open drift)."""
    return execution.status == ExecutionStatus.SUCCEEDED and execution.drift_id is not None


ACCEPT_DRIFT = Control(
    "accept_drift",
    drift_open,
    "Accept the drift the watch found as what should be there now: the watch compares with "
    "it from then on, and a change from it is drift again (operators)",
    title="Accept the drift",
    done="drift accepted: the watch takes what is there as it should be",
    operators_only=True,
    reason_required=True,
)
# Start again: a new execution of the same operation, through acceptance as a request would
# be, for the execution's owner; it plans from what is there and asks for approval where its
# plan replaces something.
REDO = Control(
    "redo",
    drift_open,
    "Start the operation of a drifted execution again: a new execution (its predecessor this "
    "one) that plans from what is there, with approval where its plan needs it",
    title="Start again",
    done="started again",
)
CONTROLS: tuple[Control, ...] = (CANCEL, RETRY, APPROVE, REJECT, ROLLBACK, ACCEPT_DRIFT, REDO)
CONTROLS_BY_NAME: dict[str, Control] = {control.name: control for control in CONTROLS}

# A plan hash as the engine makes them (sha256, hex): what approve and reject name. Anything
# else is a typo, said as such on every face (never "another hash is waiting").
PLAN_HASH_PATTERN = r"^[0-9a-f]{64}\Z"
PLAN_HASH_EXPECTED = (
    "Expected the pending plan's hash as the execution shows it "
    "(pending_approval.plan_hash): 64 lower-case hex digits, e.g. "
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08."
)


def execution_controls(execution: Execution, caller: Caller) -> frozenset[str]:
    """The names of the controls ``caller`` may use on ``execution`` as it was read: each one
    the caller may use whose rule the state meets. What the links and the admin offer; the
    service decides again, under the row lock, by the same two tests."""
    return frozenset(
        control.name
        for control in CONTROLS
        if control.usable_by(caller, execution) and control.allows(execution)
    )


def _locked_for(caller: Caller, execution_id: str, control: Control) -> Execution:
    """The execution under its row lock, once ``caller`` may use ``control`` on it."""
    writes_allowed()
    execution = Execution.objects.select_for_update().get(pk=execution_id)
    _check_usable(caller, execution, control)
    return execution


def _check_usable(caller: Caller, execution: Execution, control: Control) -> None:
    if control.usable_by(caller, execution):
        return
    if not caller.reads_all and not execution.keys.filter(principal=caller.principal).exists():
        raise Execution.DoesNotExist(execution.id)
    raise NotPermitted(execution, control.name, operators_only=control.operators_only)


def check_control_usable(*, execution_id: str, caller: Caller, control: Control) -> None:
    """Refuse, before a request's body is read, a caller who may not use ``control`` on the
    execution whatever the body says (404 as for an id that does not exist, 403, or 503 on
    a read-only instance): who may act is answered before what is wrong with the body. A
    read without a lock; the service decides again under the row lock."""
    writes_allowed()
    _check_usable(caller, Execution.objects.get(pk=execution_id), control)


@dataclass(frozen=True)
class CancelResult:
    execution: Execution
    immediate: bool  # False: the running step finishes, the run stops at the next boundary


def execution_cancel(*, execution_id: str, caller: Caller, reason: str = "") -> CancelResult:
    """A suspended or not yet started run is canceled at once; a running one at its next step
    boundary (the request is recorded on the run, which the step boundary checks)."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, CANCEL)
        if not CANCEL.allows(execution):
            raise InvalidState(execution, CANCEL.name)
        audit_record(caller, "execution.cancel", execution.id, reason)
        return _stopped(execution, caller, reason)


def execution_reject(
    *, execution_id: str, caller: Caller, plan_hash: str, reason: str = ""
) -> CancelResult:
    """Reject the plan a paused execution waits on, and only that one (operators only): the
    execution is canceled at once. The hash is checked under the row lock (a checkpoint is
    opened or superseded under it too), so a plan that changed since the operator read it is
    never rejected unseen: ``StalePlan``. Audited as the cancel it is (``execution.cancel``,
    ``rejected_plan``), the reason saying which plan was rejected."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, REJECT)
        if not REJECT.allows(execution):
            raise InvalidState(execution, REJECT.name)
        current = _pending_plan_hash(execution)
        if current != plan_hash:
            raise StalePlan(execution, current)
        said = f"rejected the plan {plan_hash}" + (f": {reason}" if reason else "")
        audit_record(caller, "execution.cancel", execution.id, said, rejected_plan=plan_hash)
        return _stopped(execution, caller, said)


def _stopped(execution: Execution, caller: Caller, reason: str) -> CancelResult:
    # A queued execution leaves its lane's queue with the cancel, not at the next handover.
    lane_leave(execution_id=execution.id)
    immediate = execution_stop(execution, actor=caller.principal, reason=reason)
    return CancelResult(execution, immediate=immediate)


def execution_retry(*, execution_id: str, caller: Caller, reason: str = "") -> Execution:
    """A new run (kind retry, no step cache) on a failed or canceled execution, once its
    persisted input still fits the workflow's current schema. A rolled-back execution is an
    audit record: never retried."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, RETRY)
        if not RETRY.allows(execution):
            refusal = (
                NotRetryable if execution.status == ExecutionStatus.ROLLED_BACK else InvalidState
            )
            raise refusal(execution, RETRY.name)
        workflow = workflow_get(execution.workflow)
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
            type=EventType.RETRIED,
            key=event_key(execution.id, f"{run.id}:retried"),
            payload={
                "run": run.id,
                "from_status": previous,
                "by": caller.principal,
                "lane": None if lane is None else {"key": lane.key, "role": lane.role},
            },
        )
        audit_record(caller, "execution.retry", execution.id, reason)
        if lane is None or lane.may_start:
            run_dispatch_on_commit(run.id)
        return execution


class HistoryPruned(InvalidState):
    """Retention deleted the execution's step receipts (``executions.retention``), the
    mutation receipts a rollback undoes among them: refused whole, never undone in part."""

    def __init__(self, execution: Execution, pruned_at: datetime) -> None:
        super().__init__(
            execution,
            message=f"{execution.id} cannot be rolled back: its history was pruned at "
            f"{pruned_at.isoformat(timespec='seconds')} (retention), the receipts "
            "of what it changed with it; undo its changes by hand (its archive, if one was "
            "written, lists them)",
        )
        self.pruned_at = pruned_at


class StalePlan(InvalidState):
    """The approval names a plan hash that is not the one waiting (what the plan read
    changed, or a typo)."""

    def __init__(self, execution: Execution, current: str) -> None:
        super().__init__(
            execution, message=f"the plan waiting for approval on {execution.id} has another hash"
        )
        self.current = current


class ApprovalExpired(InvalidState):
    """The pending plan's approval window closed (``ALFRED_APPROVAL_TTL_SECONDS``): the
    execution fails with ``approval_expired`` as its run wakes."""

    def __init__(self, execution: Execution, expires_at: datetime) -> None:
        super().__init__(
            execution,
            message=f"the plan waiting on {execution.id} expired at {expires_at.isoformat()}",
        )
        self.expires_at = expires_at


class ForceRequired(InvalidState):
    """The pending plan's batch is over the blast-radius thresholds: its approval must say
    ``force``."""

    def __init__(self, execution: Execution) -> None:
        super().__init__(
            execution,
            message=f"the plan waiting on {execution.id} is over the blast-radius thresholds: "
            "approve it with force",
        )


class AlreadyApproved(InvalidState):
    """The caller approved this plan already: another operator's approval is what it needs."""

    def __init__(self, execution: Execution, standing: approvals.Standing) -> None:
        super().__init__(
            execution,
            message=f"you approved the plan waiting on {execution.id} already "
            f"({standing.summary()}): it needs {standing.owed} more from another operator",
        )
        self.standing = standing


class ApproverRefused(NotPermitted):
    """The approval policy does not let this operator approve this plan (``why``)."""

    def __init__(self, execution: Execution, standing: approvals.Standing, why: str) -> None:
        Exception.__init__(self, f"you may not approve the plan waiting on {execution.id}: {why}")
        self.execution_id = execution.id
        self.standing = standing


def _pending_plan_hash(execution: Execution) -> str:
    hook = Hook.objects.filter(execution=execution).awaiting_operator().first()
    return str(hook.payload.get("plan_hash", "")) if hook is not None else ""


def execution_approve(
    *, execution_id: str, caller: Caller, plan_hash: str, force: bool = False, reason: str = ""
) -> Execution:
    """Approve the pending checkpoint of a paused execution, for exactly the plan named by its
    hash (operators only), as the approval policy allows (``executions.approvals``): the
    caller must be on its rule's list and not shut out (the requester, an earlier approver),
    and approves once. The checkpoint is answered when the rule has every approval it asks,
    each bound to the same hash (a new plan is a new checkpoint: its count starts again). The
    workflow reads its state again before acting: a plan that changed since opens a new
    checkpoint, never applies this consent."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, APPROVE)
        hook = (
            Hook.objects.select_for_update().filter(execution=execution).awaiting_operator().first()
        )
        if execution.status != ExecutionStatus.PAUSED or hook is None:
            raise InvalidState(execution, APPROVE.name)
        if hook.expires_at is not None and db_now() >= hook.expires_at:
            raise ApprovalExpired(execution, hook.expires_at)
        current = str(hook.payload.get("plan_hash", ""))
        if plan_hash != current:
            raise StalePlan(execution, current)
        before = approvals.standing(execution, hook, execution_subject(execution))
        if any(g.principal == caller.principal for g in (*before.given, *before.void)):
            raise AlreadyApproved(execution, before)
        refusal = before.refusal(caller)
        if refusal:
            raise ApproverRefused(execution, before, refusal)
        force_required = bool(hook.payload.get("force_required"))
        if force_required and not force:
            raise ForceRequired(execution)
        force = force and force_required
        Approval.objects.create(
            execution=execution,
            hook=hook,
            run_id=hook.run_id,
            plan_hash=plan_hash,
            principal=caller.principal,
            actor_name=caller.name,
            rule=before.rule.name,
            force=force,
            reason=reason,
        )
        count = len(before.given) + 1
        required = before.rule.approvals
        audit_record(
            caller,
            "execution.approve",
            execution.id,
            reason,
            plan_hash=plan_hash,
            force=force,
            policy=before.rule.name,
            approval=f"{count} of {required}",
        )
        event_emit(
            execution_id=execution.id,
            type=EventType.APPROVAL_RECORDED,
            key=event_key(execution.id, f"{hook.id}:approved:{caller.principal}"),
            payload={
                "hook": hook.id,
                "plan_hash": plan_hash,
                "by": caller.principal,
                "approvals": count,
                "required": required,
                "rule": before.rule.name,
            },
        )
        if count < required:
            return execution
        hook_signal_locked(
            hook,
            idempotency_key=f"approve:{plan_hash}",
            payload={
                "plan_hash": plan_hash,
                "force": force,
                "by": caller.principal,
                "approvers": [*(given.principal for given in before.given), caller.principal],
                "rule": before.rule.name,
                "reason": reason,
            },
            principal=caller.principal,
        )
        return execution


def execution_rollback(*, execution_id: str, caller: Caller, reason: str) -> Execution:
    """A run of kind rollback (operators only; docs/architecture.md, "States"): no step cache; it
    undoes the mutation receipts of every earlier run, newest first, each through its compensation,
    and ends ``rolled_back`` — or ``failed`` with the compensation's error (``drifted``: someone
    changed the resource since), after which it can be asked for again. It takes its lane
    back ahead of the queue: what it undoes may be half-changed."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, ROLLBACK)
        if not ROLLBACK.allows(execution):
            if execution.pruned_at is not None and execution.terminal:
                raise HistoryPruned(execution, execution.pruned_at)
            raise InvalidState(execution, "roll back")
        workflow = workflow_get(execution.workflow)
        previous = execution.status
        run = run_again(execution, kind=RunKind.ROLLBACK, stages=ROLLBACK_STAGES)
        lane = execution_lane_claim(execution, workflow.lane(execution.input), urgent=True)
        event_emit(
            execution_id=execution.id,
            type=EventType.ROLLBACK_REQUESTED,
            key=event_key(execution.id, f"{run.id}:rollback"),
            payload={"run": run.id, "from_status": previous, "by": caller.principal},
        )
        audit_record(caller, "execution.rollback", execution.id, reason)
        if lane is None or lane.may_start:
            run_dispatch_on_commit(run.id)
        return execution


def execution_accept_drift(*, execution_id: str, caller: Caller, reason: str) -> Execution:
    """Accept the open drift of a succeeded execution (operators, with a reason): audited,
    an ``execution.drift_ended`` event (``executions.drift``)."""
    with transaction.atomic(durable=True):
        execution = _locked_for(caller, execution_id, ACCEPT_DRIFT)
        if not ACCEPT_DRIFT.allows(execution):
            raise InvalidState(execution, message=f"{execution.id} has no open drift to accept")
        drift_accept(execution, caller, reason)
        return execution


def execution_redo(*, execution_id: str, caller: Caller, reason: str = "") -> Execution:
    """Start a drifted execution's operation again: the new execution, accepted as a request
    of its owner would be (``executions.acceptance``: a drifted execution no longer stands in
    for its operation), under a key of the drift's, so asking twice starts it once. Audited
    on the drifted execution (``execution.redo``) in the new one's transaction. The drift
    ends, superseded, when the new execution succeeds."""
    writes_allowed()
    execution = Execution.objects.get(pk=execution_id)
    _check_usable(caller, execution, REDO)
    if not REDO.allows(execution):
        raise InvalidState(execution, message=f"{execution.id} has no open drift to start again")
    workflow = workflow_get(execution.workflow)
    drift = Drift.objects.get(pk=execution.drift_id)
    acceptance = execution_accept(
        workflow_name=execution.workflow,
        body=workflow.redo_input(execution.input, recorded_outputs(execution), drift.findings),
        idempotency_key=f"redo:{drift.pk}",
        caller=caller,
        owner=execution.principal,
        audit=("execution.redo", execution.id, reason),
        predecessor=execution,
    )
    return acceptance.execution


@dataclass(frozen=True)
class ControlBody:
    """What a caller sends with a control, whichever face it came through."""

    reason: str = ""
    plan_hash: str = ""
    force: bool = False


def control_perform(
    control: Control, *, execution_id: str, caller: Caller, body: ControlBody
) -> Execution:
    """``control``'s service on ``execution_id``: the execution as the control left it (the
    services decide who may act and whether the state allows it, under the row lock)."""
    return _SERVICES[control.name](execution_id, caller, body)


_SERVICES: dict[str, Callable[[str, Caller, ControlBody], Execution]] = {
    "cancel": lambda id_, caller, body: (
        execution_cancel(execution_id=id_, caller=caller, reason=body.reason).execution
    ),
    "retry": lambda id_, caller, body: execution_retry(
        execution_id=id_, caller=caller, reason=body.reason
    ),
    "approve": lambda id_, caller, body: execution_approve(
        execution_id=id_,
        caller=caller,
        plan_hash=body.plan_hash,
        force=body.force,
        reason=body.reason,
    ),
    "reject": lambda id_, caller, body: (
        execution_reject(
            execution_id=id_, caller=caller, plan_hash=body.plan_hash, reason=body.reason
        ).execution
    ),
    "rollback": lambda id_, caller, body: execution_rollback(
        execution_id=id_, caller=caller, reason=body.reason
    ),
    "accept_drift": lambda id_, caller, body: execution_accept_drift(
        execution_id=id_, caller=caller, reason=body.reason
    ),
    "redo": lambda id_, caller, body: execution_redo(
        execution_id=id_, caller=caller, reason=body.reason
    ),
}


__all__ = [
    "ACCEPT_DRIFT",
    "APPROVE",
    "CANCEL",
    "CONTROLS",
    "CONTROLS_BY_NAME",
    "PLAN_HASH_EXPECTED",
    "PLAN_HASH_PATTERN",
    "REDO",
    "REJECT",
    "RETRY",
    "ROLLBACK",
    "AlreadyApproved",
    "ApprovalExpired",
    "ApproverRefused",
    "Control",
    "ControlBody",
    "ForceRequired",
    "HistoryPruned",
    "InvalidInput",
    "InvalidState",
    "LaneConflict",
    "NotPermitted",
    "NotRetryable",
    "ReadOnlyInstance",
    "StalePlan",
    "cancel_allowed",
    "check_control_usable",
    "control_perform",
    "drift_open",
    "execution_accept_drift",
    "execution_approve",
    "execution_cancel",
    "execution_controls",
    "execution_redo",
    "execution_reject",
    "execution_retry",
    "execution_rollback",
    "retry_allowed",
]

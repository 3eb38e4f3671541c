"""``execution_accept``: the one transaction that makes a request durable (docs/architecture.md,
"Life of an execution"; docs/contract.md).

Validation and canonicalization happen first, outside any transaction. Then, in ONE durable
transaction: resolve the Idempotency-Key, resolve the logical identity, insert the Execution,
its DeliveryKey, its first Run and Stages, take or queue the lane, and write the
``execution.accepted`` event (sequence 1). Only after commit is the run published.

Concurrent duplicates serialize on unique constraints, not on application locks: two requests
with one key both try to insert the DeliveryKey, PostgreSQL makes the second wait for the first
to commit and then raises; the loser retries the whole transaction and now finds the key.
The same holds for two keys naming one operation (``uniq_active_execution_identity``).

Ownership (docs/contract.md, "Authentication, roles and ownership"):
an identity match owned by another principal is never reused or continued for an integration. It is
refused with 409 ``identity_conflict``, which names neither the execution nor its owner, and the
refusal is audited (in its own transaction, after the acceptance rolled back). An operator's request
may reuse or continue anyone's execution; that is audited too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction

from alfred.db import (
    Rows,
    Statement,
    columns,
    insert_statement,
    instance,
    instances,
    statements_run,
)
from alfred.ids import new_id
from alfred.metrics import ACCEPTANCES
from alfred.principals import Caller
from alfred.readonly import writes_allowed
from executions.audit import audit_record
from executions.catalog import FieldError, InvalidInput, LaneClaim, Workflow, workflow_get
from executions.events import EventType
from executions.identity import NotCanonicalizable, fingerprint, logical_identity
from executions.lanes.holding import execution_lane_claim
from executions.models import (
    AcceptanceOutcome,
    DeliveryKey,
    Execution,
    ExecutionStatus,
    Run,
    RunKind,
    Stage,
    StageStatus,
)
from executions.outbox import event_emit, event_key
from executions.runtime.dispatch import Dispatch, run_dispatch_on_commit
from executions.runtime.records import execution_insert, run_again
from executions.runtime.registry import definition_get
from executions.selectors import execution_lane_successor
from lanes.services import LaneClaimResult, LaneConflict, lane_claim

log = logging.getLogger(__name__)

# Constraints a concurrent twin can make us trip; anything else is a real error.
_RACE_CONSTRAINTS = frozenset({"uniq_delivery_key", "uniq_active_execution_identity"})
MAX_ATTEMPTS = 5


class UnknownWorkflow(Exception):
    pass


class IdentityHeld(Exception):
    """The same operation belongs to another principal's execution."""

    def __init__(self, execution_id: str, outcome: str) -> None:
        super().__init__(f"the operation is held by {execution_id}, owned by another principal")
        self.execution_id = execution_id
        self.outcome = outcome


class IdempotencyConflict(Exception):
    def __init__(self, execution_id: str) -> None:
        super().__init__(f"key already used for {execution_id} with a different body")
        self.execution_id = execution_id


@dataclass(frozen=True)
class Acceptance:
    execution: Execution
    outcome: str
    replayed: bool
    idempotency_key: str
    lane: LaneClaimResult | None = None
    dispatch: Dispatch | None = None
    # A new execution's stages as inserted (None otherwise): its answer shows them, and
    # knows it has no checkpoint and no child yet, without reading anything back.
    stages: list[Stage] | None = None


@dataclass(frozen=True)
class _Request:
    workflow: Workflow
    canonical: dict[str, Any]
    fingerprint: str
    identity: str
    claim: LaneClaim | None
    key: str
    caller: Caller
    # Whose execution a new one is, when not the caller's: an operator starting a drifted
    # execution's operation again does it for its owner (``executions.controls``, redo).
    owner: str | None = None
    # The audit entry (action, execution, reason) a new execution is recorded with, in its
    # transaction.
    audit: tuple[str, str, str] | None = None
    # What a new execution repeats when its own operation has none yet (redo with an input
    # of its own: the drifted execution).
    predecessor: Execution | None = None

    @property
    def principal(self) -> str:
        return self.owner or self.caller.principal


# How each refusal is counted in alfred_acceptances_total (its problem's code).
_REFUSALS: dict[type[Exception], str] = {
    UnknownWorkflow: "unknown_workflow",
    InvalidInput: "invalid_input",
    IdempotencyConflict: "idempotency_conflict",
    IdentityHeld: "identity_conflict",
    LaneConflict: "lane_conflict",
}


def execution_accept(
    *,
    workflow_name: str,
    body: Any,
    idempotency_key: str,
    caller: Caller,
    owner: str | None = None,
    audit: tuple[str, str, str] | None = None,
    predecessor: Execution | None = None,
) -> Acceptance:
    """Accept ``body`` for ``workflow_name`` under ``idempotency_key`` of ``caller`` (or of
    ``owner``, for whom an operator asks; ``audit``: the entry a new execution is recorded
    with).

    Raises ``UnknownWorkflow``, ``InvalidInput``, ``IdempotencyConflict``, ``IdentityHeld``,
    ``LaneConflict``. A conflict rolls back everything, the key included: the same key may
    be sent again.
    """
    try:
        acceptance = _execution_accept(
            workflow_name, body, idempotency_key, caller, owner, audit, predecessor
        )
    except tuple(_REFUSALS) as refused:
        workflow = workflow_name if not isinstance(refused, UnknownWorkflow) else "unknown"
        code = next(code for kind, code in _REFUSALS.items() if isinstance(refused, kind))
        ACCEPTANCES.labels(workflow, code).inc()
        raise
    outcome = "replayed" if acceptance.replayed else str(acceptance.outcome)
    ACCEPTANCES.labels(workflow_name, outcome).inc()
    return acceptance


def _execution_accept(
    workflow_name: str,
    body: Any,
    idempotency_key: str,
    caller: Caller,
    owner: str | None,
    audit: tuple[str, str, str] | None,
    predecessor: Execution | None,
) -> Acceptance:
    writes_allowed()
    try:
        workflow = workflow_get(workflow_name)
    except KeyError:
        raise UnknownWorkflow(workflow_name) from None
    workflow.validate(body)
    canonical = workflow.canonicalize(body)
    try:
        body_fingerprint = fingerprint(workflow.name, body)
        identity = logical_identity(workflow.name, canonical)
    except NotCanonicalizable as exc:
        raise InvalidInput([FieldError("", f"not representable in canonical JSON: {exc}")]) from exc
    request = _Request(
        workflow=workflow,
        canonical=canonical,
        fingerprint=body_fingerprint,
        identity=identity,
        claim=workflow.lane(canonical),
        key=idempotency_key,
        caller=caller,
        owner=owner,
        audit=audit,
        predecessor=predecessor,
    )
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            acceptance = _accept_once(request)
        except IdentityHeld as exc:
            _audit_refusal(caller, workflow.name, idempotency_key, exc)
            raise
        except IntegrityError as exc:
            constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
            if constraint not in _RACE_CONSTRAINTS or attempt == MAX_ATTEMPTS:
                raise
            log.info("acceptance lost a race on %s; retrying (attempt %d)", constraint, attempt)
            continue
        if acceptance.dispatch is not None and acceptance.dispatch.failed:
            # the publish after commit failed and recorded start_failed: answer what is stored
            acceptance.execution.refresh_from_db(fields=["start_state", "start_error"])
        return acceptance
    raise AssertionError("unreachable")


def _audit_refusal(caller: Caller, workflow: str, key: str, refused: IdentityHeld) -> None:
    """The refusal's audit entry, in a transaction of its own (the acceptance rolled back).
    If it cannot be written the refusal still stands: the caller gets its 409, not a 500."""
    try:
        with transaction.atomic():
            audit_record(
                caller,
                "execution.identity_refused",
                refused.execution_id,
                f"{workflow}: the same operation is owned by another principal",
                would_be=refused.outcome,
                idempotency_key=key,
            )
    except DatabaseError:
        log.exception("the audit entry of an identity refusal was not written")


def _accept_once(req: _Request) -> Acceptance:
    with transaction.atomic(durable=True):
        known, latest = statements_run([_key_known(req), _latest_locked(req)])
        if known is not None:
            if known.fingerprint != req.fingerprint:
                raise IdempotencyConflict(known.execution_id)
            return Acceptance(known.execution, known.outcome, True, req.key)

        stages: list[Stage] | None = None
        if (
            latest is None
            or latest.status == ExecutionStatus.ROLLED_BACK
            or _effect_replaced(req.workflow, latest)
        ):
            execution, lane, stages = _create(req, predecessor=latest or req.predecessor)
            outcome = AcceptanceOutcome.CREATED
            if req.audit is not None:
                action, target, reason = req.audit
                audit_record(req.caller, action, target, reason, started=execution.id)
        else:
            continues = _should_continue(req.workflow, latest)
            outcome = AcceptanceOutcome.CONTINUED if continues else AcceptanceOutcome.REUSED
            if not req.caller.may_act_on(latest.principal):
                raise IdentityHeld(latest.id, outcome)
            if not req.caller.owns(latest.principal):
                audit_record(
                    req.caller,
                    f"execution.{outcome}",
                    latest.id,
                    "an operator's request matched another principal's execution",
                    idempotency_key=req.key,
                )
            if continues:
                execution, lane = _continue(req, latest)
            else:
                execution, lane = latest, None
            statements_run([insert_statement([_key_row(req, execution.id, outcome)])])
        dispatch = None
        if outcome != AcceptanceOutcome.REUSED and (lane is None or lane.may_start):
            fresh = outcome == AcceptanceOutcome.CREATED
            dispatch = run_dispatch_on_commit(
                str(execution.current_run_id),
                stages=req.workflow.stages if fresh else None,
                workflow=req.workflow.name,
            )
        return Acceptance(execution, outcome, False, req.key, lane, dispatch, stages)


def _key_row(req: _Request, execution_id: str, outcome: str) -> DeliveryKey:
    return DeliveryKey(
        principal=req.principal,
        key=req.key,
        fingerprint=req.fingerprint,
        execution_id=execution_id,
        outcome=outcome,
    )


def _asked_by(req: _Request, execution_id: str) -> list[DeliveryKey]:
    """The caller's own key on an execution it asked for on its owner's behalf: it is one of
    those who asked for it (the approval policy's requesters), so it approves none of its
    plans."""
    if req.owner is None or req.owner == req.caller.principal:
        return []
    mine = _key_row(req, execution_id, AcceptanceOutcome.CREATED)
    mine.principal = req.caller.principal
    return [mine]


def _key_known(req: _Request) -> Statement:
    """The key's row with its execution and that one's current run, as the replay answers
    them (None when the key is new)."""

    def read(rows: Rows) -> DeliveryKey | None:
        if not rows:
            return None
        (known, execution, run), _ = instances(rows[0], DeliveryKey, Execution, Run)
        execution.current_run = run
        known.execution = execution
        return known

    return Statement(_key_known_sql(), [req.principal, req.key], read)


@cache
def _key_known_sql() -> str:
    keys, executions, runs = (m._meta.db_table for m in (DeliveryKey, Execution, Run))
    return (
        f"SELECT {columns(DeliveryKey, 'k')}, {columns(Execution, 'e')}, {columns(Run, 'r')} "  # noqa: S608
        f"FROM {keys} k JOIN {executions} e ON e.id = k.execution_id "
        f"LEFT JOIN {runs} r ON r.id = e.current_run_id "
        "WHERE k.principal = %s AND k.key = %s"
    )


def _latest_locked(req: _Request) -> Statement:
    """The newest execution of this operation, locked; sent with :func:`_key_known`, in the
    same round trip (and BEGIN with them). A replay needs no lock: while the key is known
    this finds nothing and locks nothing. Should the key be committed by a twin between the
    two statements, this finds nothing either, and the insert of the key loses to the twin's
    (``uniq_delivery_key``): the acceptance is tried again and finds the key."""

    def read(rows: Rows) -> Execution | None:
        return instance(Execution, rows[0]) if rows else None

    return Statement(_latest_sql(), [req.workflow.name, req.identity, req.principal, req.key], read)


@cache
def _latest_sql() -> str:
    return (
        f"SELECT {columns(Execution, 'e')} FROM {Execution._meta.db_table} e "  # noqa: S608
        "WHERE e.workflow = %s AND e.logical_identity = %s AND NOT EXISTS ("
        f"SELECT 1 FROM {DeliveryKey._meta.db_table} k WHERE k.principal = %s AND k.key = %s) "
        "ORDER BY e.created_at DESC LIMIT 1 FOR UPDATE OF e"
    )


def _should_continue(workflow: Workflow, latest: Execution) -> bool:
    if latest.status in (ExecutionStatus.FAILED, ExecutionStatus.CANCELED):
        return workflow.supports_continuation
    if latest.status == ExecutionStatus.SUCCEEDED:
        return workflow.continue_after_success(latest.input, stage_outputs(latest))
    return False


def _effect_replaced(workflow: Workflow, latest: Execution) -> bool:
    """Whether a succeeded execution may no longer stand in for a new request of the same
    operation: the drift watch found what it did changed (an open drift, ``executions.drift``),
    or a later execution on its lane, claimed with another token, replaced its effect (one
    that deploys a version: another version was deployed there since; docs/workflows.md,
    "Asked for again after success"). The new request then gets a new execution whose
    predecessor is the one it repeats, so the answer's ``succeeded`` is about now."""
    if latest.status == ExecutionStatus.SUCCEEDED and latest.drift_id is not None:
        return True
    if (
        latest.status != ExecutionStatus.SUCCEEDED
        or latest.dry_run
        or latest.lane_key is None
        or not workflow.replaced_by_another_token
    ):
        return False
    later = execution_lane_successor(latest)
    return later is not None and later.lane_token != latest.lane_token


def stage_outputs(execution: Execution) -> Mapping[str, Any]:
    """Each stage's latest succeeded output over the runs whose outputs the workflow's current
    definition reads as its own (``Definition.reads_outputs_of``: the same version and stages,
    or a version it declares compatible). A continuation skips stages whose output an earlier
    run persisted, so the current run alone may not hold it; but an output that another
    version's code wrote is no input for this version's stages: a deploy that changed the
    plan's shape would have the new apply act on the old plan (issue 37, item 4)."""
    current = definition_get(execution.workflow)
    rows = (
        Stage.objects.filter(run__execution=execution, status=StageStatus.SUCCEEDED)
        .order_by("run__number")
        .values_list("name", "output", "run__definition")
    )
    return {name: output for name, output, ran in rows if current.reads_outputs_of(ran)}


def _claim(req: _Request, execution_id: str, *, urgent: bool = False) -> LaneClaimResult | None:
    if req.claim is None:
        return None
    return lane_claim(
        key=req.claim.key, execution_id=execution_id, token=req.claim.token, urgent=urgent
    )


def _create(
    req: _Request, *, predecessor: Execution | None
) -> tuple[Execution, LaneClaimResult | None, list[Stage]]:
    """A new execution, with its idempotency key in the same round trip as its rows."""
    execution_id = new_id("exe")
    # The lane first, so that the accepted event can say how it went; the lane's owner FK
    # is checked at commit, when the execution exists.
    lane = _claim(req, execution_id)
    execution, stages = execution_insert(
        execution_id=execution_id,
        workflow=req.workflow.name,
        stages=req.workflow.stages,
        canonical=req.canonical,
        identity=req.identity,
        principal=req.principal,
        lane_key=req.claim.key if req.claim else None,
        lane_token=req.claim.token if req.claim else None,
        predecessor=predecessor,
        accepted_payload={"lane": _lane_payload(lane)},
        also=[
            _key_row(req, execution_id, AcceptanceOutcome.CREATED),
            *_asked_by(req, execution_id),
        ],
    )
    _lane_event(execution, lane)
    return execution, lane, stages


def _continue(req: _Request, execution: Execution) -> tuple[Execution, LaneClaimResult | None]:
    """A continuation run on a failed/canceled (or unfinished succeeded) execution. It goes
    ahead of ordinary queued work: the infrastructure may be half-changed."""
    previous_status = execution.status
    # Stages whose output an earlier run persisted are skipped; the last stage (verify)
    # always runs again: success needs a post-condition observed now.
    skips = req.workflow.continuation_skips
    done = {
        k: v
        for k, v in stage_outputs(execution).items()
        if k != req.workflow.stages[-1] and (skips is None or k in skips)
    }
    run = run_again(
        execution,
        kind=RunKind.CONTINUATION,
        stages=req.workflow.stages,
        done=done,
    )
    lane = execution_lane_claim(execution, req.claim, urgent=True)
    _lane_event(execution, lane)
    event_emit(
        execution_id=execution.id,
        type=EventType.CONTINUED,
        key=event_key(execution.id, f"{run.id}:continued"),
        payload={"run": run.id, "from_status": previous_status, "lane": _lane_payload(lane)},
    )
    return execution, lane


def _lane_event(execution: Execution, lane: LaneClaimResult | None) -> None:
    if lane is None:
        return
    kind = "acquired" if lane.role == "owner" else "queued"
    event_emit(
        execution_id=execution.id,
        type=EventType(f"lane.{kind}"),
        key=event_key(execution.id, f"{execution.current_run_id}:lane:{kind}"),
        payload={**_lane_place(lane), "lane": lane.key},
    )


def _lane_payload(lane: LaneClaimResult | None) -> dict[str, Any] | None:
    return None if lane is None else _lane_place(lane)


def _lane_place(lane: LaneClaimResult) -> dict[str, Any]:
    """Where the execution stands on its lane (``executions.events.LanePlace``)."""
    return {"key": lane.key, "role": lane.role, "position": lane.position}


__all__ = [
    "Acceptance",
    "IdempotencyConflict",
    "InvalidInput",
    "LaneConflict",
    "UnknownWorkflow",
    "execution_accept",
]

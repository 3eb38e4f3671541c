"""A rollback run (docs/architecture.md, "States"): one stage, ``rollback``, with no step cache of
its own from earlier runs. It loads the mutation receipts of every earlier run of the execution that
is not itself a rollback, newest first (by run, then by position in the run), and undoes each
through the compensation its ``resource``/``action`` registered (``registry``): the engine
imports no workflow and no provider.

Each compensation is stage code run under a key space of its own (``undo:<receipt id>:``), so
its reads, its batch and its waits are receipts of this run like any step: a crash replays
them, a wait frees the worker. When one is done, ``undone:<receipt id>`` is recorded; a later
rollback run (after one that failed, e.g. ``drifted``) skips what earlier ones undid. A
compensation that fails fails the run, and the execution is ``failed`` with its error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from executions.events import EventType
from executions.models import (
    ACTIVE_STATUSES,
    Execution,
    ExecutionStatus,
    ReceiptStatus,
    RunKind,
    StepReceipt,
)
from executions.outbox import event_emit, event_key
from executions.runtime.dispatch import run_dispatch_on_commit
from executions.runtime.errors import FatalError
from executions.runtime.records import run_again
from executions.runtime.registry import compensation_get
from executions.runtime.stage import StageContext

STAGE = "rollback"
STAGES = (STAGE,)
CHILD = "execution.child"  # the resource a rolled-back child is noted under
CHILD_SETTLE_POLL_SECONDS = 1.0
CHILD_SETTLE_TIMEOUT_SECONDS = 3600.0


class _Scoped:
    """``ctx`` with every key under ``prefix``: one compensation's receipts apart from the
    others' in the one rollback stage."""

    def __init__(self, ctx: StageContext, prefix: str) -> None:
        self._ctx = ctx
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def step(self, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._ctx.step(self._prefix + key, fn, *args, **kwargs)

    def wait_until(self, key: str, probe: Any, **kwargs: Any) -> Any:
        return self._ctx.wait_until(self._prefix + key, probe, **kwargs)

    def sleep(self, key: str, seconds: float) -> None:
        self._ctx.sleep(self._prefix + key, seconds)

    def wait_for_hook(self, name: str, **kwargs: Any) -> Any:
        return self._ctx.wait_for_hook(self._prefix + name, **kwargs)

    def rollback_child(self, key: str, child_id: str) -> Any:
        return self._ctx.rollback_child(self._prefix + key, child_id)


def receipts_to_undo(execution_id: str, before_run: int | None = None) -> list[StepReceipt]:
    """The mutation receipts a rollback undoes and the children it rolls back (their
    ``child`` receipts, whatever their state), in the order it undoes them: newest run
    first, and within a run the reverse of the order they were recorded in. ``before_run``
    None: every run there is (a rollback asked for now comes after them all)."""
    receipts = StepReceipt.objects.filter(run__execution_id=execution_id)
    if before_run is not None:
        receipts = receipts.filter(run__number__lt=before_run)
    return list(
        receipts.filter(Q(mutation__isnull=False, status=ReceiptStatus.SUCCEEDED) | Q(kind="child"))
        .exclude(run__kind=RunKind.ROLLBACK)
        .select_related("run")
        .order_by("-run__number", "-id")
    )


def _undone_before(execution_id: str, before_run: int | None) -> set[str]:
    keys = StepReceipt.objects.filter(
        run__execution_id=execution_id,
        run__kind=RunKind.ROLLBACK,
        stage=STAGE,
        step_key__startswith="undone:",
        status=ReceiptStatus.SUCCEEDED,
    )
    if before_run is not None:
        keys = keys.filter(run__number__lt=before_run)
    return {key.removeprefix("undone:") for key in keys.values_list("step_key", flat=True)}


@dataclass(frozen=True)
class Undo:
    """One thing a rollback run does: a mutation's compensation (``resource``/``action`` of
    its receipt), or the rollback of a child (``child``; resource ``execution.child``)."""

    receipt: StepReceipt
    resource: str
    action: str
    mutation: dict[str, Any] = field(default_factory=dict)
    child: str | None = None


def rollback_plan(execution_id: str, before_run: int | None = None) -> list[Undo]:
    """What a rollback run of ``execution_id`` numbered ``before_run`` does, in the order it
    does it (``None``: a rollback asked for now). The run itself follows this list and
    nothing else, so the admin's confirmation page, which shows it, cannot say otherwise:
    what an earlier rollback run already undid is left out, and so is a child that is not
    this execution's own (adopted) or that an earlier receipt already rolls back."""
    undone = _undone_before(execution_id, before_run)
    plan: list[Undo] = []
    children: set[str] = set()
    for receipt in receipts_to_undo(execution_id, before_run):
        if str(receipt.pk) in undone:
            continue
        if receipt.kind == "child":
            child = receipt.output if isinstance(receipt.output, dict) else {}
            child_id = child.get("id")
            if not child_id or child.get("adopted") or child_id in children:
                continue
            children.add(str(child_id))
            plan.append(Undo(receipt, CHILD, "rollback", child=str(child_id)))
        else:
            mutation = receipt.mutation if isinstance(receipt.mutation, dict) else {}
            resource, action = str(mutation.get("resource")), str(mutation.get("action"))
            plan.append(Undo(receipt, resource, action, mutation=mutation))
    return plan


@dataclass(frozen=True)
class PlannedUndo:
    """An entry of :func:`rollback_plan`, and for a child the plan of the child's own
    rollback run (empty when it is rolled back already: that run is never asked for)."""

    undo: Undo
    child_status: str = ""
    then: tuple[PlannedUndo, ...] = ()


def rollback_plan_tree(execution_id: str) -> list[PlannedUndo]:
    """:func:`rollback_plan` of a rollback asked for now, each child's with it: what the run
    and its children's rollback runs will do, in order, as the rollback page shows it."""
    plan = rollback_plan(execution_id)
    ids = [undo.child for undo in plan if undo.child]
    statuses = dict(Execution.objects.filter(pk__in=ids).values_list("pk", "status"))
    tree = []
    for undo in plan:
        if undo.child is None:
            tree.append(PlannedUndo(undo))
            continue
        status = str(statuses.get(undo.child, ""))
        then = () if status == ExecutionStatus.ROLLED_BACK else rollback_plan_tree(undo.child)
        tree.append(PlannedUndo(undo, status, tuple(then)))
    return tree


def rollback_stage(ctx: StageContext, run_number: int) -> dict[str, Any]:
    restored = []
    for undo in rollback_plan(ctx.execution_id, run_number):
        receipt = undo.receipt.pk
        scoped = _Scoped(ctx, f"undo:{receipt}:")
        if undo.child is not None:
            result = _child_rollback(scoped, undo.child)
        else:
            result = compensation_get(undo.resource, undo.action)(scoped, undo.mutation)
        ctx.step(f"undone:{receipt}", _note, receipt, undo.resource, result)
        restored.append({"receipt": receipt, "resource": undo.resource})
    return {"undone": restored}


def _child_rollback(ctx: StageContext, child_id: str) -> dict[str, Any]:
    ctx.wait_until(
        "settled",
        lambda: _settled(child_id),
        every=CHILD_SETTLE_POLL_SECONDS,
        timeout=CHILD_SETTLE_TIMEOUT_SECONDS,
    )
    ended = ctx.rollback_child("rollback", child_id)
    if ended["status"] != ExecutionStatus.ROLLED_BACK:
        error = ended.get("error") or {}
        raise FatalError(
            f"child {child_id} was not rolled back ({ended['status']}): "
            f"{error.get('message') or 'no error recorded'}",
            code=str(error.get("code") or "child_rollback_failed"),
            child=child_id,
            child_error=error or None,
        )
    return {"child": child_id, "status": ended["status"]}


def _settled(child_id: str) -> dict[str, Any] | None:
    """A probe: the child once it is terminal (a child canceled with its parent may still be
    stopping at its next step boundary)."""
    status = Execution.objects.filter(pk=child_id).values_list("status", flat=True).first()
    if status is None:
        raise FatalError(f"child {child_id} does not exist", code="child_missing")
    return None if status in ACTIVE_STATUSES else {"status": status}


def _note(receipt: int, resource: str, result: Any) -> dict[str, Any]:
    return {"receipt": receipt, "resource": resource, "result": result}


def child_rollback_start(parent_id: str, child_id: str) -> dict[str, Any]:
    """Ask for a rollback run of ``child_id`` (a terminal child of ``parent_id``), in the
    caller's transaction, dispatched after commit: the child undoes its own receipts under
    its root's lane. A child already rolled back needs none (``run`` None).

    The child's row is locked after the parent's run (the receipt's renewal): out of the
    usual order, which is safe because the child is terminal (settled), so no transition of
    its own — the only writer that locks a child and then its parent's run — races it."""
    child = Execution.objects.select_for_update().get(pk=child_id, parent_id=parent_id)
    if child.status == ExecutionStatus.ROLLED_BACK:
        return {"id": child_id, "run": None}
    if child.status in ACTIVE_STATUSES:
        raise FatalError(
            f"child {child_id} is still {child.status}: it cannot be rolled back yet",
            code="child_active",
            child=child_id,
        )
    previous = child.status
    run = run_again(child, kind=RunKind.ROLLBACK, stages=STAGES)
    event_emit(
        execution_id=child.id,
        type=EventType.ROLLBACK_REQUESTED,
        key=event_key(child.id, f"{run.id}:rollback"),
        payload={"run": run.id, "from_status": previous, "by": f"execution:{parent_id}"},
    )
    run_dispatch_on_commit(run.id)
    return {"id": child_id, "run": run.id}


def child_rollback_state(child_id: str, run_id: str | None) -> dict[str, Any] | None:
    """None while the child's rollback run is going; else how the child ended."""
    child = (
        Execution.objects.filter(pk=child_id).values("status", "error", "current_run_id").first()
    )
    if child is None:
        raise FatalError(f"child {child_id} does not exist", code="child_missing")
    if child["status"] in ACTIVE_STATUSES:
        return None
    if run_id is not None and child["current_run_id"] != run_id:
        return {"id": child_id, "status": "superseded", "error": None}
    return {"id": child_id, "status": child["status"], "error": child["error"]}

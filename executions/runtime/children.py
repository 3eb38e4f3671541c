"""Child executions (``ctx.child``): created in the transaction of the parent's receipt,
taking no lane slot — they run under their root's ownership — and published after commit."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from executions.identity import logical_identity
from executions.models import ACTIVE_STATUSES, Execution, ExecutionStatus
from executions.runtime.dispatch import run_dispatch_on_commit
from executions.runtime.errors import FatalError
from executions.runtime.records import execution_insert
from executions.runtime.registry import definition_get


def child_create(parent_id: str, workflow: str, input: dict[str, Any]) -> tuple[str, bool]:
    """The child's id, and whether it was adopted: if the same operation is already active
    elsewhere (one active execution per identity), the parent waits on that one instead of
    starting a twin. An adopted execution does not wake this parent when it ends: the
    parent polls it. A child of this parent that already succeeded (started by an earlier
    run) is this run's child again."""
    definition = definition_get(workflow)
    canonical = definition.canonicalize(input)
    identity = logical_identity(workflow, canonical)
    # A later run of the parent (a retry) finds the child an earlier run started, if it
    # succeeded: the same operation is not done twice (a second of what the child made).
    earlier = (
        Execution.objects.filter(
            parent_id=parent_id,
            workflow=workflow,
            logical_identity=identity,
            status=ExecutionStatus.SUCCEEDED,
        )
        .order_by("-created_at")
        .values_list("id", flat=True)
        .first()
    )
    if earlier is not None:
        return str(earlier), False
    # A child belongs to whoever owns its parent: they may read, cancel and retry it.
    owner = Execution.objects.values_list("principal", flat=True).get(pk=parent_id)
    try:
        with transaction.atomic():
            child, _ = execution_insert(
                workflow=workflow,
                stages=definition.stages,
                canonical=canonical,
                identity=identity,
                principal=owner,
                parent_id=parent_id,
            )
    except IntegrityError:
        active = (
            Execution.objects.filter(
                workflow=workflow, logical_identity=identity, status__in=sorted(ACTIVE_STATUSES)
            )
            .values_list("id", flat=True)
            .first()
        )
        if active is None:
            raise
        if active == parent_id:
            raise FatalError(
                f"{workflow} would wait on its own parent {parent_id}", code="child_cycle"
            ) from None
        return str(active), True
    assert child.current_run_id is not None  # noqa: S101 - set by execution_insert
    run_dispatch_on_commit(child.current_run_id)
    return child.id, False


def child_state(child_id: str) -> dict[str, Any] | None:
    """None while the child is active; else its terminal state."""
    child = Execution.objects.filter(pk=child_id).values("status", "result", "error").first()
    if child is None or child["status"] in ACTIVE_STATUSES:
        return None
    return {"id": child_id, **child}

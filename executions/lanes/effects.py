"""The executions side of the lanes' port (``lanes.effects``), installed by
``ExecutionsConfig.ready``: what a lane change means for the executions the lane names.

The lanes services write the lane and return what changed; this turns the change into the
outbox events of the executions concerned and starts the new owner's run — in the caller's
transaction, the one that changed the lane (docs/architecture.md, "Events": an event travels with
its change; the run is published only once that commits). The execution rows are locked already: the
lane writer took them through :meth:`ExecutionLaneEffects.executions_lock` before the lane
row (the lock order), so each event's sequence is allocated under a lock already held.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import assert_never

from django.contrib.admin.utils import quote
from django.urls import reverse

from executions.events import EventType
from executions.models import ACTIVE_STATUSES, AuditEntry, Execution, ExecutionStatus
from executions.outbox import event_emit, event_key
from executions.runtime.dispatch import run_dispatch_on_commit
from lanes.effects import (
    ExecutionStanding,
    LaneBlocked,
    LaneChange,
    LaneHandedOver,
    LaneRecovered,
)


class ExecutionLaneEffects:
    active_statuses: frozenset[str] = ACTIVE_STATUSES

    def execution_admin_url(self, execution_id: str) -> str:
        return reverse("admin:executions_execution_change", args=[quote(execution_id)])

    def executions_lock(self, ids: Collection[str], *, skip_locked: bool) -> list[str]:
        # In id order: two lane writers naming the same executions lock them in one order.
        return list(
            Execution.objects.select_for_update(skip_locked=skip_locked)
            .filter(pk__in=sorted(ids))
            .order_by("pk")
            .values_list("pk", flat=True)
        )

    def execution_standing(self, execution_id: str) -> ExecutionStanding | None:
        status = Execution.objects.filter(pk=execution_id).values_list("status", flat=True).first()
        if status is None:
            return None
        return ExecutionStanding(
            id=execution_id,
            status=status,
            active=status in ACTIVE_STATUSES,
            started=status != ExecutionStatus.QUEUED,
        )

    def lane_changed(self, change: LaneChange) -> None:
        match change:
            case LaneHandedOver():
                _handed_over(change)
            case LaneBlocked():
                _blocked(change)
            case LaneRecovered():
                _recovered(change)
            case _:
                assert_never(change)


def _start(execution_id: str) -> None:
    """Publish the execution's current run once the lane change commits."""
    run_id = (
        Execution.objects.filter(pk=execution_id).values_list("current_run_id", flat=True).first()
    )
    if run_id:
        run_dispatch_on_commit(run_id)


def _handed_over(change: LaneHandedOver) -> None:
    lane = change.key
    if change.previous:
        event_emit(
            execution_id=change.previous,
            type=EventType.LANE_RELEASED,
            key=event_key(change.previous, f"lane:{lane}:{change.version}:released"),
            payload={"lane": lane, "reason": change.reason, "next": change.owner},
        )
    if change.owner is not None:
        event_emit(
            execution_id=change.owner,
            type=EventType.LANE_ACQUIRED,
            key=event_key(change.owner, f"lane:{lane}:{change.version}:acquired"),
            payload={"lane": lane, "key": lane, "role": "owner", "after": change.previous},
        )
        _start(change.owner)


def _blocked(change: LaneBlocked) -> None:
    if change.owner:
        event_emit(
            execution_id=change.owner,
            type=EventType.LANE_RECOVERY_REQUIRED,
            key=event_key(change.owner, f"lane:{change.key}:{change.version}:recovery"),
            payload={"lane": change.key, "reason": change.reason},
        )


def _recovered(change: LaneRecovered) -> None:
    if change.resumed is not None:
        _start(change.resumed)
    if change.handed_over is not None:
        _handed_over(change.handed_over)
    AuditEntry.objects.create(
        actor=change.actor,
        action="lane.recover",
        target_type="lane",
        target_id=change.key,
        reason=change.reason,
        data={"owner": change.expected_owner, "next": change.owner},
    )

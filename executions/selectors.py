"""Reads of the execution resource (services own writes, selectors own reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from executions.models import Execution, OutboxEvent, Stage
from executions.workflows.registry import all_workflows
from lanes.models import Lane
from lanes.selectors import lane_position


def execution_list(
    *, workflow: str | None = None, status: str | None = None
) -> QuerySet[Execution]:
    qs = Execution.objects.all()
    if workflow:
        qs = qs.filter(workflow=workflow)
    if status:
        qs = qs.filter(status=status)
    return qs


def execution_get(execution_id: str) -> Execution:
    return Execution.objects.select_related("current_run").get(pk=execution_id)


@dataclass(frozen=True)
class LaneView:
    key: str
    role: str | None  # owner | queued | None (not holding nor waiting)
    state: str | None
    position: int | None


def execution_lane(execution: Execution) -> LaneView | None:
    if not execution.lane_key:
        return None
    lane = Lane.objects.filter(key=execution.lane_key).only("state", "owner_id").first()
    if lane is not None and lane.owner_id == execution.id:
        return LaneView(execution.lane_key, "owner", lane.state, None)
    position = lane_position(execution.id)
    role = "queued" if position is not None else None
    return LaneView(execution.lane_key, role, lane.state if lane else None, position)


def execution_stages(execution: Execution) -> list[Stage]:
    if execution.current_run_id is None:
        return []
    return list(Stage.objects.filter(run_id=execution.current_run_id).order_by("position"))


def execution_events(execution_id: str, *, after: int, limit: int) -> list[OutboxEvent]:
    """Events with ``sequence > after``, in order, at most ``limit``."""
    return list(
        OutboxEvent.objects.filter(execution_id=execution_id, sequence__gt=after).order_by(
            "sequence"
        )[:limit]
    )


def workflow_names() -> list[str]:
    return [workflow.name for workflow in all_workflows()]


def workflow_list() -> list[dict[str, Any]]:
    return [workflow.describe() for workflow in all_workflows()]

"""Reads of the execution resource (services own writes, selectors own reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from alfred.principals import Caller
from executions.models import DeliveryKey, Execution, OutboxEvent, Stage
from executions.workflows.registry import all_workflows
from lanes.models import Lane
from lanes.selectors import lane_position


def executions_visible(caller: Caller) -> QuerySet[Execution]:
    """What ``caller`` may read: operators and viewers everything; an integration what it
    owns and what it holds a delivery key for (an operator may have continued an
    integration's execution under the operator's key; the integration still reads it).

    Trade-off, written down in docs/contract.md: an integration cannot list the work of
    another integration even on a lane they share; it sees the lane's queue by execution id
    only (``GET /lanes/{key}``) and reads none of those executions."""
    if caller.reads_all:
        return Execution.objects.all()
    keyed = DeliveryKey.objects.filter(execution=OuterRef("pk"), principal=caller.principal)
    return Execution.objects.filter(Q(principal=caller.principal) | Exists(keyed))


def execution_list(
    caller: Caller, *, workflow: str | None = None, status: str | None = None
) -> QuerySet[Execution]:
    qs = executions_visible(caller)
    if workflow:
        qs = qs.filter(workflow=workflow)
    if status:
        qs = qs.filter(status=status)
    return qs


def execution_get(execution_id: str, caller: Caller | None = None) -> Execution:
    """The execution, if ``caller`` (when given) may read it; else ``Execution.DoesNotExist``:
    an execution a caller may not read is answered as one that does not exist."""
    qs = Execution.objects.all() if caller is None else executions_visible(caller)
    return qs.select_related("current_run").get(pk=execution_id)


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

"""Reads of lanes (services own writes, selectors own reads)."""

from __future__ import annotations

from django.db import connection
from django.db.models import Count, QuerySet

from lanes.models import Lane, LaneWaiter

# The 1-based place of one execution in its lane's queue; no row when it is not queued.
POSITION_SQL = f"""
    SELECT 1 + (
        SELECT count(*) FROM {LaneWaiter._meta.db_table} AS ahead
        WHERE ahead.lane_id = me.lane_id AND (ahead.priority, ahead.id) < (me.priority, me.id)
    )
    FROM {LaneWaiter._meta.db_table} AS me WHERE me.execution_id = %s
"""  # noqa: S608 - table names from model metadata; the value is bound


def lane_position(execution_id: str) -> int | None:
    """The 1-based place of ``execution_id`` in its lane's queue (urgent work first, then by
    arrival), or None when it is not queued. One query, on the (lane, priority, id) index."""
    with connection.cursor() as cursor:
        cursor.execute(POSITION_SQL, [execution_id])
        row = cursor.fetchone()
    return int(row[0]) if row else None


def lane_list() -> QuerySet[Lane]:
    return Lane.objects.annotate(queued_count=Count("waiters")).order_by("key")


def lane_queue(key: str) -> list[LaneWaiter]:
    return list(LaneWaiter.objects.filter(lane_id=key).order_by("priority", "id"))

"""Which execution holds a lane for a new run (retry, continuation; docs/architecture.md, "Lanes").

A root execution holds its own lane. A child runs under its root's ownership and takes no
slot — while the root is active. A child run again after its root has ended has nobody to run
under: it holds the lane itself, like a root, and says so (``lane_key``), so that the lane
shows on it, its terminal transition releases the lane at once, and the claim guard
(``execution_lane_refusal``) admits it only as the owner.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from executions.catalog import LaneClaim
from executions.models import ACTIVE_STATUSES, Execution
from lanes.models import Lane, LaneState
from lanes.services import LaneClaimResult, lane_claim


def execution_root(execution: Execution) -> Execution:
    root = execution
    while root.parent_id is not None:
        root = Execution.objects.only("id", "parent_id", "status", "lane_key").get(
            pk=root.parent_id
        )
    return root


def execution_lane_claim(
    execution: Execution, claim: LaneClaim | None, *, urgent: bool
) -> LaneClaimResult | None:
    """Take or queue ``claim``'s lane for ``execution`` (its row locked by the caller; the
    lane's lock follows: execution before lane). None when no lane is needed."""
    if claim is None:
        return None
    if execution.parent_id is not None and execution_root(execution).status in ACTIVE_STATUSES:
        return None
    result = lane_claim(key=claim.key, execution_id=execution.id, token=claim.token, urgent=urgent)
    if (execution.lane_key, execution.lane_token) != (claim.key, claim.token):
        execution.lane_key, execution.lane_token = claim.key, claim.token
        execution.save(update_fields=["lane_key", "lane_token", "updated_at"])
    return result


_LANE_SHARE_SQL = f"""
    SELECT state, owner_id FROM {Lane._meta.db_table} WHERE key = %s FOR SHARE
"""  # noqa: S608 - the table name comes from model metadata; the value is bound


def execution_lane_admits_sql(execution: str, owner: str) -> tuple[str, dict[str, Any]]:
    """``execution_lane_refusal``'s test in SQL (true: admitted), for a claim made in one
    statement whose row of the execution is named ``execution`` and whose run's row names
    its id as ``owner``; false for a child under its root's lane (the root is looked up the
    slow way). The lane row is share-locked, as there, after the rows the statement locked
    before: the test names both rows, so it is made once both are locked (the lock order)."""
    lane = f"coalesce({execution}.lane_key, '')"
    condition = f"""({execution}.parent_id IS NULL OR {lane} <> '')
        AND ({lane} = '' OR EXISTS (
            SELECT 1 FROM {Lane._meta.db_table}
            WHERE key = {execution}.lane_key AND owner_id = {owner} AND state = %(lane_held)s
            FOR SHARE
        ))"""  # noqa: S608 - our own names; the values are bound
    return condition, {"lane_held": LaneState.HELD.value}


def execution_lane_refusal(execution: Execution) -> str | None:
    """The claim guard (registered with the engine): why ``execution`` (its row locked by
    the claim) may not run now, or None. A root — or a child holding a lane itself — runs
    only as the owner of a held lane; a child under its root, only while that root does.
    The backstop behind every dispatcher: whatever publishes a run too early, nothing runs
    outside its lane. The lane row is share-locked after the execution's (the lock order),
    so no handover commits between this check and the claim."""
    holder = (
        execution
        if execution.lane_key or execution.parent_id is None
        else execution_root(execution)
    )
    if not holder.lane_key:
        return None
    with connection.cursor() as cursor:
        cursor.execute(_LANE_SHARE_SQL, [holder.lane_key])
        row = cursor.fetchone()
    if row is None:
        return f"its lane {holder.lane_key} does not exist"
    state, owner = row
    if owner != holder.id:
        whose = "it" if holder is execution else f"its root {holder.id}"
        return f"lane {holder.lane_key} is owned by {owner}, not {whose}"
    if state != LaneState.HELD:
        return f"lane {holder.lane_key} is {state}"
    return None

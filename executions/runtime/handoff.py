"""A stage's end and its worker's claim of the next stage in ONE statement (docs/architecture.md,
"Life of an execution").

Between two stages of a run its worker already holds, nearly everything the claim would read
under its locks is known: the run is the worker's (its fence), the execution runs it, and the
next stage waits. What another writer may have changed meanwhile is tested in the statement
itself, under the same locks in the same order (the execution's row, then the run's, then
the lane's, shared): the execution still runs this run; the run still carries this worker's
fence, with no cancel asked, no pause and its deadline not passed; the next stage is pending
and never started (no timer of it to serve); every claim guard admits it
(``registry.claim_admits_sql``). When all hold, the statement ends the stage, claims the next
(fence + 1, the lease renewed on the database's clock), and emits the two events with their
webhook deliveries owed, in one round trip and one commit. When any does not, it writes
nothing and says so, and the runner makes the hand-off the slow way, where each case has its
outcome (a cancel, a deadline, a refusal, a lost fence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from alfred.db import prepared_cursor
from executions.models import (
    Execution,
    ExecutionStatus,
    Run,
    RunStatus,
    Stage,
    StageStatus,
)
from executions.outbox import EMITTED, Event, emission_read, emit_parts, events_param


@dataclass(frozen=True)
class HandedOver:
    """The claim the statement made: the run's new fence, its wakeups as claimed, the
    database's time, and the next stage's row."""

    fence: int
    wakeups: int
    now: datetime
    stage_id: int


@cache
def _hand_over_sql(admits: str) -> str:
    return f"""
    WITH handing AS (
        SELECT id, last_sequence, workflow FROM {Execution._meta.db_table}
        WHERE id = %(execution)s AND current_run_id = %(run)s AND status = %(running)s
        FOR UPDATE
    ), taken AS (
        UPDATE {Run._meta.db_table}
        SET fence = fence + 1, recoveries = 0, wakeups_seen = wakeups,
            lease_owner = %(worker)s,
            lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
        WHERE id = %(run)s AND fence = %(fence)s AND status = %(run_running)s
          AND cancel_requested_at IS NULL AND paused_at IS NULL
          AND (deadline_at IS NULL OR deadline_at > clock_timestamp())
          AND EXISTS (SELECT 1 FROM handing)
          AND EXISTS (
              SELECT 1 FROM {Stage._meta.db_table}
              WHERE run_id = %(run)s AND name = %(following)s AND status = %(pending)s
                AND started_at IS NULL
          )
          AND {admits}
        RETURNING fence, wakeups, clock_timestamp() AS now
    ), ended AS (
        UPDATE {Stage._meta.db_table}
        SET status = %(succeeded)s, output = %(output)s, error = NULL, finished_at = %(finished)s
        WHERE id = %(stage)s AND EXISTS (SELECT 1 FROM taken)
        RETURNING id
    ), started AS (
        UPDATE {Stage._meta.db_table}
        SET status = %(stage_running)s, started_at = (SELECT now FROM taken)
        WHERE run_id = %(run)s AND name = %(following)s AND EXISTS (SELECT 1 FROM taken)
        RETURNING id
    ), locked AS (
        SELECT * FROM handing WHERE EXISTS (SELECT 1 FROM taken)
    ), {emit_parts("locked")}
    SELECT taken.fence, taken.wakeups, taken.now, (SELECT id FROM started),
           (SELECT count(*) FROM ended), emitted.*
    FROM taken LEFT JOIN (SELECT {EMITTED} FROM inserted) AS emitted ON true
    ORDER BY 6
    """  # noqa: S608 - our own names and the guards' conditions; every value is bound


def stage_hand_over(
    *,
    execution_id: str,
    run_id: str,
    fence: int,
    stage_id: int,
    output: Any,
    following: str,
    worker: str,
    admits: tuple[str, dict[str, Any]],
    events: Sequence[Event],
) -> HandedOver | None:
    """End stage ``stage_id`` with ``output`` and claim ``following`` for ``worker``, with
    ``events`` (the stage's end and the next one's start), in one statement; None when it
    wrote nothing (something changed since this worker's claim: the slow way decides)."""
    condition, guard_params = admits
    output_field = Stage._meta.get_field("output")
    params = {
        **guard_params,
        "execution": execution_id,
        "run": run_id,
        "fence": fence,
        "stage": stage_id,
        "following": following,
        "worker": worker,
        "lease": settings.ALFRED_LEASE_SECONDS,
        "output": output_field.get_db_prep_save(output, connection),
        "finished": timezone.now(),
        "running": ExecutionStatus.RUNNING.value,
        "run_running": RunStatus.RUNNING.value,
        "pending": StageStatus.PENDING.value,
        "succeeded": StageStatus.SUCCEEDED.value,
        "stage_running": StageStatus.RUNNING.value,
        "events": events_param(events),
    }
    with prepared_cursor() as cursor:
        cursor.execute(_hand_over_sql(condition), params)
        rows = cursor.fetchall()
    if not rows:
        return None
    new_fence, wakeups, now, next_stage, ended = rows[0][:5]
    if next_stage is None or ended != 1:
        raise LookupError(f"run {run_id}: the hand-off claimed without its stages' rows")
    emission_read([row[5:] for row in rows if row[5] is not None])
    return HandedOver(new_fence, wakeups, now, next_stage)

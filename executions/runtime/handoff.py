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
outcome (a cancel, a deadline, a refusal, a lost fence). ``stage_finish`` does the same for
the last stage and the terminal transition.

What the statements read without a lock of their own (the stages' rows, the execution's
children, the run's timers and hooks, the outbox's keys) they read in the statement's
snapshot, which may be older than the locks it waited for. That is sound because only the
run's fenced holder writes those rows while the run is its own (and the children only under
its parent's lock), every event key names the run and the fence, and the fence itself is
tested on the locked row. A writer of those rows outside the fence would need these
statements to change.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from alfred.db import columns, instances, prepared_cursor
from executions.models import (
    TERMINAL_STATUSES,
    Execution,
    ExecutionStatus,
    Run,
    RunStatus,
    Stage,
    StageStatus,
    StartState,
)
from executions.outbox import EMITTED, Event, emission_read, emit_parts, events_param
from executions.runtime.registry import claim_admits_sql, definition_deadlines
from executions.runtime.terminal import run_purge_parts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HandedOver:
    """The claim the statement made: the run's new fence, its wakeups as claimed, the
    database's time, and the next stage's row."""

    fence: int
    wakeups: int
    now: datetime
    stage_id: int


# The states the statements here test and write, by the names they bind them under (a
# statement reads the ones it names).
_STATES = {
    "queued": ExecutionStatus.QUEUED.value,
    "running": ExecutionStatus.RUNNING.value,
    "start_pending": StartState.START_PENDING.value,
    "started": StartState.STARTED.value,
    "run_pending": RunStatus.PENDING.value,
    "run_running": RunStatus.RUNNING.value,
    "pending": StageStatus.PENDING.value,
    "succeeded": StageStatus.SUCCEEDED.value,
    "stage_running": StageStatus.RUNNING.value,
}


def _admits() -> tuple[str, dict[str, Any]] | None:
    """Every claim guard's test (``registry.claim_admits_sql``) as the statements here say
    it: of the execution's locked row, ``handing``, and the run's, ``fenced`` (locked after
    it), whose ``execution_id`` names the execution. Each test names both, so the locks a
    guard takes come after the execution's and the run's (the one lock order). None when a
    guard cannot say its test in SQL: then nothing is claimed in one statement."""
    return claim_admits_sql("handing", "fenced.execution_id")


@cache
def _hand_over_sql(admits: str) -> str:
    """The hand-off. Its locks follow the one order: ``handing`` locks the execution's row,
    ``fenced`` (asked for by ``admitted``) the run's, and only then, per row of ``fenced``,
    do the guards of ``admitted`` take theirs (the lane's, shared). ``taken``'s gate is one
    test done before its scan, so the run is updated after all of them."""
    return f"""
    WITH handing AS (
        SELECT id, last_sequence, workflow, lane_key, parent_id
        FROM {Execution._meta.db_table}
        WHERE id = %(execution)s AND current_run_id = %(run)s AND status = %(running)s
        FOR UPDATE
    ), fenced AS (
        SELECT id, execution_id FROM {Run._meta.db_table}
        WHERE id = %(run)s AND fence = %(fence)s AND status = %(run_running)s
          AND cancel_requested_at IS NULL AND paused_at IS NULL
          AND (deadline_at IS NULL OR deadline_at > clock_timestamp())
          AND EXISTS (SELECT 1 FROM handing)
        FOR UPDATE
    ), admitted AS (
        SELECT fenced.id FROM fenced JOIN handing ON handing.id = fenced.execution_id
        WHERE EXISTS (
              SELECT 1 FROM {Stage._meta.db_table}
              WHERE run_id = fenced.id AND name = %(following)s AND status = %(pending)s
                AND started_at IS NULL
          )
          AND EXISTS (
              SELECT 1 FROM {Stage._meta.db_table} WHERE id = %(stage)s AND run_id = fenced.id
          )
          AND {admits}
    ), taken AS (
        UPDATE {Run._meta.db_table}
        SET fence = fence + 1, recoveries = 0, wakeups_seen = wakeups,
            lease_owner = %(worker)s,
            lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
        WHERE id = %(run)s AND EXISTS (SELECT 1 FROM admitted)
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
    events: Sequence[Event],
) -> HandedOver | None:
    """End stage ``stage_id`` with ``output`` and claim ``following`` for ``worker``, with
    ``events`` (the stage's end and the next one's start), in one statement; None when it
    wrote nothing (something changed since this worker's claim, or a guard has no test in
    SQL: the slow way decides)."""
    admits = _admits()
    if admits is None:
        return None
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
        **_STATES,
        "events": events_param(events),
    }
    with prepared_cursor() as cursor:
        cursor.execute(_hand_over_sql(condition), params)
        rows = cursor.fetchall()
    if not rows:
        return None
    new_fence, wakeups, now, next_stage, ended = rows[0][:5]
    if next_stage is None or ended != 1:  # both rows were found under the locks: a bug
        log.error("run %s: the hand-off claimed without its stages' rows", run_id)
    emission_read([row[5:] for row in rows if row[5] is not None])
    return HandedOver(new_fence, wakeups, now, next_stage)


@dataclass(frozen=True)
class Started:
    """The first claim the statement made: the run as it is now (read back from the
    statement), the claimed stage's row, the database's time, and what the claim carries of
    the execution."""

    run: Run
    stage_id: int
    now: datetime
    workflow: str
    input: dict[str, Any]
    trace_context: dict[str, str]
    child: bool


@cache
def _start_sql(admits: str) -> str:
    """The first claim of a new run. Its locks follow the one order, as the hand-off's: the
    execution's row (found through the run's, read without a lock: a run's execution never
    changes), then the run's, then each guard's. ``moment`` is read once, when ``taken``
    first asks for it: after all the locks, so a lease counts from when the claim holds them."""
    return f"""
    WITH handing AS (
        SELECT id, last_sequence, workflow, lane_key, parent_id, input, trace_context
        FROM {Execution._meta.db_table}
        WHERE id = (SELECT execution_id FROM {Run._meta.db_table} WHERE id = %(run)s)
          AND current_run_id = %(run)s AND status = %(queued)s
          AND start_state = %(start_pending)s
        FOR UPDATE
    ), fenced AS (
        SELECT id, execution_id FROM {Run._meta.db_table}
        WHERE id = %(run)s AND fence = 0 AND status = %(run_pending)s
          AND lease_owner IN ('', %(worker)s)
          AND cancel_requested_at IS NULL AND paused_at IS NULL
          AND started_at IS NULL AND deadline_at IS NULL
          AND EXISTS (SELECT 1 FROM handing)
        FOR UPDATE
    ), admitted AS (
        SELECT named.id AS stage_id
        FROM fenced JOIN handing ON handing.id = fenced.execution_id
        JOIN {Stage._meta.db_table} AS named
          ON named.run_id = fenced.id AND named.name = %(stage)s
         AND named.status = %(pending)s AND named.started_at IS NULL
        WHERE NOT EXISTS (
              SELECT 1 FROM {Stage._meta.db_table} AS earlier
              WHERE earlier.run_id = fenced.id AND earlier.position < named.position
                AND earlier.status <> %(succeeded)s
          )
          AND {admits}
    ), moment AS (
        SELECT clock_timestamp() AS now
    ), taken AS (
        UPDATE {Run._meta.db_table} AS claimed
        SET fence = 1, recoveries = 0, wakeups_seen = wakeups, lease_owner = %(worker)s,
            lease_expires_at = (SELECT now FROM moment) + make_interval(secs => %(lease)s),
            status = %(run_running)s, started_at = (SELECT now FROM moment),
            deadline_at = (SELECT now FROM moment) + make_interval(
                secs => (%(deadlines)s::jsonb ->> (SELECT workflow FROM handing))::float8
            )
        WHERE id = %(run)s AND EXISTS (SELECT 1 FROM admitted)
        RETURNING {columns(Run, "claimed")}, (SELECT now FROM moment) AS now
    ), started AS (
        UPDATE {Stage._meta.db_table}
        SET status = %(stage_running)s, started_at = (SELECT now FROM taken)
        WHERE id = (SELECT stage_id FROM admitted) AND EXISTS (SELECT 1 FROM taken)
        RETURNING id
    ), locked AS (
        SELECT * FROM handing WHERE EXISTS (SELECT 1 FROM taken)
    ), {emit_parts("locked", advance=False, named=True)},
    execution AS (
        UPDATE {Execution._meta.db_table} AS running
        SET status = %(running)s, start_state = %(started)s, start_error = NULL,
            updated_at = %(updated)s,
            last_sequence = coalesce((SELECT max(sequence) FROM inserted), last_sequence)
        WHERE running.id = (SELECT id FROM locked)
    )
    SELECT {columns(Run, "taken")}, taken.now, (SELECT id FROM started),
           locked.workflow, locked.input, locked.trace_context, locked.parent_id, emitted.*
    FROM taken, locked LEFT JOIN (SELECT {EMITTED} FROM inserted) AS emitted ON true
    ORDER BY emitted.sequence
    """  # noqa: S608 - our own names and the guards' conditions; every value is bound


def stage_claim_first(
    *, run_id: str, stage: str, worker: str, events: Sequence[Event]
) -> Started | None:
    """The first claim of a new run, of its stage ``stage``, for ``worker``, in one statement:
    the run fenced (fence 1) and leased, its deadline set from its workflow's, the stage
    running, the execution running and started, with ``events`` (named under the execution:
    ``event_key(None, ...)``; the statement finds the execution through the run). None when it
    wrote nothing: the run is not new and simply claimable (a message delivered again, a
    wake, a takeover, a cancel or a guard's refusal): the slow way decides."""
    statement = start_statement(run_id=run_id, stage=stage, worker=worker, events=events)
    if statement is None:
        return None
    with prepared_cursor() as cursor:
        cursor.execute(*statement)
        rows = cursor.fetchall()
    if not rows:
        return None
    (run,), rest = instances(rows[0], Run)
    now, stage_id, workflow, input, trace_context, parent_id = rest[:6]
    emitted = len(rows[0]) - len(rest) + 6  # where EMITTED's columns start
    emission_read([row[emitted:] for row in rows if row[emitted] is not None])
    return Started(
        run, stage_id, now, workflow, _json(input), _json(trace_context) or {}, bool(parent_id)
    )


def start_statement(
    *, run_id: str, stage: str, worker: str, events: Sequence[Event]
) -> tuple[str, dict[str, Any]] | None:
    """``stage_claim_first``'s statement and its parameters (None: a claim guard has no
    test in SQL); the engine's benchmark explains it."""
    admits = _admits()
    if admits is None:
        return None
    condition, guard_params = admits
    params = {
        **guard_params,
        "run": run_id,
        "stage": stage,
        "worker": worker,
        "lease": settings.ALFRED_LEASE_SECONDS,
        "deadlines": _deadlines_param(),
        "updated": timezone.now(),
        **_STATES,
        "events": events_param(events),
    }
    return _start_sql(condition), params


def _json(value: Any) -> Any:
    """A JSON column's value as the ORM reads it (Django's connection loads ``jsonb`` as
    text; ``JSONField.from_db_value`` decodes it, with no decoder of its own here)."""
    return json.loads(value) if isinstance(value, str) else value


def _deadlines_param() -> str:
    return json.dumps(definition_deadlines())


@dataclass(frozen=True)
class Finished:
    """What the finishing statement did: the execution's lane (for its reconcile)."""

    lane_key: str | None


_RUN_STATUS_OF = {
    ExecutionStatus.SUCCEEDED: RunStatus.SUCCEEDED,
    ExecutionStatus.ROLLED_BACK: RunStatus.SUCCEEDED,
}

_FINISH_AT_ONCE_SQL = f"""
    WITH finishing AS (
        SELECT id, last_sequence, workflow, lane_key FROM {Execution._meta.db_table}
        WHERE id = %(execution)s AND current_run_id = %(run)s
          AND NOT (status = ANY(%(terminal)s)) AND parent_id IS NULL
          AND NOT EXISTS (
              SELECT 1 FROM {Execution._meta.db_table} AS child
              WHERE child.parent_id = %(execution)s AND NOT (child.status = ANY(%(terminal)s))
          )
        FOR UPDATE
    ), fenced AS (
        SELECT id FROM {Run._meta.db_table}
        WHERE id = %(run)s AND fence = %(fence)s AND EXISTS (SELECT 1 FROM finishing)
          AND EXISTS (
              SELECT 1 FROM {Stage._meta.db_table} WHERE id = %(stage)s AND run_id = %(run)s
          )
        FOR UPDATE
    ), locked AS (
        SELECT * FROM finishing WHERE EXISTS (SELECT 1 FROM fenced)
    ), {emit_parts("locked", advance=False)},
    execution AS (
        UPDATE {Execution._meta.db_table}
        SET status = %(status)s, result = %(result)s, error = NULL,
            finished_at = %(now)s, updated_at = %(now)s,
            last_sequence = coalesce((SELECT max(sequence) FROM inserted), last_sequence)
        WHERE id = %(execution)s AND EXISTS (SELECT 1 FROM fenced)
    ), run AS (
        UPDATE {Run._meta.db_table}
        SET status = %(run_status)s, finished_at = %(now)s, error = NULL,
            lease_owner = '', lease_expires_at = NULL, fence = fence + 1
        WHERE id = %(run)s AND EXISTS (SELECT 1 FROM fenced)
    ), ended AS (
        UPDATE {Stage._meta.db_table}
        SET status = %(succeeded)s, output = %(result)s, error = NULL, finished_at = %(now)s
        WHERE id = %(stage)s AND EXISTS (SELECT 1 FROM fenced)
        RETURNING id
    ), {run_purge_parts(when="EXISTS (SELECT 1 FROM fenced)", besides="%(stage)s")}
    SELECT (SELECT lane_key FROM finishing), (SELECT count(*) FROM ended), emitted.*
    FROM fenced LEFT JOIN (SELECT {EMITTED} FROM inserted) AS emitted ON true
    ORDER BY 3
"""  # noqa: S608 - our own names; every value is bound


def stage_finish(
    *,
    execution_id: str,
    run_id: str,
    fence: int,
    stage_id: int,
    output: Any,
    status: str,
    events: Sequence[Event],
) -> Finished | None:
    """End the run's last stage ``stage_id`` with ``output`` and move the execution to
    ``status`` (succeeded, or rolled back) with it as the result, in one statement: the
    terminal transition of ``executions.runtime.terminal`` for an execution with no parent
    and no active child (what it would do more is theirs), ``events`` (the stage's end and
    the terminal event) emitted with it. None when it wrote nothing: the fence moved, the
    execution ended or moved on, or it has a parent or an active child (the slow way)."""
    json = Execution._meta.get_field("result")
    now = timezone.now()
    params = {
        "execution": execution_id,
        "run": run_id,
        "fence": fence,
        "stage": stage_id,
        "status": status,
        "run_status": _RUN_STATUS_OF[ExecutionStatus(status)],
        "result": json.get_db_prep_save(output, connection),
        "stage_error": json.get_db_prep_save({"code": status}, connection),
        "now": now,
        "terminal": sorted(TERMINAL_STATUSES),
        **_STATES,
        "events": events_param(events),
    }
    with prepared_cursor() as cursor:
        cursor.execute(_FINISH_AT_ONCE_SQL, params)
        rows = cursor.fetchall()
    if not rows:
        return None
    lane_key, ended = rows[0][:2]
    if ended != 1:  # the stage was found under the locks: a bug
        log.error("run %s: finished without its last stage's row", run_id)
    emission_read([row[2:] for row in rows if row[2] is not None])
    return Finished(lane_key)

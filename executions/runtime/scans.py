"""The guarantees behind the hints: the timer scanner and the recovery scan. Both are safe to
run on several hosts at once (SKIP LOCKED, idempotent dispatch) and work in bounded batches,
so each tick costs what is due, not what is remembered."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Q

from alfred import workers
from alfred.metrics import RECOVERY_DISPATCHES
from executions.models import (
    ACTIVE_STATUSES,
    Execution,
    Run,
    RunStatus,
    StartState,
    Timer,
    TimerPurpose,
    TimerStatus,
)
from executions.runtime.clock import db_now
from executions.runtime.dispatch import run_dispatch
from executions.runtime.holders import holder_process_dead, local_holder_marker

BATCH = 200
# How long a start message may take to arrive before the recovery scan sends another.
START_GRACE_SECONDS = 10


def timers_fire(batch: int = BATCH) -> int:
    """Fire due timers: mark them fired, wake their runs. Returns how many fired. Due by the
    database's clock, the one every due time was set on (``executions.runtime.clock``)."""
    with transaction.atomic(durable=True):
        now = db_now()
        due = list(
            Timer.objects.select_for_update(skip_locked=True)
            .filter(status=TimerStatus.PENDING, due_at__lte=now)
            .order_by("due_at")
            .values_list("pk", "run_id")[:batch]
        )
        if not due:
            return 0
        Timer.objects.filter(pk__in=[pk for pk, _ in due]).update(
            status=TimerStatus.FIRED, fired_at=now
        )
        run_ids = sorted({run_id for _, run_id in due})
        Run.objects.filter(pk__in=run_ids).update(wakeups=F("wakeups") + 1, woken_at=now)
    for run_id in run_ids:
        run_dispatch(run_id)
    return len(due)


def runs_recover(batch: int = BATCH) -> int:
    """Dispatch again what lost its message: runs never started (start_pending past a grace,
    start_failed) that may start, runs whose worker's lease ran out or whose holder is known
    to be gone, waiting runs woken but not claimed since, runs past their deadline. Returns
    how many were dispatched. Only an execution its lane admits is started (the claim guard
    refuses the others anyway)."""
    now = db_now()
    unstarted = (
        Execution.objects.filter(
            Q(
                start_state=StartState.START_PENDING,
                current_run__created_at__lt=now - timedelta(seconds=START_GRACE_SECONDS),
            )
            | Q(start_state=StartState.START_FAILED),
            status__in=sorted(ACTIVE_STATUSES),
            current_run__isnull=False,
        )
        # Queued behind a lane, or not holding the lane it names (dropped by an operator's
        # recovery, or owning a lane that must be recovered first): not ours to start.
        .exclude(lane_wait__isnull=False)
        .filter(Q(lane_key__isnull=True) | Q(owned_lanes__state="held"))
        .values_list("current_run_id", flat=True)[:batch]
    )
    grace = now - timedelta(seconds=START_GRACE_SECONDS)
    stalled = Run.objects.filter(
        Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
        # woken (a timer fired, a hook answered, a child ended) but never claimed since:
        # the wake's message was lost
        | Q(status=RunStatus.WAITING, wakeups__gt=F("wakeups_seen"), woken_at__lt=grace)
        # past its deadline, unless paused for an operator: that wait does not count
        # (``Run.paused_at``), and the approval's expiry ends it
        | (
            Q(status__in=[RunStatus.WAITING, RunStatus.RUNNING], deadline_at__lt=now)
            & Q(paused_at__isnull=True)
        ),
        execution__current_run_id=F("id"),
        execution__status__in=sorted(ACTIVE_STATUSES),
    ).values_list("id", flat=True)[:batch]
    held = runs_held_by_the_gone(now, batch)
    run_ids = _recovery_due(sorted({*unstarted, *stalled, *held}), now)
    for run_id in run_ids:
        run_dispatch(run_id)
    RECOVERY_DISPATCHES.inc(len(run_ids))
    return len(run_ids)


# Running runs under a live lease whose holder's worker is gone (alfred.workers): the holder
# named node:pidns:pid, its node a worker no longer present. Over the partial index of running
# runs, joined by primary key: a tick costs what runs.
_HELD_BY_THE_GONE = f"""
    SELECT r.id FROM {Run._meta.db_table} r
    JOIN {Execution._meta.db_table} e ON e.current_run_id = r.id
    JOIN {workers.TABLE} h ON h.worker = substring(r.lease_owner from '^(.*):[^:]*:[0-9]+$')
    WHERE r.status = %(running)s AND r.lease_expires_at >= %(now)s
      AND e.status = ANY(%(active)s) AND {workers.GONE_SURELY}
    ORDER BY r.id LIMIT %(batch)s
"""  # noqa: S608 - the table names come from model metadata; values are bound


def runs_held_by_the_gone(now: datetime, batch: int = BATCH) -> list[str]:
    """Runs whose lease still runs but whose holder is known to be gone
    (``executions.runtime.holders``): its worker no longer present, wherever it ran, or its
    process dead on this host (the scan's own: only here can a pid be
    asked). Their message went with their worker (the broker gives it back only after its
    visibility timeout), so without this they would wait out the whole lease; the claim of
    the message sent now checks again, under the run's lock, and moves the fence."""
    with connection.cursor() as cursor:
        cursor.execute(
            _HELD_BY_THE_GONE,
            {
                "running": RunStatus.RUNNING,
                "now": now,
                "active": sorted(ACTIVE_STATUSES),
                "batch": batch,
            },
        )
        gone = [row[0] for row in cursor.fetchall()]
    here = Run.objects.filter(
        status=RunStatus.RUNNING,
        lease_expires_at__gte=now,
        lease_owner__contains=local_holder_marker(),
        execution__current_run_id=F("id"),
        execution__status__in=sorted(ACTIVE_STATUSES),
    ).values_list("id", "lease_owner")[:batch]
    return sorted({*gone, *(run_id for run_id, holder in here if holder_process_dead(holder))})


# A run re-dispatched by the scan is not re-dispatched again until its message has had time
# to arrive: START_GRACE_SECONDS, doubling with every re-dispatch since the run was last
# claimed, at most RECOVERY_BACKOFF_CAP_SECONDS. Without it, a backlog longer than the grace
# (a burst of work, a slow worker) is re-published every tick, and the duplicates deepen the
# very backlog that delayed the first message.
RECOVERY_BACKOFF_CAP_SECONDS = 300
_RECOVERY_DUE_SQL = f"""
    UPDATE {Run._meta.db_table}
    SET recoveries = recoveries + 1, recovered_at = %(now)s
    WHERE id = ANY(%(ids)s) AND (
        recovered_at IS NULL OR recovered_at + make_interval(
            secs => LEAST(%(cap)s, %(base)s * power(2, LEAST(GREATEST(recoveries - 1, 0), 20)))
        ) <= %(now)s
    )
    RETURNING id
"""  # noqa: S608 - the table name comes from model metadata; values are bound


def _recovery_due(run_ids: list[str], now: datetime) -> list[str]:
    """Which of ``run_ids`` the scan re-dispatches now, counted as such in one statement (two
    scanners on two hosts re-dispatch a run once)."""
    if not run_ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _RECOVERY_DUE_SQL,
            {
                "ids": run_ids,
                "now": now,
                "cap": RECOVERY_BACKOFF_CAP_SECONDS,
                "base": START_GRACE_SECONDS,
            },
        )
        return sorted(row[0] for row in cursor.fetchall())


def polls_hasten(topics: list[str]) -> int:
    """News about ``topics`` (a push to a repository, an application synced): every pending
    poll that watches one is due now, and its run is woken at once. Returns how many polls.
    Harmless when repeated or wrong: a poll only reads, and an early one that finds nothing
    waits its interval again."""
    return waits_hasten(topics, purpose=TimerPurpose.POLL)


def waits_hasten(topics: list[str], *, purpose: str) -> int:
    """Every pending timer of ``purpose`` that watches one of ``topics`` is due now, and its
    run woken at once (a poll: :func:`polls_hasten`; a hold whose freeze ended). Returns how
    many. Harmless when repeated or wrong: the woken stage asks again what it waited for."""
    if not topics:
        return 0
    watching = Q()
    for topic in topics:
        watching |= Q(topics__contains=[topic])
    with transaction.atomic():
        now = db_now()
        due = list(
            Timer.objects.select_for_update(skip_locked=True)
            .filter(watching, status=TimerStatus.PENDING, purpose=purpose)
            .values_list("pk", "run_id")
        )
        if not due:
            return 0
        Timer.objects.filter(pk__in=[pk for pk, _ in due]).update(
            status=TimerStatus.FIRED, due_at=now, fired_at=now
        )
        run_ids = sorted({run_id for _, run_id in due})
        Run.objects.filter(pk__in=run_ids).update(wakeups=F("wakeups") + 1, woken_at=now)
        transaction.on_commit(lambda: [run_dispatch(run_id) for run_id in run_ids])
    return len(due)

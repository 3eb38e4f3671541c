"""Retention (docs/runbook.md, "Pruning old executions": hot tables stay small). An ended
execution's history is deleted once it has been over for the retention period
(``ALFRED_RETENTION_DAYS``), in short batches, by ``manage.py alfred_prune`` and, when
``ALFRED_PRUNE_SCHEDULE_SECONDS`` is set, by beat (``executions.tasks.executions_prune``).

What goes, per execution: its outbox events with their webhook deliveries and attempts, and
its runs' step receipts and timers: the rows that grow with every step and transition. What
stays: the execution row (status, input, result, error, logical identity), its
Idempotency-Keys (docs/contract.md, "Asking for an execution": kept as long as the execution, so a
replayed request still gets it), its runs and stages (the outputs a continuation reuses), its
checkpoints (hooks and their signals: which plan was approved, by whom) and the audit log, which
gains one ``execution.pruned`` entry per execution. ``Execution.pruned_at`` says when.
Rollback needs the mutation receipts, so a pruned execution can no longer be rolled back;
``executions.controls`` refuses it (``history_pruned``), even after a later retry, rather
than undo part of it.

The unit is a root with its children (a child is rolled back with its root, so it goes with
it). A tree is left for a later pass when any member is not terminal, has a run not ended,
owns a lane or is queued on one, still owes a webhook delivery to an active endpoint, or is
locked by another transaction right now.

Each batch is one short transaction: the roots under their row locks, FOR UPDATE SKIP LOCKED
with their state checked again under the lock, then their children the same way (the lock
order: execution rows first, a parent before its children as ``executions.runtime.terminal`` takes
them), the checks, the archive, and one statement that deletes the rows and marks the
executions. Skipping what is locked means a retry, a rollback or a lane handover in progress
is never waited on and never touched; one that committed since the candidates were chosen is
seen by the check under the lock (a retried execution is queued, not terminal). Lanes are
read without their locks: whoever makes an execution a lane's owner or a waiter holds that
execution's row lock first (``lanes.services``), and the batch holds it. Every event written
while a batch runs waits for it to end before the all-executions feed shows it (the feed
reads below the oldest open transaction): another reason to keep batches short.

A pass that reaches the end of the executions also deletes the inbound notifications (what
``delivery.receivers`` took in) received more than the same period ago, oldest first,
``NOTIFICATION_BATCH`` rows a statement. One is kept only so that the same delivery sent
again is a no-op; a sender redelivers for a few days at most (docs/providers.md), and one
resent after it is gone is recorded again and brings the polls it names forward again: a
hint, never a change.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from alfred.readonly import writes_allowed
from executions.models import (
    TERMINAL_STATUSES,
    AuditEntry,
    DeliveryStatus,
    Execution,
    InboundNotification,
    OutboxEvent,
    Run,
    RunStatus,
    StepReceipt,
    Timer,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from lanes.models import Lane, LaneWaiter

# Root executions per batch. With their children and a hundred events each, a transaction
# of tens of milliseconds (bench/reports/prune.md). Batches of 2 tried: the prune took five
# times as long for a stage path's p95 barely better.
BATCH = 10
# The share of its time a prune spends in batches: after each it rests nine times as long,
# so the database's CPU and its log flushes go to the stage path first (at 0.25, an earlier
# run: a stage took 1.07x at the median and 1.16x at p95 on two cores). 1: flat out.
DUTY = 0.1

_E = Execution._meta.db_table
_R = Run._meta.db_table
_TERMINAL_SQL = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))
_RUN_ACTIVE_SQL = ", ".join(
    f"'{status}'" for status in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)
)

# The roots still prunable, locked; one in another writer's hands is skipped, not waited on.
_LOCK_ROOTS_SQL = f"""
    SELECT id FROM {_E}
    WHERE id = ANY(%(ids)s) AND parent_id IS NULL AND status IN ({_TERMINAL_SQL})
      AND finished_at < now() - %(age)s * interval '1 second'
      AND (pruned_at IS NULL OR pruned_at < finished_at)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
"""  # noqa: S608

# Every descendant of the locked roots with its root, locked, and its status as locked (None:
# held by another writer; SKIP LOCKED, so the tree is left for later, not waited on).
_LOCK_TREE_SQL = f"""
    WITH RECURSIVE tree(root, id) AS (
        SELECT parent_id, id FROM {_E} WHERE parent_id = ANY(%(roots)s)
        UNION ALL
        SELECT tree.root, e.id FROM {_E} e JOIN tree ON e.parent_id = tree.id
    )
    SELECT tree.root, tree.id, locked.status
    FROM tree
    LEFT JOIN LATERAL (
        SELECT status FROM {_E} WHERE id = tree.id FOR UPDATE SKIP LOCKED
    ) locked ON true
"""  # noqa: S608

# Members that must not be pruned now, and why.
_BLOCKERS_SQL = f"""
    SELECT execution_id, 'run_active' FROM {_R}
    WHERE execution_id = ANY(%(ids)s) AND status IN ({_RUN_ACTIVE_SQL})
    UNION ALL
    SELECT owner_id, 'lane_owner' FROM {Lane._meta.db_table} WHERE owner_id = ANY(%(ids)s)
    UNION ALL
    SELECT execution_id, 'lane_queued' FROM {LaneWaiter._meta.db_table}
    WHERE execution_id = ANY(%(ids)s)
    UNION ALL
    SELECT o.execution_id, 'delivery_owed'
    FROM {OutboxEvent._meta.db_table} o
    JOIN {WebhookDelivery._meta.db_table} d ON d.event_id = o.id
    JOIN {WebhookEndpoint._meta.db_table} w ON w.id = d.endpoint_id
    WHERE o.execution_id = ANY(%(ids)s) AND d.status = '{DeliveryStatus.PENDING}' AND w.active
"""  # noqa: S608

# One statement: the history rows gone, the executions marked. Foreign keys are checked at
# commit (Django makes them DEFERRABLE INITIALLY DEFERRED), so the order of the parts is free.
# Each part finds its rows through an index (``= ANY(ARRAY(...))``: a semi-join against a CTE
# was planned as a scan of the whole outbox, every batch).
# A delivery owed to an active endpoint is kept even here: one redelivered since the check
# (``relay.deliveries_redeliver`` takes no execution lock) then holds its event, and the
# commit fails on that key, the batch undone whole.
_DELETE_SQL = f"""
    WITH events AS (
        SELECT id FROM {OutboxEvent._meta.db_table} WHERE execution_id = ANY(%(ids)s)
    ), deliveries AS (
        SELECT id FROM {WebhookDelivery._meta.db_table}
        WHERE event_id = ANY(ARRAY(SELECT id FROM events))
    ), runs AS (
        SELECT id FROM {_R} WHERE execution_id = ANY(%(ids)s)
    ), attempts_gone AS (
        DELETE FROM {WebhookAttempt._meta.db_table}
        WHERE delivery_id = ANY(ARRAY(SELECT id FROM deliveries)) RETURNING 1
    ), deliveries_gone AS (
        DELETE FROM {WebhookDelivery._meta.db_table} d USING {WebhookEndpoint._meta.db_table} w
        WHERE d.id = ANY(ARRAY(SELECT id FROM deliveries)) AND w.id = d.endpoint_id
          AND NOT (d.status = '{DeliveryStatus.PENDING}' AND w.active)
        RETURNING 1
    ), events_gone AS (
        DELETE FROM {OutboxEvent._meta.db_table} WHERE execution_id = ANY(%(ids)s) RETURNING 1
    ), receipts_gone AS (
        DELETE FROM {StepReceipt._meta.db_table}
        WHERE run_id = ANY(ARRAY(SELECT id FROM runs)) RETURNING 1
    ), timers_gone AS (
        DELETE FROM {Timer._meta.db_table}
        WHERE run_id = ANY(ARRAY(SELECT id FROM runs)) RETURNING 1
    ), marked AS (
        UPDATE {_E} SET pruned_at = now() WHERE id = ANY(%(ids)s) RETURNING 1
    )
    SELECT (SELECT count(*) FROM marked), (SELECT count(*) FROM events_gone),
           (SELECT count(*) FROM deliveries_gone), (SELECT count(*) FROM attempts_gone),
           (SELECT count(*) FROM receipts_gone), (SELECT count(*) FROM timers_gone)
"""  # noqa: S608

COUNTS = ("executions", "events", "deliveries", "attempts", "receipts", "timers")

# Inbound notifications deleted per statement (a row is a few hundred bytes: a statement of a
# few milliseconds).
NOTIFICATION_BATCH = 1000
_N = InboundNotification._meta.db_table
# The oldest first, by id (the order they were received in, served by the primary key: the
# old rows are the first the index gives); one another transaction holds is left for later.
_NOTIFICATIONS_SQL = f"""
    DELETE FROM {_N} WHERE id = ANY(ARRAY(
        SELECT id FROM {_N}
        WHERE received_at < now() - %(age)s * interval '1 second'
        ORDER BY id LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ))
"""  # noqa: S608


@dataclass(frozen=True)
class HistoryArchive:
    """Where each execution's history goes before it is deleted: ``<id>.json`` in
    ``directory`` (``<id>.2.json`` and on for an execution pruned again after a retry: an
    archive is never overwritten), as ``render`` writes it (the admin's "download as JSON").
    Written and flushed to disk inside the batch, before the delete commits: a batch that
    fails after writing leaves an archive of rows that are still there, never the reverse."""

    directory: Path
    render: Callable[[Execution], str]

    def write(self, execution: Execution) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        staged = self.directory / f".{execution.id}.{uuid.uuid4().hex}.tmp"
        with staged.open("x", encoding="utf-8") as out:
            out.write(self.render(execution))
            out.flush()
            os.fsync(out.fileno())
        try:
            for n in itertools.count(1):
                target = self.directory / (
                    f"{execution.id}.json" if n == 1 else f"{execution.id}.{n}.json"
                )
                try:
                    os.link(staged, target)  # never replaces an archive already there
                except FileExistsError:
                    continue
                return target
        finally:
            staged.unlink()
        raise AssertionError("unreachable")

    def sync(self) -> None:
        """The new names themselves on disk (the directory's entries)."""
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


@dataclass
class PruneReport:
    """What a prune did; ``after`` is where a pass that ran out of time goes on from."""

    counts: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    longest_batch_ms: float = 0.0
    after: tuple[datetime, str] | None = None

    def add(self, other: PruneReport) -> None:
        self.counts.update(other.counts)
        self.skipped.update(other.skipped)
        self.batches += other.batches
        self.longest_batch_ms = max(self.longest_batch_ms, other.longest_batch_ms)

    def summary(self) -> str:
        done = ", ".join(f"{self.counts[name]} {name}" for name in COUNTS[1:])
        line = f"pruned {self.counts['executions']} executions ({done}) in {self.batches} batches"
        if self.batches:
            line += f", the longest {self.longest_batch_ms:.0f} ms"
        line += f", and {self.counts['notifications']} inbound notifications"
        if self.skipped:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
            line += f"; left for later: {why}"
        return line


def prunable_roots(
    older_than: timedelta, *, limit: int, after: tuple[datetime, str] | None = None
) -> list[tuple[datetime, str]]:
    """Root executions that ended more than ``older_than`` ago (the database's clock) and
    were not pruned since, oldest first, after the cursor ``after``: candidates only, read
    without locks (the batch decides under them). Served by the ``execution_prunable``
    index."""
    candidates = Execution.objects.filter(
        Q(pruned_at__isnull=True) | Q(pruned_at__lt=F("finished_at")),
        parent__isnull=True,
        status__in=sorted(TERMINAL_STATUSES),
        finished_at__lt=Now() - older_than,
    )
    if after is not None:
        candidates = candidates.filter(
            Q(finished_at__gt=after[0]) | Q(finished_at=after[0], id__gt=after[1])
        )
    rows = candidates.order_by("finished_at", "id").values_list("finished_at", "id")[:limit]
    return [(finished_at, execution_id) for finished_at, execution_id in rows if finished_at]


def prunable_preview(older_than: timedelta) -> dict[str, int]:
    """How many roots are candidates now, and how many events they and their children hold
    (before the checks under the lock, which may leave some for later)."""
    roots = Execution.objects.filter(
        Q(pruned_at__isnull=True) | Q(pruned_at__lt=F("finished_at")),
        parent__isnull=True,
        status__in=sorted(TERMINAL_STATUSES),
        finished_at__lt=Now() - older_than,
    )
    events = OutboxEvent.objects.filter(
        Q(execution__in=roots) | Q(execution__parent__in=roots)
    ).count()
    notifications = InboundNotification.objects.filter(received_at__lt=Now() - older_than)
    return {"executions": roots.count(), "events": events, "notifications": notifications.count()}


def executions_prune_batch(
    root_ids: Sequence[str],
    *,
    older_than: timedelta,
    actor: str,
    archive: HistoryArchive | None = None,
) -> PruneReport:
    """Prune the trees of ``root_ids`` that may be pruned now, in one transaction (see the
    module's docstring for the locks and the checks). Returns what it did and what it left."""
    started = time.monotonic()
    try:
        report = _batch(root_ids, older_than=older_than, actor=actor, archive=archive)
    except IntegrityError:
        # A delivery put back between the check and the delete (see _DELETE_SQL).
        report = PruneReport(batches=1)
        report.skipped["delivery_owed"] += len(root_ids)
    report.longest_batch_ms = (time.monotonic() - started) * 1000
    return report


def _batch(
    root_ids: Sequence[str],
    *,
    older_than: timedelta,
    actor: str,
    archive: HistoryArchive | None,
) -> PruneReport:
    report = PruneReport(batches=1)
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute(_LOCK_ROOTS_SQL, {"ids": list(root_ids), "age": older_than.total_seconds()})
        roots = [row[0] for row in cursor.fetchall()]
        if len(roots) < len(root_ids):
            report.skipped["changed_or_busy"] += len(root_ids) - len(roots)
        if not roots:
            return report
        tree: dict[str, list[str]] = {root: [root] for root in roots}
        blocked: dict[str, str] = {}
        cursor.execute(_LOCK_TREE_SQL, {"roots": roots})
        for root, member, status in cursor.fetchall():
            tree[root].append(member)
            if status is None:
                blocked.setdefault(root, "child_busy")
            elif status not in TERMINAL_STATUSES:
                blocked.setdefault(root, "child_active")
        root_of = {member: root for root, members in tree.items() for member in members}
        cursor.execute(_BLOCKERS_SQL, {"ids": list(root_of)})
        for member, reason in cursor.fetchall():
            blocked.setdefault(root_of[member], reason)
        report.skipped.update(blocked.values())
        ids = [member for root in roots if root not in blocked for member in tree[root]]
        if not ids:
            return report
        if archive is not None:
            for execution in Execution.objects.filter(pk__in=ids).order_by("id"):
                archive.write(execution)
            archive.sync()
        cursor.execute(_DELETE_SQL, {"ids": ids})
        report.counts.update(dict(zip(COUNTS, cursor.fetchone(), strict=True)))
        AuditEntry.objects.bulk_create(
            AuditEntry(
                actor=actor,
                action="execution.pruned",
                target_type="execution",
                target_id=execution_id,
                reason=f"retention: ended more than {duration_text(older_than)} ago",
                data={
                    "root": root_of[execution_id],
                    "archive": None if archive is None else str(archive.directory),
                },
            )
            for execution_id in ids
        )
    return report


def executions_prune(
    *,
    older_than: timedelta,
    actor: str,
    archive: HistoryArchive | None = None,
    batch: int = BATCH,
    duty: float = DUTY,
    budget_seconds: float | None = None,
    after: tuple[datetime, str] | None = None,
) -> PruneReport:
    """Prune everything prunable, batch after batch, oldest first, each tree looked at once
    per pass, resting between batches so that they take ``duty`` of the time, then the old
    inbound notifications. With ``budget_seconds``, stops after the batch that crosses it and
    says where to go on from (``report.after``; None when no execution is left: notifications
    the budget did not reach are the next pass's)."""
    writes_allowed()
    if not 0 < duty <= 1:
        raise ValueError("duty: more than 0, at most 1")
    report = PruneReport()
    started = time.monotonic()
    while candidates := prunable_roots(older_than, limit=batch, after=after):
        after = candidates[-1]
        batch_started = time.monotonic()
        report.add(
            executions_prune_batch(
                [execution_id for _, execution_id in candidates],
                older_than=older_than,
                actor=actor,
                archive=archive,
            )
        )
        if len(candidates) < batch:
            break
        if budget_seconds is not None and time.monotonic() - started >= budget_seconds:
            report.after = after
            return report
        time.sleep((time.monotonic() - batch_started) * (1 - duty) / duty)
    deadline = None if budget_seconds is None else started + budget_seconds
    report.counts["notifications"] = notifications_prune(older_than, duty=duty, deadline=deadline)
    return report


def notifications_prune(
    older_than: timedelta,
    *,
    batch: int = NOTIFICATION_BATCH,
    duty: float = DUTY,
    deadline: float | None = None,
) -> int:
    """Delete the inbound notifications received more than ``older_than`` ago, ``batch`` a
    statement, resting as the executions' batches do, until none is left or the monotonic
    ``deadline`` passes. Returns how many went."""
    deleted = 0
    while True:
        started = time.monotonic()
        with connection.cursor() as cursor:  # one statement: a transaction of its own
            cursor.execute(_NOTIFICATIONS_SQL, {"age": older_than.total_seconds(), "limit": batch})
            gone = cursor.rowcount
        deleted += gone
        if gone < batch or (deadline is not None and time.monotonic() >= deadline):
            return deleted
        time.sleep((time.monotonic() - started) * (1 - duty) / duty)


def duration_text(value: timedelta) -> str:
    """``90d``, ``36h``: the shortest exact way :func:`duration_parse` reads."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def duration_parse(text: str) -> timedelta:
    """``90d``, ``36h``, ``15m`` or ``30s`` (a number and a unit) as a duration."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    text = text.strip().lower()
    if len(text) < 2 or text[-1] not in units:
        raise ValueError(f"{text!r}: a number and a unit (d, h, m or s), like 90d")
    try:
        number = float(text[:-1])
    except ValueError:
        raise ValueError(f"{text!r}: a number and a unit (d, h, m or s), like 90d") from None
    if not number >= 0:
        raise ValueError(f"{text!r}: not negative")
    return timedelta(seconds=number * units[text[-1]])


def retention_period() -> timedelta:
    """``ALFRED_RETENTION_DAYS``: what the command prunes by default, and beat always."""
    return timedelta(days=settings.ALFRED_RETENTION_DAYS)

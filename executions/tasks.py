"""Celery tasks: thin — take ids, call the engine. Running one twice changes nothing: a stage
already done is a no-op, a run leased elsewhere refuses, scans are idempotent.

``acks_late`` + ``task_reject_on_worker_lost``: a message is acknowledged only after its task
returns, and a worker process that dies mid-task has its message requeued, so a crash loses no
work; the duplicate execution that this allows is made harmless by the fenced lease. The
broker's visibility timeout (settings) outlasts any stage task by far, because stages never
wait inside a task: waits are durable timers.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from celery import shared_task
from django.conf import settings

from executions import retention
from executions.drift import drift_check_now, drift_watch_tick
from executions.history import history_json
from executions.lanes.reconciler import lanes_reconcile
from executions.models import DriftWatch
from executions.runtime import scans
from executions.runtime.holders import worker_identity
from executions.runtime.runner import stage_execute


@shared_task(
    name="executions.tasks.run_stage",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def run_stage(self: Any, run_id: str, stage: str, workflow: str = "") -> str:
    """Run ``stage`` of ``run_id`` and the stages after it that share its queue. ``workflow``
    is for whoever looks at the worker's tasks (the run says which it is)."""
    if settings.ALFRED_READ_ONLY:
        # A read-only instance changes nothing, its workers included. The message is dropped:
        # the run stays as it was, and a writable instance's recovery scan publishes it again.
        return "read_only"
    worker = worker_identity(self.request.hostname or "worker")
    outcome = stage_execute(run_id, stage, worker)
    # The stages after it ran here, or wait: a chain of stage messages (an older publisher's)
    # has nothing left to send.
    self.request.chain = None
    return outcome.value


@shared_task(name="executions.tasks.timers_scan", bind=True, ignore_result=True)
def timers_scan(self: Any) -> int:
    if settings.ALFRED_READ_ONLY:
        return 0  # a read-only instance runs no mutating background work
    fired = scans.timers_fire()
    if fired >= scans.BATCH:
        self.apply_async(queue="scanners")  # more are due: go on at once, in a new task
    return fired


@shared_task(name="executions.tasks.runs_recover", ignore_result=True)
def runs_recover() -> int:
    if settings.ALFRED_READ_ONLY:
        return 0
    return scans.runs_recover()


# How long one drift watch task checks before handing what is still due to a new task.
DRIFT_BUDGET_SECONDS = 5.0


@shared_task(name="executions.tasks.drift_watch", bind=True, ignore_result=True)
def drift_watch(self: Any) -> int:
    """Beat's drift watch (``ALFRED_DRIFT_TICK_SECONDS``; ``executions.drift``): checks what
    is due for up to ``DRIFT_BUDGET_SECONDS``, then the rest in a new task, so a scanner
    process is never held for long. Reads only; a read-only instance records nothing."""
    if settings.ALFRED_READ_ONLY or settings.ALFRED_DRIFT_PERIOD_SECONDS <= 0:
        return 0
    tick = drift_watch_tick(budget=DRIFT_BUDGET_SECONDS)
    if tick.more:
        # expires as beat's own do: a backlog never piles up chains of them in the queue
        self.apply_async(queue="scanners", expires=settings.ALFRED_DRIFT_TICK_SECONDS)
    return tick.checked


@shared_task(name="executions.tasks.drift_check", ignore_result=True)
def drift_check(execution_id: str) -> str:
    """One watched execution checked now, due or not (``manage.py alfred_drift check EXE``):
    on a worker, whose environment holds the providers' credentials."""
    if settings.ALFRED_READ_ONLY:
        return "read_only"
    try:
        return drift_check_now(execution_id)
    except DriftWatch.DoesNotExist:
        return "not_watched"


# How long one retention task runs its batches before handing the rest to a new task.
PRUNE_BUDGET_SECONDS = 5.0


@shared_task(name="executions.tasks.executions_prune", bind=True, ignore_result=True)
def executions_prune(self: Any, after: list[str] | None = None) -> int:
    """Beat's retention pass (``ALFRED_PRUNE_SCHEDULE_SECONDS``): batches for up to
    ``PRUNE_BUDGET_SECONDS``, then the rest in a new task from where this one stopped, so a
    scanner process is never held for long."""
    if settings.ALFRED_READ_ONLY:
        return 0
    archive = None
    if settings.ALFRED_PRUNE_ARCHIVE_DIR:
        archive = retention.HistoryArchive(Path(settings.ALFRED_PRUNE_ARCHIVE_DIR), history_json)
    report = retention.executions_prune(
        older_than=retention.retention_period(),
        actor="alfred:retention",
        archive=archive,
        batch=retention.BATCH,
        budget_seconds=PRUNE_BUDGET_SECONDS,
        after=None if not after else (datetime.fromisoformat(after[0]), after[1]),
    )
    if report.after is not None:
        cursor = [report.after[0].isoformat(), report.after[1]]
        self.apply_async(kwargs={"after": cursor}, queue="scanners")
    return report.counts["executions"]


# Named as when it lived in the lanes app: a name is the wire contract (beat's rows, routes).
@shared_task(name="lanes.tasks.reconcile", bind=True, ignore_result=True)
def lanes_reconcile_tick(self: Any, after: str = "") -> int:
    """Beat's reconciler tick: every lane with something to decide, a page at a time
    (compare-and-swap writes, SKIP LOCKED)."""
    if settings.ALFRED_READ_ONLY:
        return 0
    visited, more_after = lanes_reconcile(after=after)
    if more_after is not None:
        self.apply_async(kwargs={"after": more_after}, queue="scanners")  # the next page
    return visited

"""Celery tasks: thin — take ids, call the engine. Running one twice changes nothing: a stage
already done is a no-op, a run leased elsewhere refuses, scans are idempotent.

``acks_late`` + ``task_reject_on_worker_lost``: a message is acknowledged only after its task
returns, and a worker process that dies mid-task has its message requeued, so a crash loses no
work; the duplicate execution that this allows is made harmless by the fenced lease. The
broker's visibility timeout (settings) outlasts any stage task by far, because stages never
wait inside a task: waits are durable timers.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from executions.engine import scans
from executions.engine.runner import stage_execute, worker_identity


@shared_task(
    name="executions.tasks.run_stage",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def run_stage(self: Any, run_id: str, stage: str) -> str:
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


@shared_task(name="executions.tasks.webhook_relay", bind=True, ignore_result=True)
def webhook_relay(self: Any) -> int:
    """Send what is due (after an emit, and from beat as the scan). acks early: a relay that
    dies mid-attempt leaves claims that run out, and the next scan sends those again."""
    if settings.ALFRED_READ_ONLY:
        return 0
    from executions.events.relay import BATCH, deliveries_relay

    tried = deliveries_relay()
    if tried >= BATCH:
        self.apply_async(queue="webhooks")  # more are due: go on at once, in a new task
    return tried

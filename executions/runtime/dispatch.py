"""Publishing work to Celery. The database is the source of truth; a message is only a hint
that work is ready, so every publisher is safe to call twice (a stage already done is a no-op,
a run under a live lease refuses a duplicate) and a lost message is found again by the scans
(due timers, start_pending work, expired leases)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery import Celery, current_app
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from executions.models import Execution, Run, Stage, StageStatus, StartState
from executions.runtime.projections import start_state_set
from executions.runtime.registry import (
    STAGE_KILL_GRACE_SECONDS,
    stage_queue,
    stage_routing_declared,
    stage_time_limit,
)

log = logging.getLogger(__name__)

RUN_STAGE_TASK = "executions.tasks.run_stage"
# Timers nearer than this also get a Celery countdown (the hint); the scanner is the guarantee.
HINT_HORIZON_SECONDS = 60


def run_publish(
    run_id: str,
    app: Celery | None = None,
    countdown: float | None = None,
    stages: tuple[str, ...] | None = None,
    workflow: str | None = None,
) -> None:
    """Publish one ``run_stage`` message for the run's first remaining stage (the first of
    ``stages`` when the caller knows them) to that stage's queue: the worker that takes it
    runs the stages after it too (``stage_execute``), as long as they share its queue. The
    message names the workflow, for whoever looks at a worker's tasks (``celery inspect
    active``, Flower)."""
    app = app or current_app
    if stages is None or (workflow is None and stage_routing_declared()):
        found = (
            Stage.objects.filter(run_id=run_id)
            .exclude(status=StageStatus.SUCCEEDED)
            .order_by("position")
            .values_list("name", "run__execution__workflow")
            .first()
        )
        if found is None:
            return
        first, workflow = found
    elif not stages:
        return
    else:
        first = stages[0]
    limit = stage_time_limit(workflow, first)
    message = app.signature(
        RUN_STAGE_TASK,
        args=[run_id, first],
        kwargs={"workflow": workflow or ""},
        # a time-limited stage: Celery tells it at the limit, and kills it a grace later
        options=(
            {"soft_time_limit": limit, "time_limit": limit + STAGE_KILL_GRACE_SECONDS}
            if limit is not None
            else {}
        ),
        queue=stage_queue(workflow, first),
        immutable=True,
    )
    message.apply_async(countdown=countdown or 0)


def run_dispatch(
    run_id: str,
    app: Celery | None = None,
    stages: tuple[str, ...] | None = None,
    workflow: str | None = None,
) -> bool:
    """Publish now; a failure to publish a run that never started records ``start_failed``.
    Returns whether the run was published."""
    try:
        run_publish(run_id, app, stages=stages, workflow=workflow)
    except Exception as exc:
        log.exception("publishing run %s failed", run_id)
        run_start_failed(run_id, exc)
        return False
    return True


@dataclass
class Dispatch:
    """A publish scheduled for after the commit; once the commit is over, ``failed`` says
    whether it failed (and the execution's row then says ``start_failed``: an answer
    rendered from memory would contradict it)."""

    failed: bool = False


def run_dispatch_on_commit(
    run_id: str, stages: tuple[str, ...] | None = None, workflow: str | None = None
) -> Dispatch:
    dispatch = Dispatch()

    def publish() -> None:
        dispatch.failed = not run_dispatch(run_id, stages=stages, workflow=workflow)

    transaction.on_commit(publish)
    return dispatch


def run_wake(run_id: str) -> None:
    """Something the run may wait for happened (a signal, a child's end). In the caller's
    transaction, note that the run is owed a look — a stage suspending concurrently sees the
    count move and looks again; if the message below is lost, the recovery scan finds the
    owed wake — then publish after commit."""
    Run.objects.filter(pk=run_id).update(wakeups=F("wakeups") + 1, woken_at=timezone.now())
    transaction.on_commit(lambda: run_dispatch(run_id))


def run_wake_at(run_id: str, due: datetime, now: datetime) -> None:
    """The hint for a near timer: a delayed dispatch. Best effort; the scanner guarantees.
    ``now``: the database's time, as the caller knows it (``executions.runtime.clock``)."""
    delay = (due - now).total_seconds()
    if delay > HINT_HORIZON_SECONDS:
        return

    def publish() -> None:
        try:
            run_publish(run_id, countdown=max(0.0, delay))
        except Exception:
            log.warning("timer hint for run %s not published; the scanner will", run_id)

    transaction.on_commit(publish)


def run_start_failed(run_id: str, exc: BaseException) -> None:
    error: dict[str, Any] = {
        "code": "start_failed",
        "type": type(exc).__name__,
        "message": str(exc)[:500],
        "at": timezone.now().isoformat(),
    }
    with transaction.atomic():
        execution = (
            Execution.objects.select_for_update()
            .filter(current_run_id=run_id, start_state=StartState.START_PENDING)
            .first()
        )
        if execution is None:
            return  # already bound by a worker, or superseded by another run
        start_state_set(execution, StartState.START_FAILED, run_id=run_id, error=error)

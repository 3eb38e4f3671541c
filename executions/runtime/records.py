"""Inserting an execution with its first run, stages and ``execution.accepted`` event: shared
by acceptance (a request) and ``ctx.child`` (a parent's stage)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Model
from django.utils import timezone

from alfred.db import insert_statement, statements_run
from executions.events import EventType
from executions.models import (
    Execution,
    ExecutionStatus,
    Run,
    RunKind,
    Stage,
    StartState,
)
from executions.outbox import Event, event_key, events_emit_statement
from executions.runtime.registry import definition_get
from executions.runtime.tracing import trace_context_now


def execution_insert(
    *,
    execution_id: str | None = None,
    workflow: str,
    stages: tuple[str, ...],
    canonical: dict[str, Any],
    identity: str,
    principal: str,
    lane_key: str | None = None,
    lane_token: str | None = None,
    predecessor: Execution | None = None,
    parent_id: str | None = None,
    accepted_payload: dict[str, Any] | None = None,
    also: Sequence[Model] = (),
) -> tuple[Execution, list[Stage]]:
    """Insert in the caller's transaction; nothing is published here. The execution, its
    run, its stages and ``also`` (the caller's own new rows that belong with them: an
    acceptance's idempotency key) go in one statement, its accepted event in a second, both
    in one round trip. Returns the execution and its first run's stages, as inserted (an
    answer can show them without reading them back)."""
    execution = Execution(
        **({"id": execution_id} if execution_id else {}),
        workflow=workflow,
        input=canonical,
        dry_run=bool(canonical.get("dry_run", False)),
        logical_identity=identity,
        principal=principal,
        lane_key=lane_key,
        lane_token=lane_token,
        predecessor=predecessor,
        parent_id=parent_id,
        # The request's span (acceptance), or the parent's step (a child): its trace is this
        # execution's, whatever runs it later.
        trace_context=trace_context_now(),
    )
    run = run_new(execution, number=1, kind=RunKind.INITIAL)
    # The run's id is known before it exists: the FK is checked at commit (PostgreSQL
    # foreign keys are DEFERRABLE INITIALLY DEFERRED under Django), which saves an UPDATE.
    execution.current_run_id = run.id
    execution.current_run = run
    inserted = stage_rows(run, stages)
    # Through the outbox like every event: its NOTIFY and its webhook deliveries with it.
    accepted = Event(
        type=EventType.ACCEPTED,
        key=event_key(execution.id, "accepted"),
        payload={
            "workflow": workflow,
            "run": run.id,
            "predecessor": predecessor.id if predecessor else None,
            "parent": parent_id,
            **(accepted_payload or {}),
        },
    )
    statements_run(
        [
            insert_statement([execution, run, *inserted, *also]),
            events_emit_statement(execution.id, [accepted]),
        ]
    )
    return execution, inserted


def run_new(execution: Execution, *, number: int, kind: str) -> Run:
    """The run's deadline starts at its first claim (``runner``): time spent queued behind a
    lane does not count against it. It records the workflow's definition it starts under (a
    rollback runs the engine's own stages: none)."""
    definition = None if kind == RunKind.ROLLBACK else definition_get(execution.workflow)
    return Run(
        execution=execution,
        number=number,
        kind=kind,
        definition=definition.recorded() if definition is not None else None,
    )


def stages_insert(
    run: Run, stages: tuple[str, ...], done: dict[str, Any] | None = None
) -> list[Stage]:
    """The run's stages, pending; those in ``done`` (name → output persisted by an earlier
    run) start out succeeded, so a continuation skips them."""
    return Stage.objects.bulk_create(stage_rows(run, stages, done))


def stage_rows(
    run: Run, stages: tuple[str, ...], done: dict[str, Any] | None = None
) -> list[Stage]:
    """The run's stages, not saved yet (see :func:`stages_insert`)."""
    done = done or {}
    now = timezone.now()
    return [
        Stage(
            run=run,
            name=name,
            position=i,
            status="succeeded" if name in done else "pending",
            output=done.get(name),
            finished_at=now if name in done else None,
        )
        for i, name in enumerate(stages)
    ]


def run_again(
    execution: Execution,
    *,
    kind: str,
    stages: tuple[str, ...],
    done: dict[str, Any] | None = None,
) -> Run:
    """A new run on ``execution`` (locked by the caller): it becomes the current run, and the
    execution is queued again with its previous outcome cleared."""
    number = (execution.runs.order_by("-number").values_list("number", flat=True).first() or 0) + 1
    run = run_new(execution, number=number, kind=kind)
    run.save(force_insert=True)
    stages_insert(run, stages, done)
    execution.status = ExecutionStatus.QUEUED
    execution.start_state = StartState.START_PENDING
    execution.start_error = execution.error = execution.result = None
    execution.finished_at = None
    execution.current_run = run
    execution.save(
        update_fields=[
            "status",
            "start_state",
            "start_error",
            "error",
            "result",
            "finished_at",
            "current_run",
            "updated_at",
        ]
    )
    return run

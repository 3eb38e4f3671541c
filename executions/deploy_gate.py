"""The deploy gate's reads (``manage.py alfred_deploy_check``; docs/deploy.md, "The deploy
gate"): which active runs the code about to be deployed would strand.

Each run is run only by the definition it started under (``Run.definition``;
``executions.runtime.registry``). A deploy whose workflow neither is that definition nor keeps it
in ``previous`` leaves such a run to fail ``definition_changed`` at its next wake: a paused
approval, a timer, a child's end. The gate runs in the new code's process (the migration step
of ``make run``, the Helm pre-upgrade Job, compose's web) before ``migrate``, so it asks the
new code's registry about the rows the old code wrote.

It runs before the migrations, against a schema that may be older than this code's models: it
reads only columns that have existed since runs record their definition (migration 0011), and
a database without them (a fresh install, or one from before that record) strands nothing: a
run without a record is run by the current definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from executions.catalog import workflows_all
from executions.models import ACTIVE_STATUSES, Execution, Run, RunKind
from executions.runtime.registry import definition_get, definition_served


@dataclass(frozen=True)
class StrandedRun:
    """An active execution whose current run this code would not run."""

    execution_id: str
    workflow: str
    status: str
    run_number: int
    started_under: dict[str, Any] | None
    current: dict[str, Any] | None  # None: this code has no workflow of that name

    def describe(self) -> str:
        under = _described(self.started_under)
        now = (
            f"this code: version {self.current['version']}, without version "
            f"{(self.started_under or {}).get('version')}"
            if self.current is not None
            else "this code has no such workflow"
        )
        return (
            f"{self.execution_id} {self.workflow} {self.status}: run {self.run_number} "
            f"started under {under}; {now}"
        )


@dataclass(frozen=True)
class DroppedVersion:
    """A workflow's version that the last run recorded and this code no longer serves: a web
    process still on the old code accepts requests under it until the rollout replaces it,
    and this code's workers fail them ``definition_changed``."""

    workflow: str
    recorded: dict[str, Any]
    current: dict[str, Any]


def _described(recorded: dict[str, Any] | None) -> str:
    if recorded is None:
        return "no recorded definition"
    return f"version {recorded.get('version')} ({' → '.join(recorded.get('stages') or ())})"


def _schema_ready() -> bool:
    """Whether the tables the gate reads exist with the runs' definition column."""
    tables = set(connection.introspection.table_names())
    if not {Execution._meta.db_table, Run._meta.db_table} <= tables:
        return False
    with connection.cursor() as cursor:
        columns = connection.introspection.get_table_description(cursor, Run._meta.db_table)
    return "definition" in {column.name for column in columns}


def runs_stranded() -> tuple[int, list[StrandedRun]]:
    """How many executions are active, and those whose current run this code would not run
    (oldest first)."""
    if not _schema_ready():
        return 0, []
    rows = (
        Execution.objects.filter(status__in=sorted(ACTIVE_STATUSES))
        .order_by("created_at")
        .values_list("id", "workflow", "status", "current_run__number", "current_run__definition")
    )
    names = {w.name for w in workflows_all()}
    active = 0
    stranded = []
    for execution_id, workflow, status, number, recorded in rows.iterator():
        active += 1
        if definition_served(workflow, recorded) is not None:
            continue
        stranded.append(
            StrandedRun(
                execution_id=execution_id,
                workflow=workflow,
                status=status,
                run_number=number or 0,
                started_under=recorded,
                current=definition_get(workflow).recorded() if workflow in names else None,
            )
        )
    return active, stranded


def versions_dropped() -> list[DroppedVersion]:
    """For each workflow, the definition its newest run recorded, when this code no longer
    serves it: what runs accepted by web processes not yet upgraded will be recorded under.
    A warning, not a refusal: with no run in flight nothing is stranded yet, and the newest
    record stays the old one until a run of the new version is made."""
    if not _schema_ready():
        return []
    dropped = []
    for workflow in workflows_all():
        recorded = (
            Run.objects.filter(execution__workflow=workflow.name, definition__isnull=False)
            .exclude(kind=RunKind.ROLLBACK)
            .order_by("-id")  # ids sort by creation time: the primary key's index, backwards
            .values_list("definition", flat=True)
            .first()
        )
        if recorded is not None and definition_served(workflow.name, recorded) is None:
            current = definition_get(workflow.name).recorded()
            dropped.append(DroppedVersion(workflow.name, recorded, current))
    return dropped

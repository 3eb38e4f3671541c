"""An execution's whole history as one JSON document: the admin's download and what a prune
archives before it deletes (``executions.retention``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Prefetch

from executions import selectors
from executions.models import AuditEntry, Execution, Hook, Run, Stage, StepReceipt, Timer

# What a run recorded, each in its order: loaded with the runs, one query each.
RUN_RECORDS = (
    Prefetch("stages", queryset=Stage.objects.order_by("position")),
    Prefetch("receipts", queryset=StepReceipt.objects.order_by("created_at", "pk")),
    Prefetch("timers", queryset=Timer.objects.order_by("created_at", "pk")),
    Prefetch("hooks", queryset=Hook.objects.order_by("created_at", "pk")),
)


def _fields(obj: Any, names: Iterable[str]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def execution_history(execution: Execution) -> dict[str, Any]:
    """Everything recorded about the execution, in one document: the execution, every run
    with its stages, receipts, waits and checkpoints, every event and the audit entries that
    name it. Values are the stored ones (JSON as recorded, times in UTC)."""
    runs = execution.runs.order_by("number").prefetch_related(*RUN_RECORDS)
    execution_fields = [f.attname for f in Execution._meta.concrete_fields]
    return {
        "execution": _fields(execution, execution_fields),
        "lane": None
        if (lane := selectors.execution_lane(execution)) is None
        else {"key": lane.key, "role": lane.role, "state": lane.state, "position": lane.position},
        "children": list(execution.children.order_by("id").values_list("id", flat=True)),
        "runs": [
            {
                **_fields(run, [f.attname for f in Run._meta.concrete_fields]),
                "stages": [
                    _fields(s, ["name", "position", "status", "output", "error"])
                    | {"started_at": s.started_at, "finished_at": s.finished_at}
                    for s in run.stages.all()
                ],
                "receipts": [
                    _fields(
                        r,
                        [
                            "stage",
                            "step_key",
                            "sequence",
                            "kind",
                            "status",
                            "attempts",
                            "output",
                            "mutation",
                            "error",
                            "fence",
                            "created_at",
                        ],
                    )
                    for r in run.receipts.all()
                ],
                "waits": [
                    _fields(
                        t,
                        ["stage", "key", "purpose", "status", "due_at", "topics"],
                    )
                    | {"created_at": t.created_at, "fired_at": t.fired_at}
                    for t in run.timers.all()
                ],
                "checkpoints": [
                    _fields(
                        h,
                        ["id", "stage", "name", "operator", "status", "payload", "expires_at"],
                    )
                    | {"created_at": h.created_at, "resolved_at": h.resolved_at}
                    for h in run.hooks.all()
                ],
            }
            for run in runs
        ],
        "events": [
            _fields(e, ["sequence", "key", "type", "payload", "created_at"])
            for e in execution.events.order_by("sequence")
        ],
        "audit": [
            _fields(a, ["created_at", "actor", "action", "reason", "data"])
            for a in AuditEntry.objects.filter(
                target_type="execution", target_id=execution.pk
            ).order_by("created_at", "pk")
        ],
    }


def history_json(execution: Execution) -> str:
    return json.dumps(
        execution_history(execution), indent=2, ensure_ascii=False, default=_json_default
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)

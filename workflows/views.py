"""How the executions of the workflows are shown: the plan a pending approval waits on.

The engine draws an :class:`~executions.catalog.ApprovalView` as it is and knows no plan's
shape; the shapes are here, beside the workflows that record them. A plan is read from the
checkpoint's payload as it was stored, so every view takes what it finds and never raises:
an approval recorded by an older version still shows (its payload, at least).

Two shapes are recorded today:

- **record sets** (add-subdomain's approval and every Route53 rollback's confirmation):
  ``{"zone", "name", "before": [Record…], "after": [Record…], "changes": [{"action",
  "record"}…]}``, each ``Record`` as ``providers.aws.route53.model.Record`` writes it. Shown as
  one row per record set (name, type, set identifier) that either side holds, before → after,
  and the batch;
- **an alias** (a Lambda rollback's confirmation): ``{"function", "alias", "before":
  {"version"}, "after": {"version"}}``. Shown as facts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from executions.catalog import ApprovalView, Cell, PlanRow

_RECORD_HEAD = (
    "Name",
    "Type",
    "TTL before",
    "Values / alias target before",
    "TTL after",
    "Values / alias target after",
    "Change",
)


def approval_view(payload: Mapping[str, Any]) -> ApprovalView:
    """The view of a pending approval's ``payload`` by the shape of its plan."""
    plan = payload.get("plan")
    if not isinstance(plan, Mapping):
        return ApprovalView()
    if isinstance(plan.get("before"), list) or isinstance(plan.get("after"), list):
        return records_view(plan)
    if plan.get("function") or plan.get("alias"):
        return alias_view(plan)
    return ApprovalView()


def alias_view(plan: Mapping[str, Any]) -> ApprovalView:
    def version(side: Any) -> str:
        return str(side.get("version", "?")) if isinstance(side, Mapping) else "?"

    return ApprovalView(
        facts=(
            ("Function", str(plan.get("function", ""))),
            ("Alias", str(plan.get("alias", ""))),
            ("Version", f"{version(plan.get('before'))} → {version(plan.get('after'))}"),
        )
    )


def records_view(plan: Mapping[str, Any]) -> ApprovalView:
    changes = plan.get("changes")
    batch = [c for c in changes if isinstance(c, Mapping)] if isinstance(changes, list) else []
    zone, name = str(plan.get("zone") or ""), str(plan.get("name") or "")
    return ApprovalView(
        facts=(("Record", f"{name} in zone {zone}"),) if zone or name else (),
        caption="Record sets: before → after",
        head=_RECORD_HEAD,
        rows=tuple(_record_row(row) for row in plan_rows(plan)),
        batch_caption="The change batch (one atomic Route53 change):",
        batch=tuple(
            f"{c.get('action')} {c['record'].get('name')} {c['record'].get('type')}"
            for c in batch
            if isinstance(c.get("record"), Mapping)
        ),
    )


def _record_row(row: Mapping[str, Any]) -> PlanRow:
    cells = [Cell((row["name"],)), Cell((row["type"],))]
    for side in ("before", "after"):
        shown = row[side]
        if shown is None:
            cells += [Cell(("—",), css=f"{side}-ttl"), Cell(("(none)",), css=f"{side}-data")]
            continue
        deleted = " deleted" if side == "before" and row["change"] == "deleted" else ""
        cells += [
            Cell((shown["ttl"] or "—",), css=f"{side}-ttl"),
            Cell(
                tuple(shown["data"]) or ("—",),
                note=f"routing {shown['routing']}" if shown["routing"] else "",
                css=f"{side}-data{deleted}",
            ),
        ]
    cells.append(Cell((row["change"],), css=f"change-{row['change']}"))
    return PlanRow(tuple(cells), change=row["change"])


def _record_cell(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """One Route53 record set (``providers.aws.route53.model.Record``) as the plan shows it:
    its TTL, and its values or alias target, and any routing beside them."""
    if record is None:
        return None
    alias = record.get("alias")
    if isinstance(alias, Mapping):
        health = ", evaluates target health" if alias.get("evaluate_target_health") else ""
        data = [f"alias → {alias.get('dns_name')} (zone {alias.get('hosted_zone_id')}{health})"]
    else:
        values = record.get("values") or []
        data = [str(value) for value in (values if isinstance(values, list) else [values])]
    routing = record.get("routing") or {}
    if record.get("set_identifier"):
        routing = {"SetIdentifier": record["set_identifier"], **routing}
    return {
        "ttl": "" if record.get("ttl") is None else str(record["ttl"]),
        "data": data,
        "routing": json.dumps(routing, sort_keys=True, default=str) if routing else "",
    }


def plan_rows(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The record sets of a plan (``{"before": [...], "after": [...]}``), one row per set
    (name, type, set identifier) that either side holds: its cell before and after (None where
    it is absent) and what the plan does to it."""
    sides: dict[str, dict[tuple[str, str, str], Mapping[str, Any]]] = {}
    order: list[tuple[str, str, str]] = []
    for side in ("before", "after"):
        records = plan.get(side)
        sides[side] = {}
        for record in records if isinstance(records, list) else []:
            if not isinstance(record, Mapping):
                continue
            key = (
                str(record.get("name", "")),
                str(record.get("type", "")),
                str(record.get("set_identifier") or ""),
            )
            sides[side][key] = record
            if key not in order:
                order.append(key)
    rows = []
    for key in order:
        before, after = sides["before"].get(key), sides["after"].get(key)
        if before is None:
            change = "added"
        elif after is None:
            change = "deleted"
        else:
            change = "unchanged" if before == after else "replaced"
        rows.append(
            {
                "name": key[0],
                "type": key[1],
                "before": _record_cell(before),
                "after": _record_cell(after),
                "change": change,
            }
        )
    return rows

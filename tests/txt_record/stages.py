"""set-txt-record's stages: ``plan`` reads, ``apply`` writes one batch (after an operator's
approval when it replaces values), ``verify`` reads back. Each takes the typed context and
returns a TypedDict: mypy checks the fields it reads and the keys it returns."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from executions.runtime.errors import FatalError
from executions.runtime.stage import StageContext
from tests.txt_record.input import SetTxtRecordInput
from workflows.steps import route53
from workflows.steps.planning import change_summary, operator_consent, plan_hash
from workflows.watch import Finding, Recorded

Ctx = StageContext[SetTxtRecordInput]


class Plan(TypedDict):
    zone: dict[str, Any]
    name: str
    before: list[str]  # the TXT values there now ([]: none)
    after: list[str]
    existing: list[dict[str, Any]]  # the TXT record set there now, as Route53 holds it
    changes: list[dict[str, Any]]
    plan_hash: str


class Applied(TypedDict):
    changed: bool
    plan_hash: str
    simulated: bool


class Verified(TypedDict):
    verified: bool | str
    values: list[str]


def _proposal(state: dict[str, Any], name: str, value: str) -> Plan:
    existing = [r for r in state["records"] if r["type"] == "TXT"]
    wanted: dict[str, Any] = {
        "name": name,
        "type": "TXT",
        "ttl": 300,
        "values": [f'"{value}"'],
        "alias": None,
        "set_identifier": None,
        "routing": {},
    }
    before = [v for r in existing for v in r["values"]]
    changes = [] if existing == [wanted] else [{"action": "UPSERT", "record": wanted}]
    return {
        "zone": state["zone"],
        "name": name,
        "before": before,
        "after": wanted["values"],
        "existing": existing,
        "changes": changes,
        "plan_hash": plan_hash(proposed=wanted, existing=existing),
    }


def plan(ctx: Ctx) -> Plan:
    state = ctx.step(
        "read", route53.read_state, ctx.input.zone, ctx.input.name, dry_run=ctx.dry_run
    )
    return _proposal(state, ctx.input.name, ctx.input.value)


def apply(ctx: Ctx) -> Applied:
    current = ctx.output_of(plan)
    checkpoint = 0
    # Replacing what someone else put there needs consent, bound to this exact plan; a plan
    # that changed after the approval (the record moved meanwhile) needs its own.
    while current["before"] and current["changes"] and not ctx.dry_run:
        operator_consent(
            ctx,
            "approve",
            plan_hash=current["plan_hash"],
            payload={
                "plan": {k: current[k] for k in ("zone", "name", "before", "after", "changes")}
                | {"zone": current["zone"]["name"]},
                "summary": change_summary(
                    current["zone"]["name"], current["name"], current["changes"], current["before"]
                ),
                "force_required": False,
            },
        )
        state = ctx.step(
            f"reread:{checkpoint}",
            route53.read_state,
            ctx.input.zone,
            ctx.input.name,
            dry_run=False,
        )
        fresh = _proposal(state, ctx.input.name, ctx.input.value)
        if fresh["plan_hash"] == current["plan_hash"]:
            break
        checkpoint, current = checkpoint + 1, fresh
    if not current["changes"]:
        return {"changed": False, "plan_hash": current["plan_hash"], "simulated": False}
    receipt, _ = route53.send_and_wait(
        ctx,
        zone=current["zone"],
        changes=current["changes"],
        existing=current["existing"],
        operation=f"{ctx.execution_id} set-txt-record {current['name']}",
    )
    return {
        "changed": True,
        "plan_hash": current["plan_hash"],
        "simulated": bool(receipt.get("simulated")),
    }


def verify(ctx: Ctx) -> Verified:
    planned, applied = ctx.output_of(plan), ctx.output_of(apply)
    if applied["simulated"]:
        return {"verified": "simulated", "values": planned["after"]}
    found = ctx.step(
        "read", route53.read_records, planned["zone"]["id"], [planned["name"]], dry_run=False
    )
    values = [v for r in found if r["type"] == "TXT" for v in r["values"]]
    if values != planned["after"]:
        raise FatalError(f"{planned['name']} does not hold the value", code="verify_failed")
    return {"verified": True, "values": values}


def drift(rec: Recorded[SetTxtRecordInput]) -> list[Finding]:
    """The drift watch's check: the TXT values at the name, read again (reads only)."""
    planned = rec.output_of(plan)
    left = rec.output_of(verify)["values"]
    found = route53.read_records(planned["zone"]["id"], [planned["name"]], dry_run=True)
    values = [v for r in found if r["type"] == "TXT" for v in r["values"]]
    return [] if values == left else [Finding(f"TXT {planned['name']}", left, values or None)]

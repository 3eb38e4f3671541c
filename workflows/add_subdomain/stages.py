"""add-subdomain's stages (docs/workflows.md): ``plan`` reads, ``apply`` makes ONE change batch
(after an operator's approval of the exact plan when it replaces DNS), ``verify`` reads the alias
back.

The plan aliases the name to what the zone's apex aliases (its A/AAAA alias records' targets):

- nothing at the name of those types (and no CNAME): the alias records are created, no
  operator;
- the alias records already there, exactly: nothing to do, no operator;
- a CNAME, or an A/AAAA that is not that alias (plain values, another target, a routing
  policy): the plan replaces them, and waits for an operator to approve its hash. After the
  approval Route53 is read again: the same hash applies; a different one (someone changed the
  name meanwhile) opens a new checkpoint for the new plan, so consent given for one state is
  never applied to another. A plan unapproved for ``ALFRED_APPROVAL_TTL_SECONDS`` (7 days)
  fails the execution with ``approval_expired``.

A batch over the blast-radius thresholds (docs/workflows.md) needs the approval to say ``force``
(the pending approval says ``force_required``); a dry run of one fails ``blast_radius``, as
the real run would without force.

Other record types at the name (TXT, MX, ...) are left as they are. A dry run plans from the
real zone, simulates the batch, pauses for nobody and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from executions.runtime.errors import FatalError, ReadinessFailure
from executions.runtime.stage import StageContext
from workflows.add_subdomain.input import AddSubdomainInput
from workflows.steps import route53
from workflows.steps.blast_radius import blast_radius_assess
from workflows.steps.planning import change_summary, operator_consent, plan_hash
from workflows.watch import Finding, Recorded

# What each stage is given: ctx.input is the typed input.
Ctx = StageContext[AddSubdomainInput]

ALIAS_TYPES = ("A", "AAAA")

# A record set as workflows.steps.route53 reads and writes it (name, type, ttl, values, alias,
# set_identifier, routing), and one change of a batch ({"action", "record"}).
Record = dict[str, Any]
Change = dict[str, Any]


class Proposal(TypedDict):
    """What ``plan`` proposes (and a re-read after an approval proposes again): the zone, the
    name, its record sets before and after, the batch between them, and the plan's hash."""

    zone: dict[str, Any]  # id, name, record_set_count
    name: str
    before: list[Record]
    after: list[Record]
    changes: list[Change]
    approval_required: bool
    blast_radius: dict[str, Any]
    plan_hash: str


class Applied(TypedDict):
    changed: bool
    plan_hash: str
    after: list[Record]
    change: NotRequired[dict[str, Any]]  # Route53's change (id, status), when a batch was sent
    simulated: NotRequired[bool]


class Verified(TypedDict):
    verified: bool | Literal["simulated"]
    records: list[Record]


def proposal(name: str, state: Mapping[str, Any]) -> Proposal:
    """The plan for ``name`` from what ``route53.read_state`` read (pure: the stage's code
    and the re-read after an approval compute it the same way)."""
    apex = state["apex_alias"]
    desired = [
        {
            "name": name,
            "type": record["type"],
            "ttl": None,
            "values": [],
            "alias": record["alias"],
            "set_identifier": None,
            "routing": {},
        }
        for record in sorted(apex, key=lambda r: r["type"])
    ]
    existing = state["records"]
    replaced = [
        r
        for r in existing
        if r["type"] == "CNAME" or (r["type"] in ALIAS_TYPES and r not in desired)
    ]
    changes: list[dict[str, Any]] = [
        {"action": "DELETE", "record": r}
        for r in replaced
        if r["type"] == "CNAME"
        or r.get("set_identifier")
        or r["type"] not in {d["type"] for d in desired}
    ]
    changes += [{"action": "UPSERT", "record": d} for d in desired if d not in existing]
    after = route53.post_state(existing, changes)
    counts, refusal = blast_radius_assess(
        zone=state["zone"]["name"],
        record_set_count=state["zone"]["record_set_count"],
        changes=changes,
        existing=existing,
    )
    if refusal is not None and not refusal.forceable:
        raise refusal
    return {
        "zone": state["zone"],
        "name": name,
        "before": existing,
        "after": after,
        "changes": changes,
        "approval_required": bool(replaced) or refusal is not None,
        "blast_radius": {**counts, "force_required": refusal is not None},
        "plan_hash": plan_hash(
            proposed={"zone": state["zone"]["id"], "name": name, "records": after},
            existing={"records": existing},
        ),
    }


def plan(ctx: Ctx) -> Proposal:
    zone, name = ctx.input.zone, ctx.input.subdomain
    state = ctx.step("read", route53.read_state, zone, name, dry_run=ctx.dry_run)
    if not state["apex_alias"]:
        raise ReadinessFailure(
            f"the apex of {zone} has no A or AAAA alias to point {name} at",
            code="apex_alias_missing",
            checks=[{"name": f"alias at the apex of {zone}", "ok": False}],
        )
    return proposal(name, state)


def apply(ctx: Ctx) -> Applied:
    current = ctx.output_of(plan)
    checkpoint, forced = 0, False
    while current["approval_required"] and not ctx.dry_run:
        signal = operator_consent(
            ctx,
            "approve",
            plan_hash=current["plan_hash"],
            payload={
                "plan": _shown(current),
                "summary": change_summary(
                    current["zone"]["name"], current["name"], current["changes"], current["before"]
                ),
                "force_required": current["blast_radius"]["force_required"],
            },
        )
        state = ctx.step(
            f"reread:{checkpoint}",
            route53.read_state,
            current["zone"]["name"],
            current["name"],
            dry_run=False,
        )
        fresh = proposal(current["name"], state)
        if fresh["plan_hash"] == current["plan_hash"]:
            forced = bool(signal.get("force"))
            break
        checkpoint += 1
        current = fresh  # changed since it was approved: the new plan needs its own consent
    if not current["changes"]:
        return {"changed": False, "plan_hash": current["plan_hash"], "after": current["after"]}
    receipt, handle = route53.send_and_wait(
        ctx,
        zone=current["zone"],
        changes=current["changes"],
        existing=current["before"],
        operation=f"{ctx.execution_id} add-subdomain {current['name']}",
        force=forced,  # the guard refuses a batch over the thresholds unless approved so
    )
    return {
        "changed": True,
        "plan_hash": current["plan_hash"],
        "after": current["after"],
        "change": {"id": handle.get("id"), "status": handle.get("status")},
        "simulated": bool(receipt.get("simulated")),
    }


def verify(ctx: Ctx) -> Verified:
    applied = ctx.output_of(apply)
    if applied.get("simulated"):
        return {"verified": "simulated", "records": applied["after"]}
    name = ctx.input.subdomain
    zone = ctx.output_of(plan)["zone"]
    found = ctx.step("read", route53.read_records, zone["id"], [name], dry_run=ctx.dry_run)
    expected = [r for r in applied["after"] if r["type"] in ALIAS_TYPES]
    differences = route53.drift(expected, [r for r in found if r["type"] in ALIAS_TYPES])
    if differences:
        raise FatalError(
            f"{name} does not serve the alias after the change",
            code="verify_failed",
            differences=differences,
        )
    return {"verified": True, "records": expected}


def drift(rec: Recorded[AddSubdomainInput]) -> list[Finding]:
    """The drift watch's check (``workflows.watch``): the alias records verify saw, read
    again; each A/AAAA set at the name that is not exactly as the execution left it (changed,
    deleted, or one added beside it)."""
    name = rec.input.subdomain
    zone = rec.output_of(plan)["zone"]
    found = route53.read_records(zone["id"], [name], dry_run=True)
    return [
        Finding(f"{d['type']} {d['name']}", d["expected"], d["found"])
        for d in route53.drift(
            rec.output_of(verify)["records"], [r for r in found if r["type"] in ALIAS_TYPES]
        )
    ]


def _shown(proposed: Proposal) -> dict[str, Any]:
    """The plan as an operator reads it: each record set before → after."""
    return {
        "zone": proposed["zone"]["name"],
        "name": proposed["name"],
        "before": proposed["before"],
        "after": proposed["after"],
        "changes": proposed["changes"],
    }

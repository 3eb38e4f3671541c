"""onboard-domain's stages: its own ``plan`` and ``hosted_zone``, then add-domain's
``certificate``, ``dns``, ``routing``, ``booking`` and ``verify`` — the same functions
(``add_domain/stages.py``), which take the zone from the ``hosted_zone`` stage; and its drift
check, add-domain's ``drift``.

- **plan** checks that no public hosted zone of that name exists (one does:
  ``hosted_zone_exists`` — add-domain serves a domain whose zone exists; the zone this
  execution created, found again in a run after a crash, is fine), then freezes what
  add-domain's plan freezes (the edge, the entries present, the applications).
- **hosted_zone** creates the zone with the caller reference ``alfred-<execution id>``: a
  replay after a lost CreateHostedZone response finds the zone the first request made. Its
  NS delegation is reported as assistance (``registrar_delegation``): the name servers a
  person must set at the domain's registrar.

Rollback undoes add-domain's part (newest first, the child certificate last of it), then
deletes the hosted zone — only if this execution created it and it holds nothing but its NS
and SOA (anything else: ``drifted``, and the zone stays).
"""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict

from executions.runtime.stage import StageContext
from workflows.add_domain.stages import (
    PlatformPlan,
    booking,
    certificate,
    dns,
    drift,
    plan_platform,
    routing,
    verify,
)
from workflows.onboard_domain.input import OnboardDomainInput
from workflows.steps import hosted_zones

# What each stage is given: ctx.input is the typed input.
Ctx = StageContext[OnboardDomainInput]

__all__ = ["booking", "certificate", "dns", "drift", "hosted_zone", "plan", "routing", "verify"]


def plan(ctx: Ctx) -> PlatformPlan:
    domain = ctx.input.domain
    found = ctx.step("zone", hosted_zones.find_zone, domain, ctx.execution_id, dry_run=ctx.dry_run)
    return plan_platform(ctx, zone=found["zone"], zone_stage="hosted_zone")


class HostedZone(TypedDict):
    zone: dict[str, Any]  # id, name, name_servers
    recovered: bool  # found after a lost answer, not created twice
    simulated: bool
    assistance: NotRequired[list[dict[str, Any]]]


def hosted_zone(ctx: Ctx) -> HostedZone:
    domain = ctx.input.domain
    create = hosted_zones.simulate_zone if ctx.dry_run else hosted_zones.create_zone
    receipt = ctx.step("create", create, name=domain, execution_id=ctx.execution_id, mutation=True)
    zone = receipt["after"]
    out: HostedZone = {
        "zone": zone,
        "recovered": bool(receipt.get("recovered")),
        "simulated": bool(receipt.get("simulated")),
    }
    if not ctx.dry_run:
        out["assistance"] = [
            {
                "kind": "registrar_delegation",
                "summary": f"Delegate {domain} to its new Route53 hosted zone",
                "zone": zone["id"],
                "name_servers": zone["name_servers"],
                "action": (
                    f"At the registrar of {domain}, set its name servers to "
                    + ", ".join(zone["name_servers"])
                    + ". Until then the records Alfred writes are not what the world sees, "
                    "and ACM cannot validate the certificate."
                ),
            }
        ]
    return out

"""Route53 hosted zones for onboard-domain: find out whether the domain has one (plan), create
it with a caller reference derived from the execution (with its receipt), and delete it again
— only the zone Alfred created, and only while it holds nothing but its NS and SOA.

A creation's receipt: ``resource = aws.route53.hosted_zone``, ``action = create``, ``before``
None, ``after`` the zone (id, name, name servers), ``undo`` its id, name and caller
reference. The caller reference is ``alfred-<execution id>``: a replay after a lost
CreateHostedZone response (or a crash before the receipt) finds the zone the first request
made, never a second zone — and it proves the zone is the execution's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from executions.runtime.errors import FatalError, ReadinessFailure
from executions.runtime.stage import StageContext
from providers.errors import NotFound, ProviderError
from providers.factory import Providers
from workflows.steps.compensations import Drifted, mutation
from workflows.steps.errors import engine_error, provider_errors
from workflows.steps.route53 import route53

RESOURCE = "aws.route53.hosted_zone"
CREATE = mutation(RESOURCE, "create")
APEX_ONLY = 2  # a zone just created holds its NS and SOA record sets


def caller_reference(execution_id: str) -> str:
    return f"alfred-{execution_id}"


def _shown(zone: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": zone["id"],
        "name": zone["name"],
        "record_set_count": zone["record_set_count"],
        "name_servers": list(zone["name_servers"]),
    }


def find_zone(name: str, execution_id: str, *, dry_run: bool) -> dict[str, Any]:
    """Plan's read: is there a public hosted zone named ``name``? One that this execution
    created (its caller reference: a run again after a crash) is fine; any other is a
    readiness failure ``hosted_zone_exists`` (add-domain serves a domain whose zone exists)."""
    adapter = route53(dry_run=dry_run)
    try:
        zone = adapter.zone(name)
    except NotFound:
        return {"zone": None}
    except ProviderError as exc:
        raise engine_error(exc) from exc
    if zone["caller_reference"] != caller_reference(execution_id):
        raise ReadinessFailure(
            f"a hosted zone named {name} exists already ({zone['id']}); add-domain serves a "
            "domain whose zone exists",
            code="hosted_zone_exists",
            checks=[{"name": f"no hosted zone named {name}", "ok": False, "detail": zone["id"]}],
        )
    return {"zone": _shown(zone)}


@CREATE
def create_zone(*, name: str, execution_id: str) -> dict[str, Any]:
    """CreateHostedZone, its caller reference the execution's: safe to run again after any
    failure without a second zone."""
    reference = caller_reference(execution_id)
    with provider_errors():
        handle = (
            Providers(settings.ALFRED_PROVIDERS)
            .route53()
            .create_zone(
                name, caller_reference=reference, comment=f"alfred onboard-domain {execution_id}"
            )
        )
    zone = _shown(handle["observations"]["zone"])
    return CREATE.receipt(
        undo={"zone_id": zone["id"], "name": zone["name"], "caller_reference": reference},
        before=None,
        after=zone,
        handle={k: v for k, v in handle.items() if k != "observations"},
        recovered=bool(handle["observations"].get("recovered")),
    )


def simulate_zone(*, name: str, execution_id: str) -> dict[str, Any]:
    """What :func:`create_zone` would record, without a call: the dry run's zone."""
    zone: dict[str, Any] = {
        "id": None,
        "name": name,
        "record_set_count": APEX_ONLY,
        "name_servers": [],
    }
    return {
        **CREATE.receipt(
            undo={"zone_id": None, "name": name, "caller_reference": None},
            before=None,
            after=zone,
        ),
        "simulated": True,
    }


def read_zone(zone_id: str) -> dict[str, Any] | None:
    """The zone with its caller reference and its apex record types, or None if it is gone."""
    adapter = route53(dry_run=False)
    try:
        zone = adapter.zone_by_id(zone_id)
    except NotFound:
        return None
    except ProviderError as exc:
        raise engine_error(exc) from exc
    with provider_errors():
        apex = adapter.records(zone_id, zone["name"])
    return {
        **_shown(zone),
        "caller_reference": zone["caller_reference"],
        "apex_types": sorted({r["type"] for r in apex}),
    }


def delete_zone(zone_id: str) -> dict[str, Any]:
    with provider_errors():
        handle = Providers(settings.ALFRED_PROVIDERS).route53().delete_zone(zone_id)
    return {"deleted": zone_id, "already_absent": handle["observations"]["already_absent"]}


@CREATE.undo
def undo_create(ctx: StageContext, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """Delete the zone Alfred created — if it is still the one its caller reference names and
    holds nothing but its NS and SOA; otherwise ``drifted`` (someone put records in it, or
    the id names another zone), and it stays for an operator."""
    zone_id = receipt["undo"].get("zone_id")
    if receipt.get("simulated") or not zone_id:
        return {"deleted": None, "simulated": True}
    current = ctx.step("read", read_zone, zone_id)
    if current is None:
        return {"deleted": zone_id, "already_absent": True}
    if current["caller_reference"] != receipt["undo"]["caller_reference"]:
        raise FatalError(
            f"hosted zone {zone_id} was not created by this execution; not deleted",
            code="not_owned",
            zone=zone_id,
        )
    if current["record_set_count"] > APEX_ONLY or set(current["apex_types"]) - {"NS", "SOA"}:
        raise Drifted(
            RESOURCE,
            [
                {
                    "zone": zone_id,
                    "expected": {"record_set_count": APEX_ONLY, "apex_types": ["NS", "SOA"]},
                    "found": {
                        "record_set_count": current["record_set_count"],
                        "apex_types": current["apex_types"],
                    },
                }
            ],
        )
    return ctx.step("delete", delete_zone, zone_id)

"""add-certificate's stages (docs/workflows.md): ``plan`` reads, ``request`` asks ACM for ONE
certificate (skipped when adopting ``certificate_arn``), ``validate_dns`` writes its validation
CNAMEs as ONE Route53 batch per zone, ``await_issued`` waits durably for ISSUED, ``verify``
reads the certificate and the records back.

- **plan** finds the longest public hosted zone holding the domain and each alternative name
  (none: readiness failure ``hosted_zone_missing`` naming it, which frees the lane). With
  ``certificate_arn`` the certificate must exist, cover every name (a wildcard covers one
  label, as ACM matches) and be ISSUED or PENDING_VALIDATION (``certificate_mismatch``
  otherwise); the zones of its own names are found too, so its records can be written.
- **request**'s idempotency token derives from the execution: a replay after a lost response
  finds the same certificate, so an execution never owns two. Tagged with the execution id
  and the tickets.
- **validate_dns** waits (durably) until ACM has published every validation record, then,
  per zone, reads the names and sends exact CREATEs of the CNAMEs not already served, through
  the kit's batch (blast-radius guard, receipt, compensation). An identical record already
  there is left alone and not owned; anything else at such a name fails
  ``validation_record_conflict``. Its undo deletes only what the batch created, and not while
  the certificate is in use (it needs its records to renew). No INSYNC wait: ACM's issuance
  is the observation that matters, and await_issued makes it.
- **await_issued** polls ACM without holding a worker; FAILED, VALIDATION_TIMED_OUT (or any
  other final status but ISSUED) fails ``certificate_failed`` with ACM's reason.
- **verify** reads the certificate (ISSUED, every name covered) and the validation records.

``kirby_mode`` is carried, not acted on. A dry run plans from the real providers and
simulates the rest; nothing pauses and nothing is changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Literal, NotRequired

from django.conf import settings
from typing_extensions import TypedDict

from executions.runtime.errors import FatalError
from executions.runtime.stage import StageContext
from workflows.add_certificate.input import AddCertificateInput
from workflows.steps import acm, route53
from workflows.watch import Finding, Recorded

# What each stage is given: ctx.input is the typed input.
Ctx = StageContext[AddCertificateInput]


class Plan(TypedDict):
    domain: str
    names: list[str]  # the domain, then its alternative names
    zones: dict[str, dict[str, Any]]  # each name's hosted zone (id, name), by name
    certificate_arn: str | None  # the certificate to adopt, or None: one is requested
    adopted: dict[str, Any] | None  # what ACM holds of the adopted certificate
    kirby_mode: str
    dry_run: bool


class Requested(TypedDict):
    certificate_arn: str | None  # None: a dry run's simulated request
    requested: bool  # False: adopted
    status: NotRequired[str]
    simulated: NotRequired[bool]


class Batch(TypedDict):
    zone: str
    changed: bool
    created: list[str]  # the validation records' names written to the zone


class Validated(TypedDict):
    certificate_arn: str | None  # None: a dry run's simulated request
    records: list[dict[str, Any]]  # the validation records ACM asks for
    batches: list[Batch]
    simulated: bool


class Issued(TypedDict):
    certificate_arn: str | None
    status: str
    simulated: bool


class Verified(TypedDict):
    verified: bool | Literal["simulated"]
    certificate_arn: str | None
    certificate_status: str | None
    validation_records_in_place: bool
    records: list[dict[str, Any]]
    names: NotRequired[list[str]]


RECORDS_POLL_SECONDS = 1.0
RECORDS_TIMEOUT_SECONDS = 600.0
ISSUED_POLL_SECONDS = 2.0
ISSUED_TIMEOUT_SECONDS = 72 * 3600.0  # ACM's own limit: VALIDATION_TIMED_OUT after 72 h


def _names(data: AddCertificateInput) -> list[str]:
    return [data.domain, *data.alternative_names]


def _held(arn: str | None) -> str:
    """The ARN of a certificate that exists (requested or adopted): only a dry run's
    simulated request has none, and its stages do not ask ACM about it."""
    if arn is None:
        raise FatalError("no certificate was requested or adopted", code="certificate_missing")
    return arn


def plan(ctx: Ctx) -> Plan:
    names = _names(ctx.input)
    arn = ctx.input.certificate_arn
    adopted = None
    zone_names = list(names)
    if arn is not None:
        adopted = ctx.step("certificate", acm.check_adopted, arn, names, dry_run=ctx.dry_run)
        held = [adopted["domain"], *adopted["alternative_names"]]
        zone_names += [n for n in held if n not in zone_names]
    zones = ctx.step("zones", acm.find_zones, zone_names, dry_run=ctx.dry_run)["zones"]
    return {
        "domain": ctx.input.domain,
        "names": names,
        "zones": zones,
        "certificate_arn": arn,
        "adopted": adopted,
        "kirby_mode": ctx.input.kirby_mode,
        "dry_run": ctx.dry_run,
    }


def request(ctx: Ctx) -> Requested:
    planned = ctx.output_of(plan)
    if planned["certificate_arn"] is not None:
        return {"certificate_arn": planned["certificate_arn"], "requested": False}
    step = acm.simulate_request if ctx.dry_run else acm.request_certificate
    receipt = ctx.step(
        "request",
        step,
        domain=ctx.input.domain,
        alternative_names=ctx.input.alternative_names,
        execution_id=ctx.execution_id,
        ticket_ids=ctx.input.ticket_ids,
        mutation=True,
    )
    return {
        "certificate_arn": receipt["after"]["arn"],
        "requested": True,
        "status": receipt["after"]["status"],
        "simulated": bool(receipt.get("simulated")),
    }


def validate_dns(ctx: Ctx) -> Validated:
    planned = ctx.output_of(plan)
    requested = ctx.output_of(request)
    arn = requested["certificate_arn"]
    if requested.get("simulated"):
        records = acm.simulated_records(planned["names"])
    else:  # (an adopted certificate's records are read in a dry run too: reads only)
        held = _held(arn)
        records = ctx.wait_until(
            "records",
            lambda: acm.validation_records(held, dry_run=ctx.dry_run),
            every=RECORDS_POLL_SECONDS,
            timeout=RECORDS_TIMEOUT_SECONDS,
        )["records"]
    batches: list[Batch] = []
    for zone, wanted in acm.by_zone(records, planned["zones"].values()):
        names = [r["name"] for r in wanted]
        existing = ctx.step(
            f"read:{zone['name']}", route53.read_records, zone["id"], names, dry_run=ctx.dry_run
        )
        changes = acm.validation_changes(wanted, existing)
        if not changes:
            batches.append({"zone": zone["name"], "changed": False, "created": []})
            continue
        batch = acm.simulate_validation_batch if ctx.dry_run else acm.apply_validation_batch
        ctx.step(
            f"batch:{zone['name']}",
            batch,
            certificate_arn=arn,
            zone=zone,
            changes=changes,
            existing=existing,
            operation=f"{ctx.execution_id} add-certificate {zone['name']}",
            mutation=True,
        )
        created = [c["record"]["name"] for c in changes]
        batches.append({"zone": zone["name"], "changed": True, "created": created})
    return {
        "certificate_arn": arn,
        "records": records,
        "batches": batches,
        "simulated": ctx.dry_run,
    }


def await_issued(ctx: Ctx) -> Issued:
    validated = ctx.output_of(validate_dns)
    if validated["simulated"]:
        return {"certificate_arn": None, "status": "ISSUED", "simulated": True}
    arn = _held(validated["certificate_arn"])
    certificate = ctx.wait_until(
        "issued",
        lambda: acm.final_status(arn),
        every=ISSUED_POLL_SECONDS,
        timeout=ISSUED_TIMEOUT_SECONDS,
    )
    if certificate["status"] != "ISSUED":
        raise FatalError(
            f"certificate {arn} ended {certificate['status']}: "
            f"{certificate.get('reason') or 'ACM gave no reason'}",
            code="certificate_failed",
            certificate_arn=arn,
            status=certificate["status"],
            reason=certificate.get("reason"),
        )
    return {"certificate_arn": arn, "status": "ISSUED", "simulated": False}


def verify(ctx: Ctx) -> Verified:
    planned = ctx.output_of(plan)
    validated = ctx.output_of(validate_dns)
    if validated["simulated"]:
        return {
            "verified": "simulated",
            "certificate_arn": None,
            "certificate_status": None,
            "validation_records_in_place": False,
            "records": validated["records"],
        }
    arn = _held(validated["certificate_arn"])
    certificate = ctx.step("certificate", acm.describe_certificate, arn)
    held = [certificate["domain"], *certificate["alternative_names"]]
    uncovered = [n for n in planned["names"] if not acm.covers(held, n)]
    missing = []
    for zone, wanted in acm.by_zone(validated["records"], planned["zones"].values()):
        found = ctx.step(
            f"read:{zone['name']}",
            route53.read_records,
            zone["id"],
            [r["name"] for r in wanted],
            dry_run=False,
        )
        missing += [r["name"] for r in wanted if not acm.in_place(r, found)]
    if certificate["status"] != "ISSUED" or uncovered or missing:
        raise FatalError(
            f"certificate {arn} is not in place after validation",
            code="verify_failed",
            certificate_status=certificate["status"],
            uncovered=uncovered,
            validation_records_missing=missing,
        )
    return {
        "verified": True,
        "certificate_arn": arn,
        "certificate_status": certificate["status"],
        "validation_records_in_place": True,
        "names": sorted(set(held)),
        "records": validated["records"],
    }


def drift(rec: Recorded[AddCertificateInput]) -> list[Finding]:
    """The drift watch's check (``workflows.watch``): the certificate still exists, ISSUED,
    covering every name, not expiring within ``ALFRED_DRIFT_CERTIFICATE_DAYS``; and each
    validation CNAME still served — without them ACM cannot renew it (a managed certificate
    renews only while its DNS validation still answers)."""
    verified = rec.output_of(verify)
    arn = _held(verified["certificate_arn"])
    held = acm.certificate_state(arn)
    if held is None:
        return [Finding(f"certificate {arn}", "ISSUED", None)]
    found: list[Finding] = []
    if held["status"] != "ISSUED":
        found.append(Finding(f"status of certificate {arn}", "ISSUED", held["status"]))
    names = [held["domain"], *held["alternative_names"]]
    if [n for n in rec.output_of(plan)["names"] if not acm.covers(names, n)]:
        found.append(Finding(f"names of certificate {arn}", verified.get("names"), names))
    days = settings.ALFRED_DRIFT_CERTIFICATE_DAYS
    horizon = rec.now + dt.timedelta(days=days)
    if held["not_after"] and dt.datetime.fromisoformat(held["not_after"]) <= horizon:
        found.append(
            Finding(
                f"expiry of certificate {arn}",
                f"valid for more than {days:g} days",
                held["not_after"],
            )
        )
    zones = rec.output_of(plan)["zones"].values()
    for zone, wanted in acm.by_zone(verified["records"], zones):
        there = route53.read_records(zone["id"], [r["name"] for r in wanted], dry_run=True)
        found += [
            Finding(
                f"validation record {r['name']}",
                acm.cname(r),
                [s for s in there if s["name"] == r["name"]] or None,
            )
            for r in wanted
            if not acm.in_place(r, there)
        ]
    return found


def redo_input(
    data: dict[str, Any], outputs: Mapping[str, Any], findings: list[dict[str, Any]]
) -> dict[str, Any]:
    """Started again after a drift, it repairs the certificate it made rather than requesting
    another: it adopts it (``certificate_arn``: the validation records are written again for
    it), unless the certificate is gone or no longer ISSUED — then a new one is requested."""
    arn = (outputs.get("verify") or {}).get("certificate_arn")
    lost = {f"certificate {arn}", f"status of certificate {arn}"}
    if arn is None or data.get("certificate_arn") or lost & {f["what"] for f in findings}:
        return data
    return {**data, "certificate_arn": arn}

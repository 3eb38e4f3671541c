"""ACM moves for the workflows: find the zones of a certificate's names, check an adopted
certificate, request one (with its receipt and compensation), read its validation records,
poll it to a final status, and compose the validation CNAMEs into ONE Route53 batch per zone.

Each function here is a step function (``ctx.step(key, fn, ...)``), a probe for
``ctx.wait_until``, pure code a stage calls, or, for the undo, stage code given ``ctx``. A dry
run gets :class:`ReadOnlyAcm` (no mutating call is reachable) and :func:`simulate_request`.

A request's receipt: ``resource = aws.acm.certificate``, ``action = request``, ``before``
None (there was no certificate), ``after`` the certificate's ARN and names, ``undo`` its ARN.
The idempotency token derives from the execution id, so a replay after a lost response gets
the same certificate back (ACM keeps a token for one hour) and the certificate is provably
the execution's. Its compensation deletes it unless something uses it (``InUseBy``
non-empty: ``drifted``, and it stays).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings

from executions.runtime.errors import FatalError, ReadinessFailure
from executions.runtime.stage import StageContext
from providers.aws.acm import FINAL_STATUSES, Acm, covers
from providers.errors import NotFound, ProviderError
from providers.factory import Providers
from workflows.steps import route53 as route53_steps
from workflows.steps.compensations import Drifted, mutation
from workflows.steps.errors import engine_error, provider_errors
from workflows.steps.route53 import route53 as route53_adapter

RESOURCE = "aws.acm.certificate"
REQUEST = mutation(RESOURCE, "request")
# A Route53 batch of validation CNAMEs: undone as any batch, once the certificate they
# validate is in use by nothing (a certificate in use needs its records to renew).
VALIDATION = mutation(route53_steps.RESOURCE, "validation")
USABLE = frozenset({"ISSUED", "PENDING_VALIDATION"})
VALIDATION_TTL = 300
_READS = frozenset({"describe", "validation_records", "inspect", "check_override"})


class ReadOnlyAcm:
    """The ACM adapter with its reads only: what a dry run's steps are given."""

    def __init__(self, adapter: Acm) -> None:
        self._adapter = adapter

    def __getattr__(self, name: str) -> Any:
        if name not in _READS:
            raise AttributeError(f"a dry run reaches no mutating ACM call ({name})")
        return getattr(self._adapter, name)


def acm(*, dry_run: bool) -> Any:
    adapter = Providers(settings.ALFRED_PROVIDERS).acm()
    return ReadOnlyAcm(adapter) if dry_run else adapter


def _route53(*, dry_run: bool) -> Any:
    return route53_adapter(dry_run=dry_run)


# -- plan ------------------------------------------------------------------------------------


def base_name(name: str) -> str:
    """The host name a (possibly wildcard) certificate name lives at: ``*.a.b`` → ``a.b``."""
    return name[2:] if name.startswith("*.") else name


def candidate_zones(name: str) -> list[str]:
    """The zone names that could hold ``name``, longest first (at least two labels)."""
    labels = base_name(name).split(".")
    return [".".join(labels[i:]) for i in range(len(labels) - 1)]


def find_zones(names: Sequence[str], *, dry_run: bool) -> dict[str, Any]:
    """The longest public hosted zone holding each name: ``{"zones": {name: zone}}``. A name
    without one is a readiness failure ``hosted_zone_missing`` naming it (every such name)."""
    adapter = _route53(dry_run=dry_run)
    found: dict[str, dict[str, Any]] = {}
    by_candidate: dict[str, dict[str, Any] | None] = {}
    missing: list[str] = []
    for name in names:
        for candidate in candidate_zones(name):
            if candidate not in by_candidate:
                try:
                    zone = adapter.zone(candidate)
                except NotFound:
                    by_candidate[candidate] = None
                except ProviderError as exc:
                    raise engine_error(exc) from exc
                else:
                    by_candidate[candidate] = {
                        "id": zone["id"],
                        "name": zone["name"],
                        "record_set_count": zone["record_set_count"],
                    }
            if by_candidate[candidate] is not None:
                found[name] = by_candidate[candidate]  # type: ignore[assignment]
                break
        else:
            missing.append(name)
    if missing:
        raise ReadinessFailure(
            "no hosted zone holds " + ", ".join(missing),
            code="hosted_zone_missing",
            checks=[{"name": f"hosted zone holding {n}", "ok": False} for n in missing],
        )
    return {"zones": found}


def check_adopted(arn: str, names: Sequence[str], *, dry_run: bool) -> dict[str, Any]:
    """The certificate ``arn`` if it exists in the account, covers every name (as ACM matches
    a wildcard: one label) and is ISSUED or PENDING_VALIDATION; FatalError
    ``certificate_mismatch`` naming what is missing otherwise."""
    adapter = acm(dry_run=dry_run)
    try:
        certificate = adapter.describe(arn)
    except NotFound as exc:
        raise FatalError(
            f"certificate {arn} does not exist in the account",
            code="certificate_mismatch",
            certificate_arn=arn,
            missing=["the certificate"],
        ) from exc
    except ProviderError as exc:
        raise engine_error(exc) from exc
    held = [certificate["domain"], *certificate["alternative_names"]]
    uncovered = [n for n in names if not covers(held, n)]
    reasons = []
    if uncovered:
        reasons.append(f"it does not cover {', '.join(uncovered)}")
    if certificate["status"] not in USABLE:
        reasons.append(f"its status is {certificate['status']}")
    if reasons:
        raise FatalError(
            f"certificate {arn} cannot be adopted: " + "; ".join(reasons),
            code="certificate_mismatch",
            certificate_arn=arn,
            missing=uncovered,
            status=certificate["status"],
            covers=sorted(set(held)),
        )
    return _shown(certificate)


def _shown(certificate: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "arn": certificate["arn"],
        "domain": certificate["domain"],
        "alternative_names": list(certificate["alternative_names"]),
        "status": certificate["status"],
        "in_use_by": list(certificate["in_use_by"]),
    }


# -- request ---------------------------------------------------------------------------------


def idempotency_token(execution_id: str) -> str:
    """ACM's token for the execution's one request (``\\w{1,32}``), stable per execution."""
    return hashlib.sha256(f"alfred add-certificate {execution_id}".encode()).hexdigest()[:32]


def certificate_tags(execution_id: str, ticket_ids: Iterable[str]) -> dict[str, str]:
    tags = {"alfred:execution": execution_id}
    tickets = " ".join(ticket_ids)
    if tickets:
        tags["alfred:tickets"] = tickets[:256]
    return tags


@REQUEST
def request_certificate(
    *, domain: str, alternative_names: Sequence[str], execution_id: str, ticket_ids: Sequence[str]
) -> dict[str, Any]:
    """RequestCertificate (DNS validation), its token the execution's: safe to run again
    after any failure, within ACM's hour, without a second certificate."""
    with provider_errors():
        handle = acm(dry_run=False).request(
            domain,
            alternative_names=alternative_names,
            idempotency_token=idempotency_token(execution_id),
            tags=certificate_tags(execution_id, ticket_ids),
        )
    certificate = handle["observations"]["certificate"]
    return REQUEST.receipt(
        undo={"arn": handle["id"]},
        before=None,
        after=_shown(certificate),
        handle={k: v for k, v in handle.items() if k != "observations"},
        token=handle["observations"].get("idempotency_token"),
    )


def simulate_request(
    *, domain: str, alternative_names: Sequence[str], execution_id: str, ticket_ids: Sequence[str]
) -> dict[str, Any]:
    """What :func:`request_certificate` would record, without a call: the dry run's request."""
    return REQUEST.receipt(
        undo={"arn": None},
        before=None,
        after={
            "arn": None,
            "domain": domain,
            "alternative_names": list(alternative_names),
            "status": "PENDING_VALIDATION",
            "in_use_by": [],
        },
        simulated=True,
    )


@REQUEST.undo
def undo_request(ctx: StageContext, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """Delete the certificate Alfred requested, unless something uses it (``drifted``: it
    stays, for an operator). A certificate already gone counts as deleted."""
    arn = receipt["undo"].get("arn")
    if receipt.get("simulated") or not arn:
        return {"deleted": None, "simulated": True}
    current = ctx.step("describe", read_certificate, arn)
    if current is None:
        return {"deleted": arn, "already_absent": True}
    if current["in_use_by"]:
        raise Drifted(
            RESOURCE,
            [
                {
                    "arn": arn,
                    "expected": {"in_use_by": []},
                    "found": {"in_use_by": current["in_use_by"]},
                }
            ],
        )
    ctx.step("delete", delete_certificate, arn)
    return {"deleted": arn}


def read_certificate(arn: str) -> dict[str, Any] | None:
    """The certificate as the undo needs it, or None when it does not exist."""
    certificate = _described(arn, dry_run=False)
    return None if certificate is None else _shown(certificate)


def certificate_state(arn: str) -> dict[str, Any] | None:
    """The drift watch's read of a certificate: what ``read_certificate`` says and when it
    expires (``not_after``, ISO 8601; None until issued), or None when it does not exist."""
    certificate = _described(arn, dry_run=True)
    return (
        None
        if certificate is None
        else {**_shown(certificate), "not_after": certificate["not_after"]}
    )


def _described(arn: str, *, dry_run: bool) -> Any:
    """ACM's description of ``arn``, or None when it does not exist."""
    try:
        return acm(dry_run=dry_run).describe(arn)
    except NotFound:
        return None
    except ProviderError as exc:
        raise engine_error(exc) from exc


def delete_certificate(arn: str) -> dict[str, Any]:
    with provider_errors():
        handle = acm(dry_run=False).delete(arn)
    return {"arn": arn, "already_absent": handle["observations"]["already_absent"]}


# -- validation records ----------------------------------------------------------------------


def validation_records(arn: str, *, dry_run: bool) -> dict[str, Any] | None:
    """A probe: the certificate's validation CNAMEs once ACM has published all of them (a
    certificate validated otherwise, e.g. imported, has none: an empty list)."""
    with provider_errors():
        found = acm(dry_run=dry_run).validation_records(arn, wait=0)
    if not found["complete"] and found["pending"]:
        return None
    return {"records": sorted(found["records"], key=lambda r: r["name"])}


def simulated_records(names: Sequence[str]) -> list[dict[str, str]]:
    """Stand-ins for the CNAMEs ACM would ask for (a dry run has no certificate): one per
    base name, a wildcard sharing its base's, named as ACM names them."""
    out: dict[str, dict[str, str]] = {}
    for name in names:
        base = base_name(name)
        digest = hashlib.sha256(base.encode()).hexdigest()
        out[base] = {
            "name": f"_{digest[:32]}.{base}",
            "type": "CNAME",
            "value": f"_{digest[32:]}.simulated.acm-validations.aws.",
        }
    return sorted(out.values(), key=lambda r: r["name"])


def zone_of(record_name: str, zones: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The longest of ``zones`` that holds ``record_name``."""
    holding = [
        z for z in zones if record_name == z["name"] or record_name.endswith("." + z["name"])
    ]
    if not holding:
        raise FatalError(
            f"no planned hosted zone holds the validation record {record_name}",
            code="hosted_zone_missing",
            record=record_name,
        )
    return dict(max(holding, key=lambda z: len(z["name"])))


def by_zone(
    records: Sequence[Mapping[str, str]], zones: Iterable[Mapping[str, Any]]
) -> list[tuple[dict[str, Any], list[dict[str, str]]]]:
    """The validation records grouped by the zone holding each, zones in name order."""
    zones = list({z["id"]: z for z in zones}.values())
    grouped: dict[str, tuple[dict[str, Any], list[dict[str, str]]]] = {}
    for rec in records:
        zone = zone_of(rec["name"], zones)
        grouped.setdefault(zone["id"], (zone, []))[1].append(dict(rec))
    return sorted(grouped.values(), key=lambda item: item[0]["name"])


def cname(rec: Mapping[str, str]) -> dict[str, Any]:
    """A validation record as the Route53 record set Alfred creates."""
    return {
        "name": rec["name"],
        "type": "CNAME",
        "ttl": VALIDATION_TTL,
        "values": [rec["value"]],
        "alias": None,
        "set_identifier": None,
        "routing": {},
    }


def _same_target(a: str, b: str) -> bool:
    return a.rstrip(".").lower() == b.rstrip(".").lower()


def in_place(rec: Mapping[str, str], existing: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the record sets at the name serve the validation CNAME (whatever its TTL)."""
    return any(
        r["name"] == rec["name"]
        and r["type"] == "CNAME"
        and not r.get("set_identifier")
        and len(r["values"]) == 1
        and _same_target(r["values"][0], rec["value"])
        for r in existing
    )


def validation_changes(
    records: Sequence[Mapping[str, str]], existing: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Exact CREATEs of the validation CNAMEs not already served; anything else at one of
    their names (another CNAME target, any other record: a CNAME stands alone) is a
    FatalError ``validation_record_conflict`` naming it."""
    changes: list[dict[str, Any]] = []
    conflicts: list[dict[str, Any]] = []
    for rec in records:
        at_name = [r for r in existing if r["name"] == rec["name"]]
        if in_place(rec, at_name):
            continue
        if at_name:
            conflicts.append({"name": rec["name"], "wanted": dict(rec), "found": at_name})
            continue
        changes.append({"action": "CREATE", "record": cname(rec)})
    if conflicts:
        raise FatalError(
            "a different record is at the validation name "
            + ", ".join(str(c["name"]) for c in conflicts),
            code="validation_record_conflict",
            conflicts=conflicts,
        )
    return changes


@VALIDATION
def apply_validation_batch(*, certificate_arn: str | None, **batch: Any) -> dict[str, Any]:
    """:func:`route53.apply_batch` of validation CNAMEs, its receipt naming the certificate."""
    return _validation(route53_steps.apply_batch(**batch), certificate_arn)


def simulate_validation_batch(*, certificate_arn: str | None, **batch: Any) -> dict[str, Any]:
    return _validation(route53_steps.simulate_batch(**batch), certificate_arn)


def _validation(receipt: dict[str, Any], certificate_arn: str | None) -> dict[str, Any]:
    receipt["action"] = VALIDATION.action
    receipt["undo"]["certificate_arn"] = certificate_arn
    return receipt


@VALIDATION.undo
def undo_validation_batch(ctx: StageContext, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """Delete the validation CNAMEs Alfred created (the batch's exact undo), unless their
    certificate is in use (``drifted``: the records stay, so that it can renew)."""
    arn = receipt["undo"].get("certificate_arn")
    if arn and not receipt.get("simulated"):
        current = ctx.step("certificate", read_certificate, arn)
        if current is not None and current["in_use_by"]:
            raise Drifted(
                RESOURCE,
                [
                    {
                        "arn": arn,
                        "expected": {"in_use_by": []},
                        "found": {"in_use_by": current["in_use_by"]},
                    }
                ],
            )
    return route53_steps.undo_batch(ctx, receipt)


# -- await and verify ------------------------------------------------------------------------


def final_status(arn: str) -> dict[str, Any] | None:
    """A probe: the certificate once its status is final (ISSUED, FAILED, ...), with ACM's
    failure reason; None while it is pending."""
    with provider_errors():
        certificate = acm(dry_run=False).describe(arn)
    if certificate["status"] not in FINAL_STATUSES:
        return None
    shown = _shown(certificate)
    if certificate["status"] != "ISSUED":
        shown["reason"] = certificate["failure_reason"]
    return shown


def describe_certificate(arn: str) -> dict[str, Any]:
    with provider_errors():
        return _shown(acm(dry_run=False).describe(arn))

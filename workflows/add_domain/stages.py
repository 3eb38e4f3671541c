"""add-domain's stages (docs/workflows.md): ``plan`` reads and freezes, ``certificate`` awaits a
child add-certificate, ``dns`` writes the alias records as ONE batch, ``routing`` commits the Helm
routing and waits for ArgoCD, ``booking`` commits the nginx booking, ``verify`` reads it all
back. onboard-domain runs the same stages after its own ``plan`` and ``hosted_zone``
(``onboard_domain/stages.py``): what differs is only where the zone comes from.

- **plan** finds the longest public hosted zone holding the domain (none: readiness failure
  ``hosted_zone_missing``), reads the records at the domain and its ``www.`` name, and
  freezes the platform edge (``ALFRED_PLATFORM_EDGE_*``; unset: ``platform_edge_missing``),
  the Helm and booking entries already present with each branch's head, and the ArgoCD
  applications carrying each Helm concern with what they run (one missing:
  ``argocd_application_missing``). Something else at either name — a CNAME, an A/AAAA that
  is not the edge's alias, a routing policy — is a readiness failure ``dns_conflict`` naming
  it: add-domain does not overwrite DNS (add-subdomain, with its approval, does). With
  ``certificate_arn`` the certificate must cover both names and be usable
  (``certificate_mismatch``).
- **certificate** starts a child add-certificate for the domain and its ``www.`` name (the
  parent's tickets, Kirby mode and dry run), taking no lane slot: it runs inside this
  execution's. The stage waits for it, holding no worker; a child that does not succeed
  fails this execution with the child's error. Skipped with ``certificate_arn``.
- **dns** reads the two names again and sends exact CREATEs of the A and AAAA alias records
  to the edge that are not there yet, as ONE batch through the kit (blast-radius guard,
  receipt, compensation), then waits for INSYNC.
- **routing** commits each Helm concern (``feat(nginx-hosts): add D``, and
  ``feat(kirby-routing): add D`` when ``kirby_mode`` is ``enabled``), each commit carrying the
  operation identity and the entries it owns; then waits, holding no worker, until every
  application carrying a concern has converged on its commit (Synced and Healthy at it, or at
  a later commit of the branch that includes it, no operation running). A concern whose
  entries were all present makes no commit, and waits until the applications serve the head
  it read (at once, for a domain long on the platform; a retry after a failed sync finds the
  sync still failed, ``argocd_sync_failed``, until someone has fixed it).
- **booking** commits the missing booking entries (Calipso CORS map and next-deimos server
  names) as ONE two-file commit on the observed head of the base branch — re-applied on a
  concurrent update, never forced, found again after a lost response — and reports the
  production nginx deployment as Platform assistance (``platform_nginx_deployment``). All
  present: no commit and no assistance.
- **verify** reads back the alias records, the certificate (ISSUED, covering both names),
  the entries at each branch head with Alfred's commits on the branch, and the applications'
  convergence.

Rollback undoes, newest first: the booking and routing commits (a revert commit per concern
removing only the entries Alfred's commit owns, then the wait for ArgoCD), the DNS batch, and
the child certificate through the child's own rollback. A dry run plans from the real
providers, runs the child as a dry run, simulates every commit and batch, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired

from django.conf import settings
from typing_extensions import TypedDict

from executions.runtime.errors import FatalError, ReadinessFailure
from executions.runtime.stage import StageContext
from workflows.add_domain.input import AddDomainInput
from workflows.steps import acm, argocd, gitops, route53
from workflows.watch import Finding, Recorded

# What each stage is given: ctx.input is the typed input.
Ctx = StageContext[AddDomainInput]


class PlatformPlan(TypedDict):
    """What ``plan`` freezes (add-domain's and onboard-domain's): the zone, the edge, the DNS
    changes, the certificate to adopt, and each GitOps concern's entries and applications."""

    domain: str
    names: list[str]  # the domain and its www name
    zone: dict[str, Any] | None  # None: onboard-domain's zone does not exist yet
    zone_stage: Literal["plan", "hosted_zone"]  # the stage whose output holds the zone
    edge: dict[str, Any]
    dns: dict[str, Any]  # existing records and the changes planned
    certificate_arn: str | None
    adopted: dict[str, Any] | None
    kirby_mode: str
    routing: list[dict[str, Any]]  # each Helm concern's entries, with its applications
    booking: dict[str, Any]  # the booking concern's entries
    dry_run: bool


class Certificate(TypedDict):
    certificate_arn: str | None
    child: str | None  # the child add-certificate execution, when one ran
    adopted: bool
    simulated: NotRequired[bool]


class Dns(TypedDict):
    changed: bool
    records: NotRequired[list[dict[str, Any]]]  # unchanged: the alias records in place
    created: NotRequired[list[dict[str, Any]]]  # changed: the records the batch created
    change: NotRequired[str | None]
    status: NotRequired[str | None]
    simulated: NotRequired[bool]


class Commit(TypedDict):
    """A concern's commit (None: nothing was missing), with what it wrote and where."""

    scope: str
    repository: str
    branch: str
    commit: str | None
    head: str | None
    subject: str | None
    entries: Any
    present: Any
    converged: Any  # the applications' convergence on it (None: nothing to wait for)
    simulated: bool


class Routing(TypedDict):
    commits: list[Commit]


class Booking(TypedDict):
    repository: str
    branch: str
    commit: str | None
    subject: str | None
    entries: Any
    present: Any
    noop: bool
    simulated: bool
    assistance: NotRequired[list[dict[str, Any]]]


class Verified(TypedDict):
    verified: bool | Literal["simulated"]
    domain: str
    names: NotRequired[list[str]]
    records: NotRequired[list[dict[str, Any]]]
    certificate_arn: NotRequired[str | None]
    certificate_status: NotRequired[str]
    commits: NotRequired[dict[str, str | None]]  # each concern's commit
    converged: NotRequired[Any]


CERTIFICATE_WORKFLOW = "add-certificate"
ALIAS_TYPES = ("A", "AAAA")
VERIFY_CONVERGE_TIMEOUT_SECONDS = 600.0
HELM = (gitops.NGINX_HOSTS.scope, gitops.KIRBY_ROUTING.scope)
BOOKING = gitops.NGINX_BOOKING.scope


# -- pure -------------------------------------------------------------------------------------


def served_names(domain: str) -> list[str]:
    """The names a domain is served at: D and www.D (D alone when it starts with www.)."""
    return [domain] if domain.startswith("www.") else [domain, f"www.{domain}"]


def helm_concerns(kirby_mode: str) -> list[str]:
    return list(HELM) if kirby_mode == "enabled" else [gitops.NGINX_HOSTS.scope]


def edge_records(names: Sequence[str], edge: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The alias records that point ``names`` at the platform edge."""
    alias = {
        "hosted_zone_id": edge["hosted_zone_id"],
        "dns_name": edge["dns_name"],
        "evaluate_target_health": edge["evaluate_target_health"],
    }
    return [
        {
            "name": name,
            "type": kind,
            "ttl": None,
            "values": [],
            "alias": alias,
            "set_identifier": None,
            "routing": {},
        }
        for name in names
        for kind in ALIAS_TYPES
    ]


def dns_changes(
    names: Sequence[str], existing: Sequence[Mapping[str, Any]], edge: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The CREATEs of the edge's alias records not yet at ``names``, and the conflicts: a
    record set at one of the names that a CNAME or an alias to the edge cannot stand beside
    or would replace (a CNAME, an A/AAAA that is not exactly the edge's alias)."""
    wanted = edge_records(names, edge)
    conflicts = [
        dict(r)
        for r in existing
        if r["name"] in names
        and (r["type"] == "CNAME" or (r["type"] in ALIAS_TYPES and r not in wanted))
    ]
    changes = [{"action": "CREATE", "record": w} for w in wanted if w not in existing]
    return changes, conflicts


def edge_of() -> dict[str, Any]:
    edge = dict(settings.ALFRED_PLATFORM_EDGE)
    if not edge["dns_name"] or not edge["hosted_zone_id"]:
        raise ReadinessFailure(
            "no platform edge is configured: set ALFRED_PLATFORM_EDGE_DNS_NAME and "
            "ALFRED_PLATFORM_EDGE_ZONE_ID",
            code="platform_edge_missing",
            checks=[{"name": "platform edge configured", "ok": False}],
        )
    return edge


def zone_of(ctx: Ctx | Recorded[AddDomainInput]) -> dict[str, Any]:
    """The hosted zone the domain's records go to: planned (add-domain), or created by the
    ``hosted_zone`` stage (onboard-domain)."""
    planned = ctx.output_of(plan)
    if planned["zone_stage"] == "plan":
        return dict(planned["zone"] or {})
    return dict(ctx.output_of("hosted_zone")["zone"])


def _failed_child(child: Mapping[str, Any]) -> FatalError:
    error = child.get("error") or {}
    return FatalError(
        f"the certificate (child {child['id']}) ended {child['status']}: "
        f"{error.get('message') or 'no error recorded'}",
        code=str(error.get("code") or f"certificate_{child['status']}"),
        child=child["id"],
        child_status=child["status"],
        child_error=error or None,
    )


# -- plan -------------------------------------------------------------------------------------


def plan_platform(
    ctx: Ctx, *, zone: Mapping[str, Any] | None, zone_stage: Literal["plan", "hosted_zone"]
) -> PlatformPlan:
    """What add-domain and onboard-domain freeze beyond the zone: the edge, the records at the
    names (when the zone exists), the certificate to adopt, the entries already present and
    the applications that carry each Helm concern."""
    domain = ctx.input.domain
    names = served_names(domain)
    edge = edge_of()
    existing: list[dict[str, Any]] = []
    if zone is not None and zone.get("id"):
        existing = ctx.step("records", route53.read_records, zone["id"], names, dry_run=ctx.dry_run)
    changes, conflicts = dns_changes(names, existing, edge)
    if conflicts:
        raise ReadinessFailure(
            f"{', '.join(sorted({c['name'] for c in conflicts}))} already hold records the "
            "platform's alias would replace; add-domain does not overwrite DNS",
            code="dns_conflict",
            checks=[
                {"name": f"no {c['type']} at {c['name']} but the edge's alias", "ok": False}
                for c in conflicts
            ],
        )
    adopted = None
    if ctx.input.certificate_arn is not None:
        adopted = ctx.step(
            "certificate",
            acm.check_adopted,
            ctx.input.certificate_arn,
            names,
            dry_run=ctx.dry_run,
        )
    routing = []
    for scope in helm_concerns(ctx.input.kirby_mode):
        entries = ctx.step(
            f"entries:{scope}", gitops.read_entries, scope, domain, dry_run=ctx.dry_run
        )
        applications = ctx.step(f"applications:{scope}", argocd.read_applications, scope)
        routing.append({**entries, "applications": applications})
    booking = ctx.step(
        f"entries:{BOOKING}", gitops.read_entries, BOOKING, domain, dry_run=ctx.dry_run
    )
    return {
        "domain": domain,
        "names": names,
        "zone": dict(zone) if zone is not None else None,
        "zone_stage": zone_stage,
        "edge": edge,
        "dns": {"existing": existing, "changes": changes},
        "certificate_arn": ctx.input.certificate_arn,
        "adopted": adopted,
        "kirby_mode": ctx.input.kirby_mode,
        "routing": routing,
        "booking": booking,
        "dry_run": ctx.dry_run,
    }


def plan(ctx: Ctx) -> PlatformPlan:
    domain = ctx.input.domain
    zones = ctx.step("zone", acm.find_zones, [domain], dry_run=ctx.dry_run)["zones"]
    return plan_platform(ctx, zone=zones[domain], zone_stage="plan")


# -- mutations ---------------------------------------------------------------------------------


def certificate(ctx: Ctx) -> Certificate:
    planned = ctx.output_of(plan)
    if planned["certificate_arn"] is not None:
        return {"certificate_arn": planned["certificate_arn"], "child": None, "adopted": True}
    if ctx.dry_run and not zone_of(ctx).get("id"):
        # onboard-domain's dry run: the zone the child would validate in does not exist
        return {"certificate_arn": None, "child": None, "adopted": False, "simulated": True}
    names = planned["names"]
    child = ctx.child(
        "certificate",
        CERTIFICATE_WORKFLOW,
        {
            "domain": names[0],
            "alternative_names": names[1:],
            "ticket_ids": ctx.input.ticket_ids,
            "kirby_mode": ctx.input.kirby_mode,
            "dry_run": ctx.dry_run,
        },
    )
    if child["status"] != "succeeded":
        raise _failed_child(child)
    result = child.get("result") or {}
    return {
        "certificate_arn": result.get("certificate_arn"),
        "child": child["id"],
        "adopted": False,
        "simulated": ctx.dry_run,
    }


def dns(ctx: Ctx) -> Dns:
    planned = ctx.output_of(plan)
    zone = zone_of(ctx)
    names = planned["names"]
    existing: list[dict[str, Any]] = []
    if zone.get("id"):
        existing = ctx.step("read", route53.read_records, zone["id"], names, dry_run=ctx.dry_run)
    changes, conflicts = dns_changes(names, existing, planned["edge"])
    if conflicts:
        raise FatalError(
            "records appeared at the domain's names after the plan: "
            + ", ".join(f"{c['type']} {c['name']}" for c in conflicts),
            code="dns_conflict",
            conflicts=conflicts,
        )
    if not changes:
        return {"changed": False, "records": edge_records(names, planned["edge"])}
    _, handle = route53.send_and_wait(
        ctx,
        zone=zone,
        changes=changes,
        existing=existing,
        operation=f"{ctx.execution_id} {ctx.input.domain} alias to the platform edge",
    )
    return {
        "changed": True,
        "created": [c["record"] for c in changes],
        "change": handle.get("id"),
        "status": handle.get("status"),
        "simulated": ctx.dry_run,
    }


def _commit(ctx: Ctx, concern: Mapping[str, Any]) -> dict[str, Any]:
    scope = concern["scope"]
    common = {
        "scope": scope,
        "domain": ctx.input.domain,
        "operation": f"{ctx.execution_id}:{scope}",
        "since": concern["head"],
        "present": concern["present"],
    }
    if ctx.dry_run:
        return ctx.step(
            f"commit:{scope}",
            gitops.simulate_commit,
            **common,
            missing=concern["missing"],
            mutation=True,
        )
    return ctx.step(f"commit:{scope}", gitops.commit_entries, **common, mutation=True)


def _converged(ctx: Ctx, key: str, targets: Mapping[str, str], timeout: float) -> Any:
    """The durable wait until every application of each concern has converged on its
    commit (``targets``: concern → commit); ``{}`` when nothing is to be waited for."""
    if not targets:
        return {}
    return ctx.wait_until(
        key,
        lambda: argocd.converged_on_all(targets),
        every=argocd.poll_seconds(),
        timeout=timeout,
        wake_on=argocd.wake_topics(*targets),
    )


def routing(ctx: Ctx) -> Routing:
    planned = ctx.output_of(plan)
    commits = [_commit(ctx, concern) for concern in planned["routing"]]
    # A concern with nothing to commit (every entry there already, perhaps by an earlier run
    # of this execution whose sync then failed) waits for the applications to serve the
    # head it read.
    targets: dict[str, str] = {}
    for concern, receipt in zip(planned["routing"], commits, strict=True):
        target = receipt["sha"] or receipt.get("head")
        if target and not receipt.get("simulated") and concern["applications"]:
            targets[concern["scope"]] = target
    converged = _converged(ctx, "converged", targets, argocd.CONVERGE_TIMEOUT_SECONDS)
    return {
        "commits": [
            {
                "scope": concern["scope"],
                "repository": concern["repository"],
                "branch": concern["branch"],
                "commit": receipt["sha"],
                "head": receipt.get("head"),
                "subject": receipt.get("subject"),
                "entries": receipt["after"],
                "present": concern["present"],
                "converged": converged.get(concern["scope"]),
                "simulated": bool(receipt.get("simulated")),
            }
            for concern, receipt in zip(planned["routing"], commits, strict=True)
        ]
    }


def booking(ctx: Ctx) -> Booking:
    planned = ctx.output_of(plan)
    concern = planned["booking"]
    receipt = _commit(ctx, concern)
    sha = receipt["sha"]
    out: Booking = {
        "repository": concern["repository"],
        "branch": concern["branch"],
        "commit": sha,
        "subject": receipt.get("subject"),
        "entries": receipt["after"],
        "present": concern["present"],
        "noop": sha is None,
        "simulated": bool(receipt.get("simulated")),
    }
    if sha:
        out["assistance"] = [
            {
                "kind": "platform_nginx_deployment",
                "summary": f"Deploy production nginx so that it serves {ctx.input.domain}",
                "repository": concern["repository"],
                "branch": concern["branch"],
                "commit": sha,
                "entries": receipt["after"],
                "action": (
                    f"Platform: run the production nginx deployment from "
                    f"{concern['repository']}@{sha[:12]} (the booking files "
                    "calipso/cors-origins.conf and next-deimos/server-names.conf). Alfred "
                    "committed the booking; it does not deploy production nginx."
                ),
            }
        ]
    return out


# -- verify -----------------------------------------------------------------------------------


def verify(ctx: Ctx) -> Verified:
    planned = ctx.output_of(plan)
    routed = ctx.output_of(routing)["commits"]
    booked = ctx.output_of(booking)
    if ctx.dry_run:
        return {"verified": "simulated", "domain": planned["domain"]}
    zone = zone_of(ctx)
    names = planned["names"]
    found = ctx.step("records", route53.read_records, zone["id"], names, dry_run=False)
    records_missing = [
        f"{r['type']} {r['name']}" for r in edge_records(names, planned["edge"]) if r not in found
    ]
    arn = ctx.output_of(certificate)["certificate_arn"]
    held = ctx.step("certificate", acm.describe_certificate, arn)
    uncovered = [
        n for n in names if not acm.covers([held["domain"], *held["alternative_names"]], n)
    ]
    entries_missing: list[dict[str, str]] = []
    off_branch: list[str] = []
    committed = [(c["scope"], c["commit"]) for c in routed] + [(BOOKING, booked["commit"])]
    for scope, sha in committed:
        read = ctx.step(
            f"entries:{scope}", gitops.read_entries, scope, planned["domain"], dry_run=False
        )
        entries_missing += read["missing"]
        if sha:
            on = ctx.step(f"includes:{scope}", gitops.includes, scope, sha)
            if not on["on_branch"]:
                off_branch.append(sha)
    targets = {
        c["scope"]: target
        for c in routed
        if c["converged"] is not None and (target := c["commit"] or c["head"])
    }
    converged = _converged(ctx, "converged", targets, VERIFY_CONVERGE_TIMEOUT_SECONDS)
    if records_missing or held["status"] != "ISSUED" or uncovered or entries_missing or off_branch:
        raise FatalError(
            f"{planned['domain']} is not in place after the run",
            code="verify_failed",
            records_missing=records_missing,
            certificate_status=held["status"],
            uncovered=uncovered,
            entries_missing=entries_missing,
            commits_off_branch=off_branch,
        )
    return {
        "verified": True,
        "domain": planned["domain"],
        "names": names,
        "records": edge_records(names, planned["edge"]),
        "certificate_arn": arn,
        "certificate_status": held["status"],
        "commits": {c["scope"]: c["commit"] for c in routed} | {BOOKING: booked["commit"]},
        "converged": converged,
    }


def drift(rec: Recorded[AddDomainInput]) -> list[Finding]:
    """The drift watch's check (``workflows.watch``): what verify saw, read again — the alias
    records at the served names, exactly; an adopted certificate still ISSUED (one a child
    requested is the child add-certificate's to watch); each concern's entries of the domain
    still on its branch (a routing or booking entry removed is drift)."""
    verified = rec.output_of(verify)
    domain, names = verified["domain"], verified.get("names", [])
    zone = zone_of(rec)
    found = route53.read_records(zone["id"], names, dry_run=True)
    drifted = [
        Finding(f"{d['type']} {d['name']}", d["expected"], d["found"])
        for d in route53.drift(
            verified.get("records", []), [r for r in found if r["type"] in ALIAS_TYPES]
        )
    ]
    held = rec.output_of(certificate)
    if held["adopted"] and held["certificate_arn"]:
        state = acm.certificate_state(held["certificate_arn"])
        status = state["status"] if state else None
        if status != "ISSUED":
            drifted.append(Finding(f"certificate {held['certificate_arn']}", "ISSUED", status))
    for scope in verified.get("commits", {}):
        read = gitops.read_entries(scope, domain, dry_run=True)
        if read["missing"]:
            drifted.append(
                Finding(
                    f"{scope} entries of {domain} on {read['repository']}@{read['branch']}",
                    read["missing"],
                    None,
                )
            )
    return drifted

"""add-subdomain: alias a name inside an existing hosted zone to the zone's apex."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from alfred.problems import shown
from workflows import fields
from workflows.base import FieldError, LaneClaim, Workflow


def fqdn(raw_subdomain: str, zone: str) -> str:
    """The fully-qualified name ``raw_subdomain`` denotes inside the canonical ``zone``.

    A name ending in ``.<zone>`` is already fully qualified; any other name with a trailing dot
    is absolute and so outside the zone; the rest is relative to the zone ("api" →
    "api.example.com"). The FQDN is the canonical form because it is unambiguous: the relative
    form "api.example.com" of "api.example.com.example.com" would read back as "api".
    Raises ValueError for the zone apex itself or an absolute name outside the zone.
    """
    absolute = raw_subdomain.strip().endswith(".")
    name = fields.normalize_hostname(raw_subdomain)
    if name == zone:
        raise ValueError(f"it names the zone apex {shown(zone)}; give a name below it")
    if name.endswith(f".{zone}"):
        return name
    if absolute:
        raise ValueError(f"it is an absolute name outside the zone {shown(zone)}")
    return f"{name}.{zone}"


class AddSubdomain(Workflow):
    name = "add-subdomain"
    title = "Add subdomain"
    description = (
        "Alias a name inside an existing Route53 hosted zone to the zone's apex alias, in one "
        "change batch. Replacing a conflicting record (a CNAME or a different A record) waits "
        "for an operator to approve the exact plan."
    )
    stages: ClassVar[tuple[str, ...]] = ("plan", "apply", "verify")
    lane_description: ClassVar[str] = (
        "none: runs without a lane; conflicting DNS is guarded by plan-hash approval instead"
    )
    queues_on_a_lane: ClassVar[bool] = False
    input_schema: ClassVar[dict[str, Any]] = fields.object_schema(
        title="add-subdomain input",
        description="The name to add and the hosted zone it belongs to.",
        properties={
            "zone": fields.hostname_property(
                "Zone",
                "The name of the existing Route53 hosted zone (e.g. example.com). The pattern "
                "states at most 189 characters, which leaves room for a 63-character label "
                "below it; a longer zone is taken when the whole name fits in 253.",
                ["example.com"],
                documented_pattern=fields.documented_hostname_pattern(
                    length=fields.MAX_HOSTNAME_LENGTH - 64
                ),
            ),
            "subdomain": fields.hostname_property(
                "Subdomain",
                "The name to add below the zone: relative label(s) (api, api.eu) or a "
                "fully-qualified name inside the zone (api.example.com). A name with a "
                "trailing dot is absolute and must lie inside the zone. Canonical form: the "
                "fully-qualified name. The pattern states one relative label; the other forms "
                "are taken as described.",
                ["api", "www"],
                documented_pattern=fields.documented_label_pattern(),
            ),
            "ticket_ids": fields.TICKET_IDS,
            "dry_run": fields.DRY_RUN,
        },
        required=["zone", "subdomain"],
        examples=[
            {"zone": "example.com", "subdomain": "api"},
            {"zone": "Example.com.", "subdomain": "API", "ticket_ids": ["ops-9"]},
            {"zone": "example.com", "subdomain": "www", "dry_run": True},
        ],
    )

    def check_semantics(self, data: Mapping[str, Any]) -> list[FieldError]:
        errors = fields.hostname_errors("/zone", data["zone"])
        if errors:
            return errors  # the subdomain cannot be placed in an invalid zone
        raw = data["subdomain"]
        try:
            problem = fields.hostname_problem(
                fqdn(raw, fields.normalize_hostname(data["zone"])), allow_wildcard=False
            )
        except ValueError as exc:
            problem = str(exc)
        if problem is None:
            return []
        return [FieldError("/subdomain", f"not a valid subdomain: {problem}")]

    def canonicalize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        filled = fields.with_defaults(self.input_schema, data)
        zone = fields.normalize_hostname(filled["zone"])
        return {
            **filled,
            "zone": zone,
            "subdomain": fqdn(filled["subdomain"], zone),
            "ticket_ids": fields.canonical_ticket_ids(filled["ticket_ids"]),
        }

    def subject(self, data: Mapping[str, Any]) -> str:
        """The record's name in full (a canonical input's is; a raw one may be relative)."""
        name, zone = str(data.get("subdomain") or ""), str(data.get("zone") or "")
        if not name:
            return zone
        return name if not zone or name.endswith(zone) else f"{name}.{zone}"

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return None

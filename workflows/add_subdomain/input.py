"""add-subdomain: alias a name inside an existing hosted zone to the zone's apex."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, ValidationInfo, field_validator

from workflows import fields
from workflows.base import LaneClaim, Workflow, WorkflowInput


class AddSubdomainInput(WorkflowInput):
    """The name to add and the hosted zone it belongs to."""

    model_config = ConfigDict(
        title="add-subdomain input",
        json_schema_extra={
            "examples": [
                {"zone": "example.com", "subdomain": "api"},
                {"zone": "Example.com.", "subdomain": "API", "ticket_ids": ["ops-9"]},
                {"zone": "example.com", "subdomain": "www", "dry_run": True},
            ]
        },
    )

    zone: Annotated[
        str,
        fields.Hostname(
            "Zone",
            "The name of the existing Route53 hosted zone (e.g. example.com). The pattern "
            "states at most 189 characters, which leaves room for a 63-character label "
            "below it; a longer zone is taken when the whole name fits in 253.",
            ["example.com"],
            documented_pattern=fields.documented_hostname_pattern(
                length=fields.MAX_HOSTNAME_LENGTH - 64
            ),
        ),
    ]
    subdomain: Annotated[
        str,
        fields.Hostname(
            "Subdomain",
            "The name to add below the zone: relative label(s) (api, api.eu) or a "
            "fully-qualified name inside the zone (api.example.com). A name with a "
            "trailing dot is absolute and must lie inside the zone. Canonical form: the "
            "fully-qualified name. The pattern states one relative label; the other forms "
            "are taken as described.",
            ["api", "www"],
            normalized=False,
            documented_pattern=fields.documented_label_pattern(),
        ),
    ]
    ticket_ids: fields.TicketIds = []
    dry_run: fields.DryRun = False

    @field_validator("subdomain")
    @classmethod
    def _inside_the_zone(cls, raw: str, info: ValidationInfo) -> str:
        return fields.name_in_zone(raw, info, what="subdomain")


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
    Input: ClassVar[type[WorkflowInput]] = AddSubdomainInput

    def subject(self, data: Mapping[str, Any]) -> str:
        """The record's name in full (a canonical input's is; a raw one may be relative)."""
        name, zone = str(data.get("subdomain") or ""), str(data.get("zone") or "")
        if not name:
            return zone
        return name if not zone or name.endswith(zone) else f"{name}.{zone}"

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return None

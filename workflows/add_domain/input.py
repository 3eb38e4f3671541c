"""add-domain: certificate (child add-certificate), DNS alias records and platform routing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, JsonValue

from workflows import fields
from workflows.base import LaneClaim, Workflow, WorkflowInput

EXAMPLES: list[JsonValue] = [
    {"domain": "example.com"},
    {
        "domain": " Shop.Example.com. ",
        "ticket_ids": ["OPS-123", "ops-124"],
        "kirby_mode": "enabled",
        "dry_run": True,
    },
    {
        "domain": "example.org",
        "certificate_arn": (
            "arn:aws:acm:us-east-1:123456789012:certificate/0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f"
        ),
    },
]


class AddDomainInput(WorkflowInput):
    """The domain to add and how to route it."""

    model_config = ConfigDict(title="add-domain input", json_schema_extra={"examples": EXAMPLES})

    domain: Annotated[
        str,
        fields.Hostname(
            "Domain",
            "The domain to serve, e.g. example.com (no wildcard). Its hosted zone must exist "
            "(onboard-domain creates it).",
            ["example.com", "shop.example.com"],
        ),
    ]
    ticket_ids: fields.TicketIds = []
    kirby_mode: fields.KirbyMode = "disabled"
    dry_run: fields.DryRun = False
    certificate_arn: fields.CertificateArn = None


class AddDomain(Workflow):
    name = "add-domain"
    title = "Add domain"
    description = (
        "Serve a domain whose hosted zone exists: obtain its certificate (a child add-certificate "
        "execution, unless certificate_arn names one), write the DNS alias records, commit the "
        "platform routing and the nginx booking."
    )
    stages: ClassVar[tuple[str, ...]] = (
        "plan",
        "certificate",
        "dns",
        "routing",
        "booking",
        "verify",
    )
    lane_description: ClassVar[str] = (
        "aws-infrastructure: one root owner at a time, shared with onboard-domain and "
        "add-certificate; its child add-certificate runs under this execution's ownership"
    )
    # Its child add-certificate's deadline (73 hours), then the DNS, routing and booking
    # waits (an hour at most): a certificate still validating must not time its parent out.
    deadline_seconds: ClassVar[float | None] = (72 + 3) * 3600
    Input: ClassVar[type[WorkflowInput]] = AddDomainInput

    def subject(self, data: Mapping[str, Any]) -> str:
        return str(data.get("domain") or "")

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim("aws-infrastructure")

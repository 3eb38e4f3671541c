"""add-domain: certificate (child add-certificate), DNS alias records and platform routing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workflows import fields
from workflows.base import FieldError, LaneClaim, Workflow

# Shared with onboard-domain, which takes the same input.
PROPERTIES: dict[str, dict[str, Any]] = {
    "domain": fields.hostname_property(
        "Domain",
        "The domain to serve, e.g. example.com (no wildcard). Its hosted zone must exist "
        "(onboard-domain creates it).",
        ["example.com", "shop.example.com"],
    ),
    "ticket_ids": fields.TICKET_IDS,
    "kirby_mode": fields.KIRBY_MODE,
    "dry_run": fields.DRY_RUN,
    "certificate_arn": fields.CERTIFICATE_ARN,
}

EXAMPLES: list[dict[str, Any]] = [
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
    input_schema: ClassVar[dict[str, Any]] = fields.object_schema(
        title="add-domain input",
        description="The domain to add and how to route it.",
        properties=PROPERTIES,
        required=["domain"],
        examples=EXAMPLES,
    )

    def check_semantics(self, data: Mapping[str, Any]) -> list[FieldError]:
        return fields.hostname_errors("/domain", data["domain"])

    def canonicalize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        filled = fields.with_defaults(self.input_schema, data)
        return {
            **filled,
            "domain": fields.normalize_hostname(filled["domain"]),
            "ticket_ids": fields.canonical_ticket_ids(filled["ticket_ids"]),
            "certificate_arn": fields.canonical_arn(filled["certificate_arn"]),
        }

    def subject(self, data: Mapping[str, Any]) -> str:
        return str(data.get("domain") or "")

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim("aws-infrastructure")

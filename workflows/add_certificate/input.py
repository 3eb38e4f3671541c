"""add-certificate: request (or adopt) an ACM certificate and make it ISSUED via DNS validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workflows import fields
from workflows.base import FieldError, LaneClaim, Workflow


class AddCertificate(Workflow):
    name = "add-certificate"
    title = "Add certificate"
    description = (
        "Request an ACM certificate for a domain and its alternative names (or adopt an "
        "existing one by ARN), write the DNS validation records to Route53 and wait until "
        "the certificate is ISSUED."
    )
    stages: ClassVar[tuple[str, ...]] = (
        "plan",
        "request",
        "validate_dns",
        "await_issued",
        "verify",
    )
    lane_description: ClassVar[str] = (
        "aws-infrastructure: one root owner at a time, shared with add-domain and onboard-domain"
    )
    input_schema: ClassVar[dict[str, Any]] = fields.object_schema(
        title="add-certificate input",
        description="The certificate to request or adopt.",
        properties={
            "domain": fields.hostname_property(
                "Domain",
                "The certificate's primary name; may be a wildcard (*.example.com).",
                ["example.com", "*.example.com"],
                documented_pattern=fields.documented_hostname_pattern(wildcard=True),
            ),
            "alternative_names": {
                "title": "Alternative names",
                "description": "Further names on the certificate (wildcards allowed). Each is "
                "normalized like the domain; order and duplicates are ignored, and the domain "
                "itself is dropped from the list.",
                "type": "array",
                "items": fields.hostname_property(
                    "Alternative name",
                    "A subject alternative name.",
                    ["www.example.com"],
                    documented_pattern=fields.documented_hostname_pattern(wildcard=True),
                ),
                "maxItems": 100,
                "default": [],
                "examples": [[], ["www.example.com", "*.example.com"]],
            },
            "ticket_ids": fields.TICKET_IDS,
            "kirby_mode": fields.KIRBY_MODE,
            "dry_run": fields.DRY_RUN,
            "certificate_arn": fields.CERTIFICATE_ARN,
        },
        required=["domain"],
        examples=[
            {"domain": "example.com"},
            {
                "domain": "Example.COM.",
                "alternative_names": ["www.example.com", "*.example.com"],
                "ticket_ids": ["ops-123"],
                "kirby_mode": "enabled",
                "dry_run": True,
                "certificate_arn": None,
            },
            {
                "domain": "example.org",
                "certificate_arn": (
                    "arn:aws:acm:us-east-1:123456789012:certificate/"
                    "0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f"
                ),
            },
        ],
    )

    def check_semantics(self, data: Mapping[str, Any]) -> list[FieldError]:
        errors = fields.hostname_errors("/domain", data["domain"], allow_wildcard=True)
        for index, name in enumerate(data.get("alternative_names", [])):
            errors += fields.hostname_errors(
                f"/alternative_names/{index}", name, allow_wildcard=True
            )
        return errors

    def canonicalize(self, data: Mapping[str, Any]) -> dict[str, Any]:
        filled = fields.with_defaults(self.input_schema, data)
        domain = fields.normalize_hostname(filled["domain"])
        return {
            **filled,
            "domain": domain,
            "alternative_names": fields.canonical_hostnames(
                filled["alternative_names"], exclude=domain
            ),
            "ticket_ids": fields.canonical_ticket_ids(filled["ticket_ids"]),
            "certificate_arn": fields.canonical_arn(filled["certificate_arn"]),
        }

    def subject(self, data: Mapping[str, Any]) -> str:
        return str(data.get("domain") or "")

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return LaneClaim("aws-infrastructure")

    def continue_after_success(
        self, canonical: Mapping[str, Any], stage_outputs: Mapping[str, Any]
    ) -> bool:
        """A succeeded add-certificate is continued when asked for again unless its ``verify``
        output records ``certificate_status == "ISSUED"`` together with a truthy
        ``validation_records_in_place`` (a missing verify output counts as work remaining).

        A dry run never continues: its verify stage observed a simulation, so there is no
        contract work to finish.
        """
        if canonical.get("dry_run") is True:
            return False
        verify = stage_outputs.get("verify")
        done = (
            isinstance(verify, Mapping)
            and verify.get("certificate_status") == "ISSUED"
            and bool(verify.get("validation_records_in_place"))
        )
        return not done

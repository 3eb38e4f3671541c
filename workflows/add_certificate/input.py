"""add-certificate: request (or adopt) an ACM certificate and make it ISSUED via DNS validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from workflows import fields
from workflows.base import LaneClaim, Workflow, WorkflowInput

_WILDCARD = fields.documented_hostname_pattern(wildcard=True)


class AddCertificateInput(WorkflowInput):
    """The certificate to request or adopt."""

    model_config = ConfigDict(
        title="add-certificate input",
        json_schema_extra={
            "examples": [
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
            ]
        },
    )

    domain: Annotated[
        str,
        fields.Hostname(
            "Domain",
            "The certificate's primary name; may be a wildcard (*.example.com).",
            ["example.com", "*.example.com"],
            wildcard=True,
            documented_pattern=_WILDCARD,
        ),
    ]
    alternative_names: Annotated[
        list[
            Annotated[
                str,
                fields.Hostname(
                    "Alternative name",
                    "A subject alternative name.",
                    ["www.example.com"],
                    wildcard=True,
                    documented_pattern=_WILDCARD,
                ),
            ]
        ],
        Field(
            title="Alternative names",
            description="Further names on the certificate (wildcards allowed). Each is "
            "normalized like the domain; order and duplicates are ignored, and the domain "
            "itself is dropped from the list.",
            max_length=100,
            examples=[[], ["www.example.com", "*.example.com"]],
        ),
    ] = []
    ticket_ids: fields.TicketIds = []
    kirby_mode: fields.KirbyMode = "disabled"
    dry_run: fields.DryRun = False
    certificate_arn: fields.CertificateArn = None

    @field_validator("alternative_names")
    @classmethod
    def _without_the_domain(cls, names: list[str], info: ValidationInfo) -> list[str]:
        return fields.canonical_hostnames(names, exclude=info.data.get("domain", ""))


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
    # ACM validates for up to 72 hours (stages.ISSUED_TIMEOUT_SECONDS), waiting on DNS that a
    # registrar's delegation may take a day or more to serve: the run's deadline lets that
    # wait end on its own terms (VALIDATION_TIMED_OUT, wait_timed_out), plus the hour of
    # waits around it.
    deadline_seconds: ClassVar[float | None] = (72 + 1) * 3600
    Input: ClassVar[type[WorkflowInput]] = AddCertificateInput

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

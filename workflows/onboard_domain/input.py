"""onboard-domain: create the hosted zone, then everything add-domain does."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict

from workflows import fields
from workflows.add_domain.input import EXAMPLES, AddDomain, AddDomainInput
from workflows.base import WorkflowInput


class OnboardDomainInput(AddDomainInput):
    """The domain to onboard and how to route it."""

    model_config = ConfigDict(
        title="onboard-domain input", json_schema_extra={"examples": EXAMPLES}
    )

    domain: Annotated[
        str,
        fields.Hostname(
            "Domain",
            "The domain to onboard, e.g. example.com (no wildcard). Alfred creates its "
            "hosted zone.",
            ["example.com", "shop.example.com"],
        ),
    ]


class OnboardDomain(AddDomain):
    """Same input, canonical form and lane as add-domain; one more stage up front."""

    name = "onboard-domain"
    title = "Onboard domain"
    description = (
        "Create the domain's Route53 hosted zone (reporting the NS delegation to set at the "
        "registrar as assistance), then do what add-domain does: certificate, DNS alias "
        "records, platform routing and nginx booking."
    )
    stages: ClassVar[tuple[str, ...]] = (
        "plan",
        "hosted_zone",
        "certificate",
        "dns",
        "routing",
        "booking",
        "verify",
    )
    lane_description: ClassVar[str] = (
        "aws-infrastructure: one root owner at a time, shared with add-domain and "
        "add-certificate; its child add-certificate runs under this execution's ownership"
    )
    Input: ClassVar[type[WorkflowInput]] = OnboardDomainInput

"""The five workflows, in the order GET /api/v1/workflows lists them."""

from __future__ import annotations

from workflows import (
    add_certificate,
    add_domain,
    add_subdomain,
    onboard_domain,
    update_lambda_version,
)
from workflows.base import Workflow

WORKFLOWS: dict[str, Workflow] = {
    wf.name: wf
    for wf in (
        onboard_domain.workflow,
        add_domain.workflow,
        add_certificate.workflow,
        update_lambda_version.workflow,
        add_subdomain.workflow,
    )
}

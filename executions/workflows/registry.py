"""The five workflows, by name, in the order GET /api/v1/workflows lists them."""

from __future__ import annotations

from executions.workflows import (
    add_certificate,
    add_domain,
    add_subdomain,
    onboard_domain,
    update_lambda_version,
)
from executions.workflows.base import Workflow

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


def get_workflow(name: str) -> Workflow:
    """Raises KeyError for an unknown name."""
    return WORKFLOWS[name]


def all_workflows() -> list[Workflow]:
    return list(WORKFLOWS.values())

"""The five workflows, by name, in the order GET /api/v1/workflows lists them."""

from __future__ import annotations

from importlib import import_module

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


def register_extra(module_path: str) -> None:
    """Add the workflows of ``module_path`` (its ``WORKFLOWS`` list): ALFRED_EXTRA_WORKFLOWS,
    used by the tests to run workflows of their own through the API and the engine."""
    for workflow in import_module(module_path).WORKFLOWS:
        WORKFLOWS[workflow.name] = workflow


def get_workflow(name: str) -> Workflow:
    """Raises KeyError for an unknown name."""
    return WORKFLOWS[name]


def all_workflows() -> list[Workflow]:
    return list(WORKFLOWS.values())

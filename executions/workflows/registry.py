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


# ALFRED_EXTRA_WORKFLOWS: workflows of the tests, run through the API and the engine like the
# five, kept apart from them.
EXTRA_WORKFLOWS: dict[str, Workflow] = {}


def register_extra(module_path: str) -> None:
    """Add the workflows of ``module_path`` (its ``WORKFLOWS`` list)."""
    for workflow in import_module(module_path).WORKFLOWS:
        EXTRA_WORKFLOWS[workflow.name] = workflow


def get_workflow(name: str) -> Workflow:
    """Raises KeyError for an unknown name."""
    return WORKFLOWS.get(name) or EXTRA_WORKFLOWS[name]


def all_workflows() -> list[Workflow]:
    return [*WORKFLOWS.values(), *EXTRA_WORKFLOWS.values()]

from importlib import import_module

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from executions.catalog import workflow_register, workflows_all
from workflows.registry import WORKFLOWS


class WorkflowsConfig(AppConfig):
    """Registers the five workflows at start, then the ``WORKFLOWS`` of each module in
    ``ALFRED_EXTRA_WORKFLOWS`` (the tests' and the benches' own, run through the API and the
    engine like the five; one of the same name stands in for it), and checks that the approval
    policy names only workflows registered."""

    name = "workflows"

    def ready(self) -> None:
        from executions.approvals import policy

        for workflow in WORKFLOWS.values():
            workflow_register(workflow)
        for module in settings.ALFRED_EXTRA_WORKFLOWS:
            for workflow in import_module(module).WORKFLOWS:
                workflow_register(workflow)
        # A rule naming a workflow Alfred does not run would never apply: refused at start.
        problems = policy().problems(workflow.name for workflow in workflows_all())
        if problems:
            raise ImproperlyConfigured(
                f"ALFRED_APPROVAL_POLICY: {policy().source}: {'; '.join(problems)}"
            )

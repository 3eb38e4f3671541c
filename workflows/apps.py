from importlib import import_module

from django.apps import AppConfig
from django.conf import settings

from executions.catalog import workflow_register
from workflows.registry import WORKFLOWS


class WorkflowsConfig(AppConfig):
    """Registers the five workflows at start, then the ``WORKFLOWS`` of each module in
    ``ALFRED_EXTRA_WORKFLOWS`` (the tests' and the benches' own, run through the API and the
    engine like the five; one of the same name stands in for it)."""

    name = "workflows"

    def ready(self) -> None:
        for workflow in WORKFLOWS.values():
            workflow_register(workflow)
        for module in settings.ALFRED_EXTRA_WORKFLOWS:
            for workflow in import_module(module).WORKFLOWS:
                workflow_register(workflow)

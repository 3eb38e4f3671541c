from django.apps import AppConfig


class LanesConfig(AppConfig):
    """Lanes import nothing of executions: the executions app, when ready, installs the
    lanes' port (``lanes.effects``) and connects the reconciler to its terminal transitions
    (``ExecutionsConfig.ready``)."""

    name = "lanes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alfred.problems import problems_register
        from lanes.api import PROBLEMS

        problems_register(*PROBLEMS)

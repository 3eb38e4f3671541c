from django.apps import AppConfig
from django.db.models.signals import post_migrate

from alfred.budgets import budget_from_settings
from alfred.metrics import provider_call_count, state_register
from providers.budgets import budget_install
from providers.observe import observer_add


class AlfredConfig(AppConfig):
    name = "alfred"
    verbose_name = "Alfred access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alfred import schema  # noqa: F401 - registers the OpenAPI auth extension
        from alfred.metrics_state import ALFRED_GAUGES, SqlGauges
        from alfred.users import groups_ensure

        post_migrate.connect(groups_ensure, sender=self, dispatch_uid="alfred.groups_ensure")
        observer_add(provider_call_count)
        budget_install(budget_from_settings())
        state_register(SqlGauges(ALFRED_GAUGES))

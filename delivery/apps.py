from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    """Connects the relay's hint after an emission that owes webhook deliveries (the outbox
    knows no relay) and registers how the API answers the delivery's refusal."""

    name = "delivery"

    def ready(self) -> None:
        from alfred.problems import problems_register
        from delivery.api.problems import PROBLEMS
        from delivery.relay import relay_publish
        from executions.outbox import deliveries_owed_connect

        deliveries_owed_connect(relay_publish)
        problems_register(*PROBLEMS)

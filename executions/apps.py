from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    name = "executions"
    default_auto_field = "django.db.models.BigAutoField"

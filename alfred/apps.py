from django.apps import AppConfig


class AlfredConfig(AppConfig):
    name = "alfred"
    verbose_name = "Alfred access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alfred import schema  # noqa: F401 - registers the OpenAPI auth extension

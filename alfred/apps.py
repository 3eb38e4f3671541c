from django.apps import AppConfig


class AlfredConfig(AppConfig):
    name = "alfred"
    verbose_name = "Alfred access"
    default_auto_field = "django.db.models.BigAutoField"

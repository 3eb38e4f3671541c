"""Both admin groups read the records 0007 added (webhook attempts, inbound notifications),
as alfred/migrations/0003_groups.py gave them every other record's view permission."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

NEW = ("view_webhookattempt", "view_inboundnotification")


def forwards(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    seeing = Permission.objects.filter(content_type__app_label="executions", codename__in=NEW)
    for group in Group.objects.filter(name__in=["alfred-viewers", "alfred-operators"]):
        group.permissions.add(*seeing)


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0007_events_webhooks_receivers"),
        ("alfred", "0003_groups"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]

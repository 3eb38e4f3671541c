"""Tokens act as a stable principal id (``prn_…``), no longer as ``token:<name>``.

Existing tokens of one name were rotations or reuse, which cannot be told apart afterwards:
they share one principal, and every record made as ``token:<name>`` (executions, keys, hook
signals, audit entries) moves to it."""

import alfred.ids
from django.db import migrations, models

from alfred.ids import new_id


def forwards(apps, schema_editor):
    ApiToken = apps.get_model("alfred", "ApiToken")
    by_name = {}
    for name in ApiToken.objects.values_list("name", flat=True).distinct():
        by_name[name] = new_id("prn")
        ApiToken.objects.filter(name=name).update(principal_id=by_name[name])
    moves = [
        ("Execution", "principal"),
        ("DeliveryKey", "principal"),
        ("HookSignal", "principal"),
        ("AuditEntry", "actor"),
    ]
    for model_name, field in moves:
        model = apps.get_model("executions", model_name)
        for name, principal in by_name.items():
            model.objects.filter(**{field: f"token:{name}"}).update(**{field: principal})


class Migration(migrations.Migration):
    dependencies = [
        ("alfred", "0001_initial"),
        ("executions", "0005_operate_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="principal_id",
            field=models.CharField(max_length=40, null=True),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apitoken",
            name="principal_id",
            field=models.CharField(
                db_index=True, default=alfred.ids.Prefixed("prn"), max_length=40
            ),
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="role",
            field=models.CharField(
                choices=[
                    ("integration", "Integration"),
                    ("viewer", "Viewer"),
                    ("operator", "Operator"),
                ],
                max_length=20,
            ),
        ),
    ]

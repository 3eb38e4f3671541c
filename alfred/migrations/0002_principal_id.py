"""Tokens act as a stable principal id (``prn_…``), no longer as ``token:<name>``.

Existing tokens of one name were rotations or reuse, which cannot be told apart afterwards:
they share one principal, and every record made as ``token:<name>`` (executions, keys, hook
signals, audit entries) moves to it. Children, recorded as ``execution:<parent>``, now belong
to their root's owner, as new children do. Backwards, principal ids become ``token:<name>``
again and children ``execution:<parent>``: what the code before this migration reads."""

import alfred.ids
from django.db import migrations, models

from alfred.ids import new_id

# (model, field) recorded under a principal.
RECORDS = [
    ("Execution", "principal"),
    ("DeliveryKey", "principal"),
    ("HookSignal", "principal"),
    ("AuditEntry", "actor"),
]


def forwards(apps, schema_editor):
    ApiToken = apps.get_model("alfred", "ApiToken")
    Execution = apps.get_model("executions", "Execution")
    by_name = {}
    for name in ApiToken.objects.values_list("name", flat=True).distinct():
        by_name[name] = new_id("prn")
        ApiToken.objects.filter(name=name).update(principal_id=by_name[name])
    for model_name, field in RECORDS:
        model = apps.get_model("executions", model_name)
        for name, principal in by_name.items():
            model.objects.filter(**{field: f"token:{name}"}).update(**{field: principal})
    # Children: parents before their children (a child is created after its parent), so a
    # parent's principal is final when its children read it.
    children = Execution.objects.filter(principal__startswith="execution:").order_by("created_at")
    for child_id, parent_id in children.values_list("id", "parent_id"):
        owner = Execution.objects.filter(pk=parent_id).values_list("principal", flat=True).first()
        if owner is not None:
            Execution.objects.filter(pk=child_id).update(principal=owner)


def backwards(apps, schema_editor):
    ApiToken = apps.get_model("alfred", "ApiToken")
    Execution = apps.get_model("executions", "Execution")
    names = dict(ApiToken.objects.values_list("principal_id", "name"))
    for model_name, field in RECORDS:
        model = apps.get_model("executions", model_name)
        for principal, name in names.items():
            model.objects.filter(**{field: principal}).update(**{field: f"token:{name}"})
    for child_id, parent_id in Execution.objects.filter(parent__isnull=False).values_list(
        "id", "parent_id"
    ):
        Execution.objects.filter(pk=child_id).update(principal=f"execution:{parent_id}")


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
        migrations.RunPython(forwards, backwards),
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

"""The two admin groups (docs/contract.md, "Authentication, roles and ownership"): ``alfred-viewers`` read everything; ``alfred-operators``
also operate (``executions.operate``: cancel, retry, approve, roll back, recover lanes, revoke
tokens) and manage webhook endpoints. Neither may touch users, groups or the beat schedule:
those stay with superusers, whom Alfred's own docs never create."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEW_APPS = ("alfred", "executions", "lanes", "django_celery_beat")
OPERATOR_EXTRA = (
    ("executions", "operate"),
    ("executions", "add_webhookendpoint"),
    ("executions", "change_webhookendpoint"),
    ("executions", "delete_webhookendpoint"),
)


def forwards(apps, schema_editor):
    # Permissions are created after migrations (post_migrate); a fresh database has none yet.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    viewing = Permission.objects.filter(
        content_type__app_label__in=VIEW_APPS, codename__startswith="view_"
    )
    viewers, _ = Group.objects.get_or_create(name="alfred-viewers")
    viewers.permissions.set(viewing)
    operators, _ = Group.objects.get_or_create(name="alfred-operators")
    extra = [
        Permission.objects.get(content_type__app_label=app, codename=codename)
        for app, codename in OPERATOR_EXTRA
    ]
    operators.permissions.set([*viewing, *extra])


def backwards(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(
        name__in=["alfred-viewers", "alfred-operators"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("alfred", "0002_principal_id"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("executions", "0005_operate_permission"),
        ("lanes", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]

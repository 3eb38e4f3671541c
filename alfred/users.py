"""Admin logins for people: operators and viewers (docs/contract.md, "Authentication, roles and
ownership"), never superusers.

A login's role is its group: ``alfred-operators`` (every action) or ``alfred-viewers`` (read
only). Both are staff, so they can sign in to the admin; neither may manage users, groups or
the beat schedule. A migration made the groups (``alfred/migrations/0003_groups.py``), and
``groups_ensure`` keeps them after every ``migrate`` and ``flush`` (``post_migrate``): a flush
empties every table, and without it no login could be given a role afterwards. It only adds:
the groups get every ``view_`` permission of Alfred's apps (a model added later included) and
the operators' extra ones; a permission a superuser added by hand stays."""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps
from django.contrib.auth import get_user_model
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import AbstractUser, Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.db import connections, router, transaction
from django.db.migrations.recorder import MigrationRecorder

from alfred.principals import OPERATORS_GROUP, VIEWERS_GROUP, Role
from alfred.readonly import writes_allowed

GROUPS: dict[str, str] = {Role.OPERATOR: OPERATORS_GROUP, Role.VIEWER: VIEWERS_GROUP}
# Both groups see every record of these apps; operators also operate and manage endpoints.
VIEW_APPS = ("alfred", "executions", "lanes", "django_celery_beat")
OPERATOR_EXTRA = (
    ("executions", "operate"),
    ("executions", "add_webhookendpoint"),
    ("executions", "change_webhookendpoint"),
    ("executions", "delete_webhookendpoint"),
)


def groups_ensure(*, using: str = "default", apps: Any = global_apps, **_: Any) -> None:
    """Both groups exist with at least their permissions. Receives ``post_migrate`` for this
    app only (alfred.apps), so it runs once after every ``migrate`` and ``flush``: Django's
    hook for the rows a database must hold (as it makes permissions there), and the one a
    flush sends. Only once the groups' migration is applied: a partial ``migrate`` may lack
    the tables, and one back past it removed the groups on purpose (a flush keeps the record
    of applied migrations). Some of these apps come after this one in the signal's round, so
    their permissions are made here first (``create_permissions`` makes only what is
    missing)."""
    if not router.allow_migrate_model(using, Group):
        return
    if ("alfred", "0003_groups") not in MigrationRecorder(connections[using]).applied_migrations():
        return
    for label in VIEW_APPS:  # as Django's own receiver is given them: the app, not its state
        create_permissions(global_apps.get_app_config(label), verbosity=0, using=using, apps=apps)
    viewing = list(
        Permission.objects.using(using).filter(
            content_type__app_label__in=VIEW_APPS, codename__startswith="view_"
        )
    )
    extra = [
        Permission.objects.using(using).get(content_type__app_label=app, codename=codename)
        for app, codename in OPERATOR_EXTRA
    ]
    for name, permissions in ((VIEWERS_GROUP, viewing), (OPERATORS_GROUP, [*viewing, *extra])):
        group = Group.objects.using(using).get_or_create(name=name)[0]
        group.permissions.add(*permissions)


@transaction.atomic
def user_set(*, username: str, role: str, password: str | None = None) -> AbstractUser:
    """Create the login or change its role (and its password, when given). Takes away any
    superuser flag: a login's authority is its group."""
    writes_allowed()
    if role not in GROUPS:
        raise ValueError(f"role must be one of {', '.join(GROUPS)}")
    user, created = get_user_model().objects.get_or_create(username=username)
    if password is not None:
        validate_password(password, user)
        user.set_password(password)
    elif created:
        user.set_unusable_password()
    user.is_staff = True
    user.is_superuser = False
    user.is_active = True
    user.save()
    user.groups.set([Group.objects.get(name=GROUPS[role])])
    user.user_permissions.clear()
    return user


def user_deactivate(*, username: str) -> bool:
    writes_allowed()
    return bool(get_user_model().objects.filter(username=username).update(is_active=False))

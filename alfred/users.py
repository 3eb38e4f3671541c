"""Admin logins for people: operators and viewers (DESIGN §8), never superusers.

A login's role is its group: ``alfred-operators`` (every action) or ``alfred-viewers`` (read
only), both created by a migration (``alfred/migrations/0003_groups.py``). Both are staff, so
they can sign in to the admin; neither may manage users, groups or the beat schedule."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from alfred.principals import OPERATORS_GROUP, VIEWERS_GROUP, Role
from alfred.readonly import writes_allowed

GROUPS: dict[str, str] = {Role.OPERATOR: OPERATORS_GROUP, Role.VIEWER: VIEWERS_GROUP}


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

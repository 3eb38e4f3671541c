"""Logins' roles: the two admin groups outlive a ``flush`` (a login can be given a role
afterwards, and the groups hold what their migration gave them: alfred.users.groups_ensure,
on post_migrate), and ``alfred_user set`` gives a role from a script as from a terminal."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command

from alfred.principals import OPERATORS_GROUP, VIEWERS_GROUP
from alfred.users import OPERATOR_EXTRA, VIEW_APPS, user_set

pytestmark = pytest.mark.django_db(transaction=True)


def _codenames(group: str) -> set[tuple[str, str]]:
    return set(
        Group.objects.get(name=group).permissions.values_list("content_type__app_label", "codename")
    )


def test_after_a_flush_both_groups_are_back_with_their_permissions_and_roles_can_be_given():
    # when
    call_command("flush", interactive=False, verbosity=0)

    # then
    viewing = set(
        Permission.objects.filter(
            content_type__app_label__in=VIEW_APPS, codename__startswith="view_"
        ).values_list("content_type__app_label", "codename")
    )
    assert ("executions", "view_execution") in viewing
    assert ("lanes", "view_lane") in viewing
    assert ("django_celery_beat", "view_periodictask") in viewing
    assert _codenames(VIEWERS_GROUP) == viewing
    assert _codenames(OPERATORS_GROUP) == viewing | set(OPERATOR_EXTRA)
    assert list(
        user_set(username="ops", role="operator").groups.values_list("name", flat=True)
    ) == [OPERATORS_GROUP]
    assert list(user_set(username="eyes", role="viewer").groups.values_list("name", flat=True)) == [
        VIEWERS_GROUP
    ]


def test_a_migrate_gives_back_a_missing_permission_and_keeps_one_a_superuser_added():
    # given: the viewers lost one of theirs and were given one by hand
    viewers = Group.objects.get(name=VIEWERS_GROUP)
    before = _codenames(VIEWERS_GROUP)
    lost = Permission.objects.get(content_type__app_label="lanes", codename="view_lane")
    by_hand = Permission.objects.get(content_type__app_label="lanes", codename="change_lane")
    viewers.permissions.remove(lost)
    viewers.permissions.add(by_hand)

    # when
    call_command("migrate", verbosity=0)

    # then
    assert _codenames(VIEWERS_GROUP) == before | {("lanes", "change_lane")}
    assert Group.objects.filter(name__in=[VIEWERS_GROUP, OPERATORS_GROUP]).count() == 2


def test_a_migrate_back_past_the_groups_removes_them_and_forward_brings_them_back():
    try:
        call_command("migrate", "alfred", "0002", verbosity=0)
        assert not Group.objects.filter(name__in=[VIEWERS_GROUP, OPERATORS_GROUP]).exists()
    finally:
        call_command("migrate", verbosity=0)
    assert _codenames(OPERATORS_GROUP) >= set(OPERATOR_EXTRA)


def test_without_a_terminal_alfred_user_set_says_how_to_give_the_password(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(CommandError, match="--password-stdin"):
        call_command("alfred_user", "set", "nobody", "--role", "viewer")
    assert not Group.objects.get(name=VIEWERS_GROUP).user_set.filter(username="nobody").exists()

    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough passphrase 42\n"))
    call_command("alfred_user", "set", "nobody", "--role", "viewer", "--password-stdin")
    assert authenticate(username="nobody", password="a long enough passphrase 42") is not None

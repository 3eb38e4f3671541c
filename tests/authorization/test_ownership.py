"""Ownership (docs/contract.md "Authentication, roles and ownership"): the stable principal
id, not a token's name; the same operation under another principal; reading what one holds
a key for; children; links; a staff flag that gives nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from alfred.tokens import token_create, token_revoke, token_rotate
from executions.models import AuditEntry, DeliveryKey, Execution
from tests.authorization.test_matrix import _fail
from tests.support.factories import ExecutionFactory
from tests.support.helpers import SUBDOMAIN, assert_problem, submit

pytestmark = pytest.mark.django_db


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_a_rotated_token_keeps_its_executions_a_new_token_under_the_old_name_does_not():
    # given: an execution of the token "bot"
    first, raw = token_create(name="bot", role="integration")
    execution = submit(_bearer(raw), "add-subdomain", SUBDOMAIN).json()["id"]

    # when: the token is rotated, then revoked and created again under the same name
    rotated, rotated_raw = token_rotate(name="bot", role="integration")
    token_revoke(name="bot")
    _, reborn_raw = token_create(name="bot", role="integration")

    # then: the rotation acts as the same principal, the newcomer as nobody it knows
    assert (
        rotated.principal_id == first.principal_id == Execution.objects.get(pk=execution).principal
    )
    assert _bearer(rotated_raw).get(f"/api/v1/executions/{execution}").status_code == 401
    reborn = _bearer(reborn_raw)
    assert_problem(reborn.get(f"/api/v1/executions/{execution}"), 404, "not_found")
    assert_problem(reborn.post(f"/api/v1/executions/{execution}/cancel"), 404, "not_found")
    assert execution not in {e["id"] for e in reborn.get("/api/v1/executions").json()["results"]}
    assert Execution.objects.get(pk=execution).status == "queued"


def test_the_same_operation_of_another_integration_is_refused_unnamed_and_audited(api):
    # given: an integration's failed execution
    owned = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    _fail(owned)
    _, raw = token_create(name="rival", role="integration")

    # when: another integration asks for the same operation under a new key
    response = submit(_bearer(raw), "add-subdomain", SUBDOMAIN, key="rival-1")

    # then: 409 naming neither the execution nor its owner; nothing continued; audited
    body = assert_problem(response, 409, "identity_conflict")
    assert owned not in response.content.decode()
    assert "execution" not in body and "principal" not in body
    assert Execution.objects.get(pk=owned).status == "failed"
    assert not DeliveryKey.objects.filter(key="rival-1").exists()
    entry = AuditEntry.objects.get(action="execution.identity_refused")
    assert entry.target_id == owned and entry.data["idempotency_key"] == "rival-1"
    assert entry.data["would_be"] == "continued"


def test_an_operator_continues_an_integrations_execution_which_stays_the_integrations(
    api, operator_api
):
    owned = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    _fail(owned)

    answer = submit(operator_api, "add-subdomain", SUBDOMAIN).json()

    assert answer["id"] == owned and answer["acceptance"]["outcome"] == "continued"
    assert AuditEntry.objects.filter(action="execution.continued", target_id=owned).exists()
    # the owner still reads and cancels it; the operator's key reads it too
    assert api.get(f"/api/v1/executions/{owned}").status_code == 200
    assert api.post(f"/api/v1/executions/{owned}/cancel").status_code == 202


def test_a_key_holder_reads_an_execution_it_does_not_own_but_cannot_act_on_it(api):
    # given: an execution of another principal the caller holds a key for (records from
    # before ownership was enforced)
    _, raw = token_create(name="first", role="integration")
    execution = submit(_bearer(raw), "add-subdomain", SUBDOMAIN).json()["id"]
    me = submit(api, "add-subdomain", {**SUBDOMAIN, "subdomain": "mine"}).json()
    principal = Execution.objects.get(pk=me["id"]).principal
    DeliveryKey.objects.create(
        principal=principal, key="legacy", fingerprint="-", execution_id=execution, outcome="reused"
    )

    detail = api.get(f"/api/v1/executions/{execution}")

    assert detail.status_code == 200
    assert set(detail.json()["links"]) == {"self", "events", "stream"}  # no control it may not use
    assert_problem(api.post(f"/api/v1/executions/{execution}/cancel"), 403, "permission_denied")
    assert Execution.objects.get(pk=execution).status == "queued"


def test_a_child_belongs_to_its_parents_owner(api):
    from executions.runtime.children import child_create

    parent = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]

    child, adopted = child_create(parent, "add-subdomain", {**SUBDOMAIN, "subdomain": "kid"})

    assert not adopted
    assert Execution.objects.get(pk=child).principal == Execution.objects.get(pk=parent).principal
    assert api.get(f"/api/v1/executions/{child}").status_code == 200


def test_a_staff_flag_alone_is_no_role_and_view_permissions_make_a_viewer_only(api):
    execution = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    staff = get_user_model().objects.create_user("staff", is_staff=True)
    client = APIClient()
    client.force_login(staff)

    assert_problem(client.get("/api/v1/executions"), 403, "permission_denied")

    # given view permissions (what the "staff user with only view permissions" had)
    staff.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    client.force_login(get_user_model().objects.get(pk=staff.pk))
    assert client.get(f"/api/v1/executions/{execution}").status_code == 200
    assert_problem(client.post(f"/api/v1/executions/{execution}/cancel"), 403, "permission_denied")
    assert_problem(
        client.post(
            "/api/v1/lanes/aws-infrastructure/recover",
            {"expected_owner": None, "reason": "try"},
            format="json",
        ),
        403,
        "permission_denied",
    )
    assert Execution.objects.get(pk=execution).status == "queued"


def test_a_token_name_is_checked_before_anything_is_stored():
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from alfred.models import ApiToken

    long_name = "n" * 100
    call_command("alfred_token", "create", "--name", long_name, "--role", "integration")
    for bad in ("n" * 101, "has space", "nul\x00", "-leading"):
        with pytest.raises(CommandError, match="token name"):
            call_command("alfred_token", "create", f"--name={bad}", "--role", "integration")
    assert list(ApiToken.objects.values_list("name", flat=True)) == [long_name]


def test_the_migration_moves_name_based_records_to_one_principal_per_name(api):
    import importlib

    from django.apps import apps

    from alfred.models import ApiToken

    migration = importlib.import_module("alfred.migrations.0002_principal_id")
    # given: records made as "token:<name>" before principal ids, by two tokens of one name
    old, _ = token_create(name="legacy", role="integration")
    token_revoke(name="legacy")
    new, _ = token_create(name="legacy", role="integration")
    execution = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    Execution.objects.filter(pk=execution).update(principal="token:legacy")
    DeliveryKey.objects.filter(execution_id=execution).update(principal="token:legacy")
    child: Execution = ExecutionFactory.create(
        principal=f"execution:{execution}", parent_id=execution, status="succeeded"
    )

    migration.forwards(apps, None)

    tokens = ApiToken.objects.filter(name="legacy")
    principals = set(tokens.values_list("principal_id", flat=True))
    assert len(principals) == 1 and principals != {old.principal_id, new.principal_id}
    (principal,) = principals
    assert Execution.objects.get(pk=execution).principal == principal
    assert DeliveryKey.objects.get(execution_id=execution).principal == principal
    assert Execution.objects.get(pk=child.pk).principal == principal  # the root's owner

    # and backwards: what the code before the migration reads
    migration.backwards(apps, None)
    assert Execution.objects.get(pk=execution).principal == "token:legacy"
    assert DeliveryKey.objects.get(execution_id=execution).principal == "token:legacy"
    assert Execution.objects.get(pk=child.pk).principal == f"execution:{execution}"


@pytest.mark.django_db(transaction=True)
def test_two_rotations_at_once_keep_the_principal():
    import threading
    import time

    from django.db import connection, transaction

    from alfred.models import ApiToken

    first, _ = token_create(name="busy", role="integration")
    started = threading.Event()

    def slow_rotation() -> None:
        try:
            with transaction.atomic():
                token_rotate(name="busy", role="integration")
                started.set()
                time.sleep(0.5)  # holds its lock: the other rotation waits behind it
        finally:
            connection.close()

    thread = threading.Thread(target=slow_rotation)
    thread.start()
    assert started.wait(10)
    token_rotate(name="busy", role="integration")
    thread.join()

    active = ApiToken.objects.get(name="busy", revoked_at__isnull=True)
    assert active.principal_id == first.principal_id
    assert set(ApiToken.objects.values_list("principal_id", flat=True)) == {first.principal_id}

"""A reason follows one rule everywhere (issue 37, item 17; docs/contract.md, "Input rules"):
the API, the admin and the commands (``alfred_executions``, ``alfred_lanes recover``) refuse
the same reasons (over 1,000 characters as sent, a control character but tab and newline, a
bidirectional override), and require one exactly where the control says so (rollback and a
lane's recovery: something besides whitespace), optional elsewhere (approve among them)."""

from __future__ import annotations

import io

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from alfred.users import user_set
from executions.models import AuditEntry, Execution, ExecutionStatus, Hook, HookStatus
from lanes.models import Lane, LaneState
from tests.support.helpers import SUBDOMAIN, assert_problem, paused_on_a_plan, submit

pytestmark = pytest.mark.django_db

PLAN = "a" * 64
# What the issue saw the commands take: 5,017 characters with ANSI escapes and U+202E.
HOSTILE = "\x1b[31mgo\x1b[0m \u202e" + "x" * 5000 + "\u202c done"
REFUSED = {
    "over-1000-characters-as-sent": "x" * 1000 + " ",
    "ansi-escape": "\x1b[31mred\x1b[0m",
    "bidi-override": "ok\u202eko",
    "hostile": HOSTILE,
}
BLANK = "   "


@pytest.fixture
def failed(api) -> str:
    """A failed add-subdomain: rollback asks for a reason."""
    execution_id = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    Execution.objects.filter(pk=execution_id).update(
        status=ExecutionStatus.FAILED, finished_at=timezone.now()
    )
    return execution_id


@pytest.fixture
def paused(api) -> str:
    execution_id = submit(api, "add-subdomain", {**SUBDOMAIN, "subdomain": "p"}).json()["id"]
    paused_on_a_plan(execution_id, PLAN)
    return execution_id


@pytest.fixture
def blocked(api) -> tuple[str, str]:
    """A lane blocked for an operator, and its owner."""
    owner = submit(api, "add-subdomain", {**SUBDOMAIN, "subdomain": "o"}).json()["id"]
    Lane.objects.create(
        key="lambda:r:production", state=LaneState.RECOVERY_REQUIRED, owner_id=owner
    )
    return "lambda:r:production", owner


def _operator() -> Client:
    user_set(username="operator", role="operator", password="Zq8!x7pLm2#v")
    client = Client()
    client.force_login(get_user_model().objects.get(username="operator"))
    return client


def _admin_control(execution_id: str, control: str) -> str:
    return reverse(f"admin:executions_execution_{control}", args=[quote(execution_id)])


def _rolled_back(execution_id: str) -> bool:
    return AuditEntry.objects.filter(target_id=execution_id, action="execution.rollback").exists()


def _command(*args: str) -> None:
    call_command(*args, "--actor", "alice", stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.parametrize("reason", [*REFUSED.values(), BLANK], ids=[*REFUSED, "blank"])
def test_a_reason_the_api_refuses_every_face_refuses(operator_api, failed, reason):
    # the API (the reference)
    response = operator_api.post(
        f"/api/v1/executions/{failed}/rollback", {"reason": reason}, format="json"
    )
    assert_problem(response, 422, "invalid_input")

    # the admin: the form again
    response = _operator().post(_admin_control(failed, "rollback"), {"reason": reason})
    assert response.status_code == 200 and "errorlist" in response.content.decode()

    # the command: its usage error, naming --reason
    with pytest.raises(CommandError, match="argument --reason"):
        _command("alfred_executions", "rollback", failed, "--reason", reason)

    assert not _rolled_back(failed)


@pytest.mark.parametrize("reason", [*REFUSED.values(), BLANK], ids=[*REFUSED, "blank"])
def test_a_lane_recovery_refuses_the_same_reasons_on_every_face(operator_api, blocked, reason):
    key, owner = blocked
    response = operator_api.post(
        f"/api/v1/lanes/{key}/recover", {"expected_owner": owner, "reason": reason}, format="json"
    )
    assert_problem(response, 422, "invalid_input")

    with pytest.raises(CommandError, match="argument --reason"):
        _command("alfred_lanes", "recover", key, "--owner", owner, "--reason", reason)

    assert Lane.objects.get(key=key).state == LaneState.RECOVERY_REQUIRED


@pytest.mark.parametrize("control", ["cancel", "retry"])
def test_an_optional_reason_the_api_refuses_the_command_refuses_too(failed, paused, control):
    target = paused if control == "cancel" else failed
    before = Execution.objects.get(pk=target).status

    with pytest.raises(CommandError, match="argument --reason"):
        _command("alfred_executions", control, target, "--reason", HOSTILE)

    assert Execution.objects.get(pk=target).status == before
    assert not AuditEntry.objects.filter(target_id=target).exists()


def test_a_reason_that_fits_is_stored_trimmed_from_the_command(failed):
    _command("alfred_executions", "rollback", failed, "--reason", "  drifted DNS \n")

    entry = AuditEntry.objects.get(target_id=failed, action="execution.rollback")
    assert entry.reason == "drifted DNS"


def test_an_approval_needs_no_reason_on_any_face(operator_api, paused):
    # the API took none already; the command and the admin ask for none either
    _command("alfred_executions", "approve", paused, "--plan-hash", PLAN, "--wait", "0")
    assert Hook.objects.get(execution_id=paused).status == HookStatus.SIGNALLED

    second = submit(operator_api, "add-subdomain", {**SUBDOMAIN, "subdomain": "q"}).json()["id"]
    paused_on_a_plan(second, PLAN)
    response = _operator().post(_admin_control(second, "approve"), {"plan_hash": PLAN})
    assert response.status_code == 302
    assert Hook.objects.get(execution_id=second).status == HookStatus.SIGNALLED


def test_a_rollback_needs_a_reason_on_every_face(operator_api, failed):
    response = operator_api.post(f"/api/v1/executions/{failed}/rollback", {}, format="json")
    assert_problem(response, 422, "invalid_input")

    response = _operator().post(_admin_control(failed, "rollback"), {})
    assert response.status_code == 200 and "errorlist" in response.content.decode()

    with pytest.raises(CommandError, match="--reason"):
        _command("alfred_executions", "rollback", failed)

    assert not _rolled_back(failed)

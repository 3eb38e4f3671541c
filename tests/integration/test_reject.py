"""Reject on every face (issue 37, item 16): the API (``POST /executions/{id}/reject``) and
``manage.py alfred_executions reject`` reject exactly the plan they name, as the admin does:
a hash that is not the pending one (the plan changed since it was read) is refused with the
hash waiting now and nothing canceled; a malformed one with the API's format message. No
worker needed: a paused execution is canceled at once."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from executions.controls import PLAN_HASH_EXPECTED
from executions.models import AuditEntry, Execution, ExecutionStatus, Hook, HookStatus
from tests.support.helpers import SUBDOMAIN, assert_problem, paused_on_a_plan, submit

pytestmark = pytest.mark.django_db

PLAN = "a" * 64
OTHER = "b" * 64


@pytest.fixture
def paused(api) -> str:
    execution_id = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]
    paused_on_a_plan(execution_id, PLAN)
    return execution_id


def _reject(client, execution_id: str, body: dict[str, object]):
    return client.post(f"/api/v1/executions/{execution_id}/reject", body, format="json")


def _status(execution_id: str) -> str:
    return Execution.objects.values_list("status", flat=True).get(pk=execution_id)


def test_an_operator_rejects_the_plan_it_names_over_the_api(operator_api, paused):
    # given: the resource offers reject to an operator, beside approve
    links = operator_api.get(f"/api/v1/executions/{paused}").json()["links"]
    assert links["reject"] == f"/api/v1/executions/{paused}/reject"

    # when
    response = _reject(operator_api, paused, {"plan_hash": PLAN, "reason": "not this week"})

    # then: canceled at once, the checkpoint dropped, the audit entry says which plan and why
    assert response.status_code == 202, response.content
    assert response.json()["status"] == ExecutionStatus.CANCELED
    assert "reject" not in response.json()["links"]
    assert Hook.objects.get(execution_id=paused).status == HookStatus.CANCELED
    entry = AuditEntry.objects.get(target_id=paused, action="execution.cancel")
    assert entry.reason == f"rejected the plan {PLAN}: not this week"
    assert entry.data["rejected_plan"] == PLAN


def test_a_reason_is_optional_as_for_approve(operator_api, paused):
    response = _reject(operator_api, paused, {"plan_hash": PLAN})

    assert response.status_code == 202, response.content
    entry = AuditEntry.objects.get(target_id=paused, action="execution.cancel")
    assert entry.reason == f"rejected the plan {PLAN}"


def test_another_hash_is_a_stale_plan_naming_the_one_waiting_and_cancels_nothing(
    operator_api, paused
):
    body = assert_problem(_reject(operator_api, paused, {"plan_hash": OTHER}), 409, "stale_plan")

    assert body["plan_hash"] == PLAN
    assert _status(paused) == ExecutionStatus.PAUSED


def test_a_malformed_hash_is_the_format_error(operator_api, paused):
    body = assert_problem(_reject(operator_api, paused, {"plan_hash": "zz"}), 422, "invalid_input")

    assert "64 lower-case hex digits" in str(body["errors"])
    assert _status(paused) == ExecutionStatus.PAUSED


def test_the_owner_integration_may_cancel_but_not_reject(api, paused):
    assert "reject" not in api.get(f"/api/v1/executions/{paused}").json()["links"]

    assert_problem(_reject(api, paused, {"plan_hash": PLAN}), 403, "permission_denied")
    assert _status(paused) == ExecutionStatus.PAUSED


def test_nothing_to_reject_once_no_plan_waits(operator_api, api):
    execution_id = submit(api, "add-subdomain", SUBDOMAIN).json()["id"]  # queued, no plan

    assert_problem(_reject(operator_api, execution_id, {"plan_hash": PLAN}), 409, "invalid_state")


# -- the command line ------------------------------------------------------------------------


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("alfred_executions", *args, "--actor", "alice", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_command_rejects_the_plan_it_names(paused):
    said = _command("reject", paused, "--plan-hash", PLAN, "--reason", "wrong zone")

    assert said.strip() == f"{paused}: reject recorded; now canceled"
    entry = AuditEntry.objects.get(target_id=paused, action="execution.cancel")
    assert (entry.actor, entry.reason) == ("cli:alice", f"rejected the plan {PLAN}: wrong zone")


def test_the_command_refuses_a_stale_hash_and_names_the_one_waiting(paused):
    with pytest.raises(CommandError) as refused:
        _command("reject", paused, "--plan-hash", OTHER)

    assert f"the pending plan's hash is {PLAN}" in str(refused.value)
    assert f"then reject it with --plan-hash {PLAN}" in str(refused.value)
    assert _status(paused) == ExecutionStatus.PAUSED


@pytest.mark.parametrize("control", ["approve", "reject"])
def test_a_malformed_hash_is_the_apis_format_error_on_the_command_line(paused, control):
    # the issue: `approve --plan-hash zz` said "has another hash", as if a plan had changed
    with pytest.raises(CommandError) as refused:
        _command(control, paused, "--plan-hash", "zz", *(["--wait", "0"] * (control == "approve")))

    assert "argument --plan-hash" in str(refused.value)
    assert PLAN_HASH_EXPECTED in str(refused.value)
    assert "another hash" not in str(refused.value)
    assert _status(paused) == ExecutionStatus.PAUSED

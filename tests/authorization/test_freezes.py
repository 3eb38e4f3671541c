"""Change freezes through the admin, the API and the commands (docs/contract.md, "Change
freezes"); who they hold is ``freeze_hold``, the runtime's gate, read here against the rows a
held run leaves (the workflow's end-to-end tests hold a real run: test_add_subdomain.py)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from alfred.users import user_set
from executions.freezes import freeze_hold
from executions.models import (
    AuditEntry,
    Execution,
    ExecutionStatus,
    Freeze,
    FreezeExemption,
    RunKind,
    StepReceipt,
    Timer,
    TimerPurpose,
)
from tests.support.helpers import CERTIFICATE, assert_problem, submit

pytestmark = pytest.mark.django_db

PASSWORD = "Zq8!x7pLm2#v"


def _login(username: str, role: str) -> Client:
    user_set(username=username, role=role, password=PASSWORD)
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def _freeze(**fields: Any) -> Freeze:
    return Freeze.objects.create(
        reason=fields.pop("reason", "holiday"),
        starts_at=fields.pop("starts_at", timezone.now() - timedelta(minutes=1)),
        workflows=fields.pop("workflows", ["add-subdomain"]),
        subjects=fields.pop("subjects", ["*"]),
        created_by="cli:test",
        **fields,
    )


def _held(execution_id: str, freeze: Freeze) -> None:
    """As a held stage leaves its run: a pending hold timer on the freeze's topic."""
    execution = Execution.objects.get(pk=execution_id)
    Execution.objects.filter(pk=execution_id).update(status=ExecutionStatus.WAITING)
    Timer.objects.create(
        run_id=str(execution.current_run_id),
        stage="apply",
        key="hold:apply-batch",
        purpose=TimerPurpose.HOLD,
        due_at=timezone.now() + timedelta(minutes=15),
        topics=[f"freeze:{freeze.pk}"],
    )


def _mutated(run_id: str) -> None:
    """The run made a change: a mutation receipt, as a mutating step records it."""
    StepReceipt.objects.create(
        run_id=run_id,
        stage="apply",
        step_key="batch",
        sequence=1,
        kind="step",
        status="succeeded",
        output={},
        fence=1,
        mutation={"resource": "r", "action": "a", "undo": {}},
    )


def test_the_gate_holds_a_first_mutation_and_nothing_else(api: APIClient) -> None:
    execution_id = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": "w"}).json()
    execution_id = execution_id["id"]
    execution = Execution.objects.get(pk=execution_id)
    run_id = str(execution.current_run_id)
    assert freeze_hold(execution_id, "add-subdomain", run_id) is None  # no freeze

    freeze = _freeze(ends_at=timezone.now() + timedelta(hours=1))
    _freeze(reason="another zone", subjects=["*.acme.com"])
    _freeze(reason="planned", starts_at=timezone.now() + timedelta(days=1))
    hold = freeze_hold(execution_id, "add-subdomain", run_id)
    assert hold is not None and hold.topic == f"freeze:{freeze.pk}"
    assert freeze.ends_at is not None
    assert "holiday" in hold.reason and hold.until <= freeze.ends_at

    # a rollback's run is an operator's repair: never held
    execution.current_run.kind = RunKind.ROLLBACK
    execution.current_run.save(update_fields=["kind"])
    assert freeze_hold(execution_id, "add-subdomain", run_id) is None
    execution.current_run.kind = RunKind.INITIAL
    execution.current_run.save(update_fields=["kind"])
    # once it has mutated, a change half made is finished
    _mutated(run_id)
    assert freeze_hold(execution_id, "add-subdomain", run_id) is None


def test_an_operator_declares_a_freeze_in_the_admin_and_lets_one_through(api: APIClient) -> None:
    operator = _login("operator", "operator")
    add = reverse("admin:executions_freeze_add")
    assert operator.get(add).status_code == 200

    refused = operator.post(
        add,
        {
            "reason": "launch",
            "starts_at_0": "2026-01-01",
            "starts_at_1": "00:00:00",
            "ends_at_0": "2026-01-02",
            "ends_at_1": "00:00:00",
            "workflows_text": "add-subdomian",
            "subjects_text": "*",
        },
    )
    page = refused.content.decode()
    assert "has ended already" in page and "no workflow Alfred runs matches add-subdomian" in page
    assert not Freeze.objects.exists()

    declared = operator.post(
        add, {"reason": "launch week", "workflows_text": "add-subdomain", "subjects_text": "*"}
    )
    assert declared.status_code == 302, declared.content.decode()[-3000:]
    freeze = Freeze.objects.get()
    assert freeze.ends_at is None and freeze.workflows == ["add-subdomain"]
    assert AuditEntry.objects.filter(action="freeze.declare", target_id=freeze.pk).exists()
    listed = operator.get(reverse("admin:executions_freeze_changelist")).content.decode()
    assert "in force" in listed and "launch week" in listed

    execution_id = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": "x"}).json()
    execution_id = execution_id["id"]
    _held(execution_id, freeze)
    shown = operator.get(reverse("admin:executions_freeze_change", args=[quote(freeze.pk)]))
    assert execution_id in shown.content.decode() and "Let it through" in shown.content.decode()
    its_page = operator.get(reverse("admin:executions_execution_change", args=[execution_id]))
    assert "the freeze's page" in its_page.content.decode()
    assert f"The change freeze {freeze.pk} (launch week) holds it" in its_page.content.decode()
    exempt = reverse("admin:executions_freeze_exempt", args=[quote(freeze.pk), execution_id])
    assert "launch week" in operator.get(exempt).content.decode()
    assert operator.post(exempt, {"reason": "  "}).status_code == 200  # a reason is required
    assert not FreezeExemption.objects.exists()

    operator.post(exempt, {"reason": "the launch itself"})

    assert FreezeExemption.objects.get().reason == "the launch itself"
    assert AuditEntry.objects.filter(action="execution.let_through", target_id=execution_id)
    assert Timer.objects.get(key="hold:apply-batch").status == "fired"  # woken at once

    operator.post(
        reverse("admin:executions_freeze_changelist"),
        {"action": "end", "_selected_action": [freeze.pk]},
    )
    assert Freeze.objects.get().ended_at is not None


def test_a_viewer_reads_freezes_and_declares_none() -> None:
    _freeze()
    viewer = _login("viewer", "viewer")
    assert viewer.get(reverse("admin:executions_freeze_changelist")).status_code == 200
    assert viewer.get(reverse("admin:executions_freeze_add")).status_code == 403


def test_the_api_refuses_a_freeze_it_cannot_declare(operator_api: APIClient) -> None:
    answer = operator_api.post(
        "/api/v1/freezes",
        {"reason": "x", "workflows": ["nope-*"], "ends_at": "2020-01-01T00:00:00Z"},
        format="json",
    )
    body = assert_problem(answer, 409, "invalid_freeze")
    assert "no workflow Alfred runs matches nope-*" in body["detail"]
    assert "has ended already" in body["detail"]
    freeze = _freeze(ended_at=timezone.now())
    assert_problem(
        operator_api.post(f"/api/v1/freezes/{freeze.pk}/end", {}, format="json"),
        409,
        "invalid_state",
    )
    assert_problem(operator_api.get("/api/v1/freezes/frz_nothing"), 404, "not_found")


def test_the_commands_declare_list_exempt_and_end(api: APIClient) -> None:
    out = StringIO()
    call_command(
        "alfred_freezes", "declare", "--reason", "incident 7", "--workflow", "add-subdomain",
        "--subject", "*.example.com", "--actor", "alice", stdout=out,
    )  # fmt: skip
    freeze = Freeze.objects.get()
    assert out.getvalue().startswith(f"{freeze.pk}: declared; from ")
    assert freeze.created_by == "cli:alice" and freeze.subjects == ["*.example.com"]
    execution_id = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": "y"}).json()
    execution_id = execution_id["id"]
    _held(execution_id, freeze)

    rows = StringIO()
    call_command(
        "alfred_executions", "list", "--awaiting", "freeze", stdout=rows, stderr=StringIO()
    )
    assert execution_id in rows.getvalue() and "a change freeze (operator)" in rows.getvalue()
    listed = StringIO()
    call_command("alfred_freezes", "list", stdout=listed)
    assert "IN FORCE" in listed.getvalue() and f"holds: {execution_id}" in listed.getvalue()

    call_command(
        "alfred_freezes", "exempt", freeze.pk, execution_id, "--reason", "hotfix", stdout=out
    )
    assert FreezeExemption.objects.get().principal.startswith("cli:")
    call_command("alfred_freezes", "end", freeze.pk, stdout=out)
    assert Freeze.objects.get().ended_at is not None
    with pytest.raises(CommandError, match="has ended already"):
        call_command("alfred_freezes", "end", freeze.pk)
    with pytest.raises(CommandError, match="no workflow Alfred runs matches"):
        call_command("alfred_freezes", "declare", "--reason", "x", "--workflow", "typo")


def test_a_child_is_judged_with_the_execution_that_started_it(api: APIClient) -> None:
    root = submit(api, "add-domain", {"domain": "shop.example.com"}).json()["id"]
    child = submit(api, "add-certificate", CERTIFICATE).json()["id"]
    Execution.objects.filter(pk=child).update(parent_id=root)
    child_run = str(Execution.objects.get(pk=child).current_run_id)
    freeze = _freeze(workflows=["add-domain"])  # covers the root, not the child's workflow

    hold = freeze_hold(child, "add-certificate", child_run)
    assert hold is not None and hold.topic == f"freeze:{freeze.pk}"  # covered through its root

    _mutated(str(Execution.objects.get(pk=root).current_run_id))  # the root made a change
    assert freeze_hold(child, "add-certificate", child_run) is None
    StepReceipt.objects.all().delete()
    FreezeExemption.objects.create(
        freeze=freeze, execution_id=root, principal="cli:x", reason="the root was let through"
    )
    assert freeze_hold(child, "add-certificate", child_run) is None


def test_only_what_a_freeze_holds_can_be_let_through(
    api: APIClient, operator_api: APIClient
) -> None:
    freeze = _freeze(workflows=["add-subdomain"], subjects=["*.example.com"])
    elsewhere = submit(api, "add-subdomain", {"zone": "acme.com", "subdomain": "z"}).json()["id"]
    done = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": "d"}).json()["id"]
    Execution.objects.filter(pk=done).update(status=ExecutionStatus.SUCCEEDED)
    for execution_id, why in ((elsewhere, "does not cover it"), (done, "it is succeeded")):
        answer = operator_api.post(
            f"/api/v1/freezes/{freeze.pk}/exempt",
            {"execution": execution_id, "reason": "r"},
            format="json",
        )
        assert why in assert_problem(answer, 409, "invalid_state")["detail"]
    assert not FreezeExemption.objects.exists()

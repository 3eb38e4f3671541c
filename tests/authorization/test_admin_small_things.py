"""Small things an operator saw (issue 37, item 20), each against the real admin and API: the
execution list shows each status in its colour and marks a dry run; a rolled-back add-domain
asks for no assistance any more (admin and API), and its "took" is its work's, its rollback's
apart; a link to an approved plan says so in an operator's words, not the engine's
("signalled"); the audit log on the API names the user; a webhook URL the service refuses is
named by the JSON Pointer ``/url`` as every other invalid field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from alfred.tokens import token_create
from alfred.users import user_set
from executions.catalog import workflow_get
from executions.identity import logical_identity
from executions.models import Execution, ExecutionStatus, HookStatus, Run, RunKind, RunStatus
from tests.authorization.test_admin_controls import (
    PLAN_HASH,
    _control,
    _execution,
    _forward_run,
    _hook,
)
from tests.support.helpers import assert_problem

pytestmark = pytest.mark.django_db

NGINX = {
    "kind": "platform_nginx_deployment",
    "summary": "Deploy production nginx so that it serves shop.example",
    "action": "Platform: run the production nginx deployment from platform/nginx@abc",
    "stage": "booking",
}


@pytest.fixture
def operator() -> Client:
    user_set(username="operator", role="operator", password="Zq8!x7pLm2#v")
    client = Client()
    client.force_login(get_user_model().objects.get(username="operator"))
    return client


def _add_domain(status: str, **fields: Any) -> Execution:
    canonical = workflow_get("add-domain").canonicalize({"domain": "shop.example"})
    return Execution.objects.create(
        workflow="add-domain",
        principal="prn_owner",
        input=canonical,
        logical_identity=logical_identity("add-domain", canonical),
        status=status,
        **fields,
    )


def _ran(execution: Execution, number: int, kind: str, start: Any, end: Any) -> Run:
    run = Run.objects.create(
        execution=execution, number=number, kind=kind, status=RunStatus.SUCCEEDED
    )
    Run.objects.filter(pk=run.pk).update(created_at=start, started_at=start, finished_at=end)
    Execution.objects.filter(pk=execution.pk).update(current_run=run)
    return run


def _live(execution: Execution) -> str:
    return reverse("admin:executions_execution_live", args=[quote(execution.pk)])


def test_the_list_shows_each_status_in_its_colour_and_marks_a_dry_run(operator):
    _execution(ExecutionStatus.FAILED, "broken")
    _execution(ExecutionStatus.SUCCEEDED, "rehearsed", dry_run=True)

    html = operator.get(reverse("admin:executions_execution_changelist")).content.decode()

    assert '<span class="alfred-status status-failed">failed</span>' in html
    assert (
        '<span class="alfred-status status-succeeded">succeeded</span> '
        '<span class="alfred-dry-run">dry run</span>'
    ) in html
    assert html.count('class="alfred-dry-run"') == 1


def test_a_rolled_back_add_domain_asks_for_no_assistance_and_took_its_works_time(operator):
    # given: an add-domain that took 5 minutes and asked Platform for an nginx deployment,
    # rolled back two days later in 30 seconds
    accepted = timezone.now() - timedelta(days=2)
    execution = _add_domain(
        ExecutionStatus.ROLLED_BACK, assistance=[NGINX], finished_at=timezone.now()
    )
    Execution.objects.filter(pk=execution.pk).update(created_at=accepted)
    _ran(execution, 1, RunKind.INITIAL, accepted, accepted + timedelta(minutes=5))
    asked = timezone.now() - timedelta(seconds=30)
    _ran(execution, 2, RunKind.ROLLBACK, asked, timezone.now())

    # when: its page's header (the live part; the recorded fields below keep the record)
    html = operator.get(_live(execution)).content.decode()

    # then: the assistance is no longer asked for; the work took 5 min, the rollback 30 s
    assert "Deploy production nginx" not in html
    assert "Assistance asked for" not in html
    assert "Assistance no longer needed: the execution was rolled back" in html
    assert "took 5 min 0 s · its rollback took 3" in html  # 30 s, give or take the test's time
    assert "took 48 h" not in html
    # and the API asks nothing of Platform either
    _, raw = token_create(name="ops", role="operator")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get(f"/api/v1/executions/{execution.pk}").json()["assistance"] == []


def test_an_add_domain_not_rolled_back_still_asks_for_its_assistance(operator):
    execution = _add_domain(ExecutionStatus.SUCCEEDED, assistance=[NGINX])

    html = operator.get(_live(execution)).content.decode()

    assert "Assistance asked for" in html and "Deploy production nginx" in html


def test_a_link_to_an_approved_plan_says_it_was_approved(operator):
    execution = _execution(ExecutionStatus.RUNNING, "applied")
    run = _forward_run(execution, RunStatus.RUNNING, apply="running")
    _hook(execution, run, HookStatus.SIGNALLED, resolved_at=timezone.now())

    followed = operator.get(_control(execution, "approve"), {"plan_hash": PLAN_HASH}, follow=True)

    said = " ".join(str(m) for m in followed.context["messages"])
    assert f"the plan {PLAN_HASH} you followed a link to is already approved" in said
    assert "signalled" not in said


def test_the_audit_log_on_the_api_names_the_user(operator):
    execution = _execution(ExecutionStatus.FAILED, "audited")
    _forward_run(execution, RunStatus.FAILED, apply="failed")
    operator.post(_control(execution, "retry"), {"reason": "flaky"})
    user = get_user_model().objects.get(username="operator")
    _, raw = token_create(name="auditor", role="viewer")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    (entry,) = api.get("/api/v1/audit").json()["results"]

    assert entry["actor"] == f"user:{user.pk}"
    assert entry["actor_name"] == "operator"


def test_a_webhook_url_the_service_refuses_is_named_by_its_json_pointer(settings):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    settings.PRODUCTION = True
    _, raw = token_create(name="ops", role="operator")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    refused = api.post("/api/v1/webhooks/endpoints", {"url": "https://10.0.0.1/h"}, format="json")
    malformed = api.post("/api/v1/webhooks/endpoints", {"url": "not a url"}, format="json")

    assert [e["field"] for e in assert_problem(refused, 422, "invalid_input")["errors"]] == ["/url"]
    assert {e["field"] for e in assert_problem(malformed, 422, "invalid_input")["errors"]} == {
        "/url"
    }

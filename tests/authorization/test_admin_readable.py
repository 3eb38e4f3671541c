"""What the admin says is what an operator reads: an execution's page and its approval page
name what it acts on, who asked for it and the tickets; the audit log names its actors as
people know them; every moment is written one way, with its time zone; the user links lead
somewhere real; the names are spelled right; and the beat schedule, which nobody may change
here, is not shown to operators and viewers."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from alfred.tokens import token_create
from alfred.users import user_set
from executions.catalog import workflow_get
from executions.identity import logical_identity
from executions.models import (
    AuditEntry,
    Execution,
    ExecutionStatus,
    Hook,
    HookStatus,
    Run,
    RunKind,
    RunStatus,
)
from tests.authorization.test_admin_controls import PLAN_HASH, approval_payload
from tests.support.factories import StageFactory

pytestmark = pytest.mark.django_db
PASSWORD = "Zq8!x7pLm2#v"
MOMENT = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
WRITTEN = "2026-03-04 05:06:07 UTC"


@pytest.fixture
def users() -> None:
    user_set(username="operator", role="operator", password=PASSWORD)
    user_set(username="viewer", role="viewer", password=PASSWORD)


def _login(username: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def _execution(workflow: str, raw: dict[str, Any], principal: str, **fields: Any) -> Execution:
    canonical = workflow_get(workflow).canonicalize(raw)
    return Execution.objects.create(
        workflow=workflow,
        principal=principal,
        input=canonical,
        logical_identity=logical_identity(workflow, canonical),
        **fields,
    )


def _text(html: str) -> str:
    """The page's words, tags and runs of white space gone."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _paused_by_a_token() -> tuple[Execution, str]:
    token = token_create(name="ticket-bot", role="integration")[0]
    execution = _execution(
        "add-subdomain",
        {"zone": "example.com", "subdomain": "shop", "ticket_ids": ["OPS-7", "OPS-9"]},
        token.principal_id,
        status=ExecutionStatus.PAUSED,
    )
    run = Run.objects.create(
        execution=execution, number=1, kind=RunKind.INITIAL, status=RunStatus.WAITING
    )
    execution.current_run = run
    execution.save(update_fields=["current_run"])
    StageFactory(run=run, name="plan", position=0, status="succeeded", started_at=MOMENT)
    Hook.objects.create(
        execution=execution,
        run=run,
        stage="apply",
        name="approve",
        token=f"approve-{execution.pk}",
        operator=True,
        payload=approval_payload(),
        status=HookStatus.PENDING,
        expires_at=MOMENT + timedelta(days=7),
    )
    Hook.objects.filter(execution=execution).update(created_at=MOMENT)
    Execution.objects.filter(pk=execution.pk).update(created_at=MOMENT)
    return execution, token.principal_id


def test_the_execution_and_approval_pages_name_the_subject_the_requester_and_the_tickets(users):
    # given: an add-subdomain a token asked for, paused on its approval
    execution, principal = _paused_by_a_token()
    client = _login("operator")

    # when
    page = client.get(reverse("admin:executions_execution_change", args=[quote(execution.pk)]))
    approve = client.get(reverse("admin:executions_execution_approve", args=[quote(execution.pk)]))

    # then: both say what, who and why, the id beside them, not instead of them
    for response in (page, approve):
        assert response.status_code == 200
        html = response.content.decode()
        text = _text(html)
        assert "Subject shop.example.com" in text
        assert f"Requested by ticket-bot ({principal})" in text
        assert "Tickets OPS-7, OPS-9" in text
        assert f"Execution {execution.pk}" in text
        assert f"({execution.workflow})" not in text
    title = re.search(r"<title>(.*?)</title>", page.content.decode(), re.S)
    assert title and title[1].startswith(f"add-subdomain shop.example.com · {execution.pk}")
    assert "add-subdomain shop.example.com" in _text(approve.content.decode().split("<h1>")[1])
    assert PLAN_HASH in approve.content.decode()


@pytest.mark.parametrize(
    ("workflow", "raw", "subject"),
    [
        ("add-domain", {"domain": "Shop.Example.com"}, "shop.example.com"),
        ("add-certificate", {"domain": "pay.example.com"}, "pay.example.com"),
        (
            "update-lambda-version",
            {"target": "checkout-api", "environment": "production", "version": 42},
            "checkout-api on production → version 42",
        ),
    ],
)
def test_each_workflow_names_what_it_acts_on(users, workflow, raw, subject):
    execution = _execution(workflow, raw, "user:999")

    html = (
        _login("viewer")
        .get(reverse("admin:executions_execution_change", args=[quote(execution.pk)]))
        .content.decode()
    )

    text = _text(html)
    assert f"Subject {subject}" in text
    assert "Requested by user:999" in text  # a user since deleted: the principal is all there is
    assert "Tickets none" in text


def test_audit_actors_are_named_as_people_know_them(users):
    # given: entries by a user and by a token that recorded no name, and one that did
    operator = get_user_model().objects.get(username="operator")
    token = token_create(name="deploy-bot", role="operator")[0]
    for actor, data in [
        (f"user:{operator.pk}", {}),
        (token.principal_id, {}),
        ("user:12345", {"actor_name": "gone-since"}),
        ("cli:ops", {}),
    ]:
        AuditEntry.objects.create(
            actor=actor, action="lane.recover", target_type="lane", target_id="x", data=data
        )
    entry = AuditEntry.objects.get(actor=token.principal_id)

    # when
    listed = _login("viewer").get(reverse("admin:executions_auditentry_changelist"))
    shown = _login("viewer").get(
        reverse("admin:executions_auditentry_change", args=[quote(entry.pk)])
    )

    # then: names in the list, the principal id only on hover (and in the entry's own page)
    cells = re.findall(r'<td class="field-who">(.*?)</td>', listed.content.decode(), re.S)
    assert sorted(_text(cell).strip() for cell in cells) == sorted(
        ["operator", "deploy-bot", "gone-since", "cli:ops"]
    )
    assert f'title="{token.principal_id}"' in listed.content.decode()
    text = _text(shown.content.decode())
    assert "deploy-bot" in text and token.principal_id in text


def test_every_moment_is_written_one_way_with_its_time_zone(users):
    # given
    execution, _ = _paused_by_a_token()
    AuditEntry.objects.create(
        actor="cli:ops", action="execution.cancel", target_type="execution", target_id="e"
    )
    AuditEntry.objects.update(created_at=MOMENT)
    client = _login("operator")
    pages = [
        reverse("admin:executions_auditentry_changelist"),
        reverse("admin:executions_execution_changelist"),
        reverse("admin:executions_execution_change", args=[quote(execution.pk)]),
        reverse("admin:executions_execution_approve", args=[quote(execution.pk)]),
    ]

    for path in pages:
        # when
        html = client.get(path).content.decode()

        # then: this moment as one format writes it, and no other format anywhere
        assert WRITTEN in html, path
        assert "March 4, 2026" not in html and "a.m." not in html, path
        moments = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)?(?: \w+)?", _text(html))
        assert moments and all(re.fullmatch(r".* \d\d:\d\d:\d\d UTC", m) for m in moments), (
            path,
            moments,
        )
    approval = _text(client.get(pages[-1]).content.decode())
    assert "Expires 2026-03-11 05:06:07 UTC" in approval


def test_the_user_links_lead_to_the_api_docs_not_to_a_404(users):
    client = _login("viewer")

    html = client.get(reverse("admin:index")).content.decode()

    assert "View site" not in html
    href = re.search(r'<a href="([^"]+)" id="alfred-api-docs">API docs</a>', html)
    assert href and client.get(href[1]).status_code == 200


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_tokens_are_api_tokens_and_the_beat_schedule_is_not_shown(users, role):
    client = _login(role)

    index = client.get(reverse("admin:index")).content.decode()
    beat = client.get(reverse("admin:django_celery_beat_periodictask_changelist"))

    assert "API tokens" in index and "Api tokens" not in index
    assert "Periodic tasks" not in index and "django_celery_beat" not in index
    assert client.get(reverse("admin:app_list", args=["django_celery_beat"])).status_code == 404
    assert beat.status_code == 403


def test_a_superuser_still_sees_the_beat_schedule_read_only(admin_client):
    index = admin_client.get(reverse("admin:index")).content.decode()

    assert "Periodic tasks" in index
    assert (
        admin_client.get(reverse("admin:django_celery_beat_periodictask_changelist")).status_code
        == 200
    )


def test_a_moment_is_written_in_the_zone_it_is_shown_in():
    # the format names the zone of the moment it writes: not UTC by assumption
    from django.utils.formats import date_format

    with timezone.override("Europe/Paris"):
        written = date_format(timezone.localtime(MOMENT), "DATETIME_FORMAT")

    assert written == "2026-03-04 06:06:07 CET"

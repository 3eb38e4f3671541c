"""Every admin page renders, for an operator and a viewer, on a normal and on a read-only
instance: the index, each app's index, every changelist, the add page where the role may add,
and the change page of every object — executions in every status with runs of every kind,
and everything hanging off them. The net under every later admin change: a page that 500s
for some object fails here."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.db import models
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from alfred.tokens import token_create
from alfred.users import user_set
from executions.catalog import workflow_get
from executions.identity import logical_identity
from executions.models import (
    AuditEntry,
    DeliveryKey,
    Drift,
    DriftWatch,
    Execution,
    ExecutionStatus,
    Hook,
    InboundNotification,
    OutboxEvent,
    ReceiptStatus,
    Run,
    RunKind,
    RunStatus,
    StepReceipt,
    Timer,
    TimerPurpose,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from lanes.models import Lane, LaneState, LaneWaiter
from tests.authorization.test_admin_controls import PLAN_HASH, approval_payload
from tests.support.factories import StageFactory

pytestmark = pytest.mark.django_db
PASSWORD = "Zq8!x7pLm2#v"
RUN_STATUS = {
    ExecutionStatus.QUEUED: RunStatus.PENDING,
    ExecutionStatus.RUNNING: RunStatus.RUNNING,
    ExecutionStatus.WAITING: RunStatus.WAITING,
    ExecutionStatus.PAUSED: RunStatus.WAITING,
    ExecutionStatus.SUCCEEDED: RunStatus.SUCCEEDED,
    ExecutionStatus.FAILED: RunStatus.FAILED,
    ExecutionStatus.CANCELED: RunStatus.CANCELED,
    ExecutionStatus.ROLLED_BACK: RunStatus.SUCCEEDED,
}


@pytest.fixture
def records() -> None:
    """One execution per status; each has a run of every kind, with stages, receipts,
    timers, a hook (the paused one's current run: add-subdomain's approval checkpoint),
    events and a delivery key; a held lane with a queue; tokens; a webhook."""
    now = timezone.now()
    executions = []
    for number, status in enumerate(ExecutionStatus):
        subdomain = {"zone": "example.com", "subdomain": f"page{number}"}
        canonical = workflow_get("add-subdomain").canonicalize(subdomain)
        terminal = status not in (
            ExecutionStatus.QUEUED,
            ExecutionStatus.RUNNING,
            ExecutionStatus.WAITING,
            ExecutionStatus.PAUSED,
        )
        execution = Execution.objects.create(
            workflow="add-subdomain",
            principal="prn_x",
            input=canonical,
            logical_identity=logical_identity("add-subdomain", canonical),
            status=status,
            finished_at=now if terminal else None,
            error={"code": "fatal", "message": "given"} if status == "failed" else None,
            result={"ok": True} if status == "succeeded" else None,
            lane_key="aws-infrastructure",
        )
        for number, kind in enumerate(RunKind, start=1):
            run = Run.objects.create(
                execution=execution, number=number, kind=kind, status=RUN_STATUS[status]
            )
            StageFactory(run=run, name="plan", position=0, status="succeeded", output={"a": 1})
            StepReceipt.objects.create(
                run=run,
                stage="plan",
                step_key="read",
                sequence=1,
                status=ReceiptStatus.SUCCEEDED,
                output={"x": 1},
                mutation={"undo": "none"},
                fence=1,
            )
            Timer.objects.create(
                run=run, stage="plan", key="t", purpose=TimerPurpose.SLEEP, due_at=now
            )
            checkpoint = status == ExecutionStatus.PAUSED and kind == RunKind.ROLLBACK  # current
            Hook.objects.create(
                execution=execution,
                run=run,
                stage="plan",
                name="approve",
                token=f"h-{run.pk}",
                operator=checkpoint,
                payload=approval_payload() if checkpoint else {},
                expires_at=now if checkpoint else None,
            )
        execution.current_run = run
        execution.save()
        OutboxEvent.objects.create(
            execution=execution, sequence=1, key=f"{execution.pk}:1", type="execution.accepted"
        )
        DeliveryKey.objects.create(
            principal="prn_x",
            key=f"k-{execution.pk}",
            fingerprint="f",
            execution=execution,
            outcome="created",
        )
        executions.append(execution)
    succeeded = next(e for e in executions if e.status == ExecutionStatus.SUCCEEDED)
    succeeded.drift = Drift.objects.create(
        execution=succeeded,
        findings=[
            {
                "what": "A page4.example.com",
                "expected": {"alias": {"dns_name": "edge."}},
                "found": None,
            }
        ],
        digest="d" * 64,
        first_seen_at=now,
        last_seen_at=now,
    )
    succeeded.save()
    DriftWatch.objects.create(
        execution=succeeded,
        finished_at=now,
        due_at=now,
        checks=1,
        checked_at=now,
        outcome="drifted",
    )
    Lane.objects.create(
        key="aws-infrastructure", state=LaneState.HELD, owner=executions[0], version=3
    )
    Lane.objects.create(
        key="lambda:a:b", state=LaneState.RECOVERY_REQUIRED, owner=executions[1], reason="x"
    )
    LaneWaiter.objects.create(lane_id="aws-infrastructure", execution=executions[1], token="t")
    AuditEntry.objects.create(
        actor="cli:ops", action="execution.cancel", target_type="execution", target_id="e"
    )
    endpoint = WebhookEndpoint.objects.create(
        url="https://hooks.example.com/a", secret="whsec_hidden"
    )
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event=OutboxEvent.objects.all()[0], status="failed", attempts=1
    )
    WebhookAttempt.objects.create(
        delivery=delivery, number=1, status_code=500, duration_ms=12, response_excerpt="<oops>"
    )
    InboundNotification.objects.create(source="github", delivery_id="d-1", topics=["github:a/b"])
    token_create(name="a-token", role="integration")
    user_set(username="operator", role="operator", password=PASSWORD)
    user_set(username="viewer", role="viewer", password=PASSWORD)


def _pages() -> list[tuple[str, type[models.Model]]]:
    return [
        (f"{model._meta.app_label}.{model._meta.model_name}", model)
        for model in admin.site._registry
    ]


@pytest.fixture(params=["operator", "viewer"])
def role(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[False, True], ids=["normal", "read-only"])
def read_only(request: pytest.FixtureRequest) -> Any:
    with override_settings(ALFRED_READ_ONLY=request.param):
        yield request.param


def _login(role: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=role))
    return client


def test_the_index_and_every_app_index_render(records, role, read_only):
    client = _login(role)
    assert client.get(reverse("admin:index")).status_code == 200
    for app in {model._meta.app_label for model in admin.site._registry}:
        response = client.get(reverse("admin:app_list", args=[app]))
        assert response.status_code in (200, 404), app  # 404: nothing in it for this role


@pytest.mark.parametrize(("label", "model"), _pages(), ids=[p[0] for p in _pages()])
def test_every_changelist_and_change_page_renders(records, role, read_only, label, model):
    client = _login(role)
    model_admin = admin.site._registry[model]
    info = (model._meta.app_label, model._meta.model_name)
    changelist = client.get(reverse("admin:{}_{}_changelist".format(*info)))
    if changelist.status_code != 200:
        # only what the role may not see at all: Django's users and groups, and the beat
        # schedule (nobody changes it here), for both roles
        assert changelist.status_code == 403, label
        assert model._meta.app_label in ("auth", "django_celery_beat"), label
        return
    assert b"errornote" not in changelist.content

    add = client.get(reverse("admin:{}_{}_add".format(*info)))
    may_add = model_admin.has_add_permission(_request(client, role))
    assert add.status_code == (200 if may_add else 403), label

    for obj in model._default_manager.all()[:50]:
        page = client.get(reverse("admin:{}_{}_change".format(*info), args=[obj.pk]))
        assert page.status_code == 200, (label, obj.pk, page.content[:300])
        if model is Execution and obj.status == ExecutionStatus.PAUSED:
            assert b'id="pending-approval"' in page.content and PLAN_HASH.encode() in page.content
            assert (b'class="alfred-control' in page.content) is (
                role == "operator" and not read_only
            )
        if model is Execution and obj.status == ExecutionStatus.SUCCEEDED:
            assert b'id="drift"' in page.content and b"A page4.example.com" in page.content
            assert (b"Accept the drift" in page.content) is (role == "operator" and not read_only)
        if model is Drift:
            assert b"A page4.example.com" in page.content and b"edge." in page.content
            listed = client.get(
                reverse("admin:executions_drift_changelist") + "?workflow=add-subdomain&status=open"
            )
            assert listed.status_code == 200 and obj.pk.encode() in listed.content
        if model is WebhookEndpoint:
            assert b"whsec_hidden" not in page.content  # a secret is never shown again
        if read_only or model_admin.has_change_permission(_request(client, role), obj) is False:
            assert b'name="_save"' not in page.content, (label, obj.pk)


def test_a_lanes_page_links_its_owner_to_the_owners_page(records):
    """The lanes reach the executions' admin through their port (``lanes.effects``)."""
    lane = Lane.objects.get(key="aws-infrastructure")
    assert lane.owner_id is not None
    owner_page = f"/admin/executions/execution/{quote(lane.owner_id)}/change/"
    html = _login("viewer").get("/admin/lanes/lane/").content.decode()
    assert f'href="{owner_page}"' in html
    assert _login("viewer").get(owner_page).status_code == 200


def test_no_action_is_offered_on_a_read_only_instance_or_to_a_viewer(records, role, read_only):
    client = _login(role)
    for model, model_admin in admin.site._registry.items():
        request = _request(client, role)
        actions = set(model_admin.get_actions(request)) - {"delete_selected"}
        if read_only or role == "viewer":
            assert not actions, (model, actions)


def _request(client: Client, role: str) -> Any:
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username=role)
    return request


@pytest.mark.parametrize(
    "path",
    [
        "/admin/executions/execution/%00/change/",
        "/admin/executions/execution/%00/history/",
        "/admin/executions/execution/%00/delete/",
        "/admin/lanes/lane/a%00b/change/",
        "/admin/alfred/apitoken/%00/change/",
        "/admin/executions/webhookendpoint/%00/change/",
        "/admin/executions/execution/?status__exact=%00",
        "/admin/executions/execution/?workflow__exact=a%00b",
        "/admin/executions/execution/?q=%00",
        "/admin/executions/execution/?created_at__year=99999999999999999999",
        "/admin/executions/execution/?created_at__year=2026&created_at__month=13",
        "/admin/executions/execution/?nonsense__field=1",
    ],
)
def test_a_crafted_admin_address_is_refused_not_a_500(records, role, path):
    response = _login(role).get(path)

    assert response.status_code in (302, 400, 404), response.status_code
    if response.status_code == 302:  # Django's "invalid filter" or "no such object" redirect
        assert response["Location"].startswith("/admin/")


@pytest.mark.parametrize(
    "event_types", ['["a\\u0000b"]', "[" * 5000, "1e999", "x y", "Execution.Failed"]
)
def test_a_webhook_form_refuses_bad_event_types_with_a_message(records, event_types):
    client = _login("operator")

    response = client.post(
        "/admin/executions/webhookendpoint/add/",
        {"url": "https://hooks.example.com/b", "event_types": event_types, "active": "on"},
    )

    assert response.status_code == 200 and b"errorlist" in response.content
    assert not WebhookEndpoint.objects.filter(url="https://hooks.example.com/b").exists()


def test_a_webhook_secret_is_shown_once_on_its_own_page_and_rotated_the_same_way(records):
    client = _login("operator")

    created = client.post(
        "/admin/executions/webhookendpoint/add/",
        {
            "url": "https://hooks.example.com/c",
            "event_types": "execution.failed, execution.succeeded",
            "active": "on",
        },
    )

    endpoint = WebhookEndpoint.objects.get(url="https://hooks.example.com/c")
    assert created.status_code == 200 and endpoint.secret.encode() in created.content
    assert endpoint.event_types == ["execution.failed", "execution.succeeded"]
    assert "no-store" in created["Cache-Control"]
    assert all(endpoint.secret not in str(c.value) for c in created.cookies.values())
    change = client.get(f"/admin/executions/webhookendpoint/{endpoint.pk}/change/")
    assert endpoint.secret.encode() not in change.content
    assert b"execution.failed, execution.succeeded" in change.content

    selected = {"action": "rotate_secret", "_selected_action": [endpoint.pk]}
    asked = client.post("/admin/executions/webhookendpoint/", selected)
    assert b'name="confirm"' in asked.content
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).secret == endpoint.secret

    rotated = client.post(
        "/admin/executions/webhookendpoint/", {**selected, "confirm": "yes", "reason": "leaked"}
    )
    fresh = WebhookEndpoint.objects.get(pk=endpoint.pk).secret
    assert fresh != endpoint.secret and fresh.encode() in rotated.content
    assert "no-store" in rotated["Cache-Control"]


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "https://[fe80::1]/x",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://127.0.0.1/x",
        "https://10.0.0.8/x",
        "https://user:pw@hooks.example.com/x",
        "ftp://hooks.example.com/x",
    ],
)
def test_a_webhook_aimed_at_metadata_or_private_addresses_is_refused(records, url):
    response = _login("operator").post(
        "/admin/executions/webhookendpoint/add/", {"url": url, "event_types": "", "active": "on"}
    )

    assert response.status_code == 200 and b"errorlist" in response.content
    assert not WebhookEndpoint.objects.filter(url=url).exists()

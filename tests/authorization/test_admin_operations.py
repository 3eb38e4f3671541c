"""What issue 15 added to the operator's admin, through Django's test client: the live part and
the JSON history of an execution's page, reject and superseded plans, the index's "waiting
for you", the bulk actions' confirmation pages (cancel, retry, rollback, lane recovery,
webhook redelivery) and the executions list's search. The browser tests
(tests/browser) drive the same pages in chromium."""

# ruff: noqa: F811 (pytest fixtures imported from the controls' tests, used as arguments)

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from executions.models import (
    AuditEntry,
    Execution,
    ExecutionStatus,
    Hook,
    HookStatus,
    OutboxEvent,
    ReceiptStatus,
    Run,
    RunStatus,
    StepReceipt,
    Timer,
    WebhookDelivery,
    WebhookEndpoint,
)
from lanes.models import Lane, LaneState, LaneWaiter
from tests.authorization.test_admin_controls import (  # noqa: F401 (fixtures)
    PLAN_HASH,
    _control,
    _execution,
    _forward_run,
    _hook,
    _login,
    _page,
    approved,
    failed_in_rollback,
    paused,
    users,
)
from tests.support.factories import StageFactory

pytestmark = pytest.mark.django_db
OTHER_HASH = "4a" * 32


def _admin_url(name: str, execution: Execution) -> str:
    return reverse(f"admin:executions_execution_{name}", args=[quote(execution.pk)])


# -- the execution's page ---------------------------------------------------------------------


def test_the_live_part_is_the_header_and_timeline_and_has_no_control_for_a_viewer(paused):
    for role, controls in (("operator", True), ("viewer", False)):
        response = _login(role).get(_admin_url("live", paused))

        html = response.content.decode()
        assert response.status_code == 200 and "no-store" in response["Cache-Control"]
        assert 'id="alfred-header"' in html and 'data-status="paused"' in html
        assert 'id="timeline"' in html and "Run #1 · initial · waiting (current)" in html
        assert ('class="alfred-control' in html) is controls
        assert "<html" not in html  # a fragment, swapped into the page


def test_the_page_follows_the_execution_from_its_last_event(paused):
    html = _login("viewer").get(_page(paused)).content.decode()

    stream = reverse("execution-events-stream", kwargs={"execution_id": paused.pk})
    assert f'data-stream="{stream}"' in html
    assert f'data-after="{paused.last_sequence}"' in html
    assert f'data-fragment="{_admin_url("live", paused)}"' in html


def test_the_history_downloads_as_one_json_document(approved):
    AuditEntry.objects.create(
        actor="user:1", action="execution.approve", target_type="execution", target_id=approved.pk
    )

    response = _login("viewer").get(_admin_url("history_json", approved))

    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="{approved.pk}.json"'
    history = json.loads(response.content)
    assert history["execution"]["id"] == approved.pk
    assert history["execution"]["status"] == "succeeded"
    [run] = history["runs"]
    assert [s["name"] for s in run["stages"]] == ["plan", "apply", "verify"]
    assert [r["step_key"] for r in run["receipts"]] == ["read", "batch"]
    assert run["checkpoints"][0]["payload"]["plan_hash"] == PLAN_HASH
    assert [e["type"] for e in history["events"]] == ["hook.signalled", "execution.succeeded"]
    assert [a["action"] for a in history["audit"]] == ["execution.approve"]


def test_a_stranger_gets_no_live_part_and_no_history(paused, client):
    for name in ("live", "history_json"):
        response = client.get(_admin_url(name, paused))
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_list_searches_the_input_and_filters_what_waits_for_approval(paused, approved):
    Execution.objects.filter(pk=approved.pk).update(
        input={**approved.input, "ticket_ids": ["OPS-4711"]}
    )
    client = _login("viewer")
    changelist = reverse("admin:executions_execution_changelist")

    def listed(query: dict[str, str]) -> set[str]:
        response = client.get(changelist, query)
        assert response.status_code == 200
        return {e.pk for e in response.context["cl"].result_list}

    assert listed({"q": "ops-4711"}) == {approved.pk}
    assert listed({"q": "approved.example.com"}) == {approved.pk}
    assert listed({"q": "example.com"}) == {approved.pk, paused.pk}
    assert listed({"awaiting": "approval"}) == {paused.pk}
    lane = Lane.objects.create(key="aws-infrastructure", state=LaneState.HELD, owner=paused)
    LaneWaiter.objects.create(lane=lane, execution=approved)
    assert listed({"awaiting": "lane"}) == {approved.pk}


# -- approval: reject, superseded plans, the index ---------------------------------------------


def test_reject_repeats_the_hash_then_cancels_with_the_reason(paused):
    client = _login("operator")
    page = client.get(_admin_url("reject", paused)).content.decode()
    assert f'<code class="plan-hash">{PLAN_HASH}</code>' in page
    assert f'value="{PLAN_HASH}"' in page  # the page binds its POST to this plan

    response = client.post(
        _admin_url("reject", paused), {"plan_hash": PLAN_HASH, "reason": "not this week"}
    )

    assert response.status_code == 302
    paused.refresh_from_db()
    assert paused.status == ExecutionStatus.CANCELED
    entry = AuditEntry.objects.get(target_id=paused.pk, action="execution.cancel")
    assert entry.reason == f"rejected the plan {PLAN_HASH}: not this week"
    assert entry.data["rejected_plan"] == PLAN_HASH


def test_rejecting_a_plan_that_changed_shows_the_new_one_and_cancels_nothing(paused):
    response = _login("operator").post(
        _admin_url("reject", paused), {"plan_hash": OTHER_HASH, "reason": "no"}
    )

    assert response.status_code == 200  # the page again, bound to the plan waiting now
    assert f'value="{PLAN_HASH}"' in response.content.decode()
    paused.refresh_from_db()
    assert paused.status == ExecutionStatus.PAUSED


def test_a_link_to_a_superseded_plan_says_which_plan_is_current(paused):
    old = Hook.objects.get(execution=paused)
    Hook.objects.filter(pk=old.pk).update(
        status=HookStatus.SUPERSEDED,
        payload={**old.payload, "plan_hash": OTHER_HASH},
        token="approve-superseded",
    )
    _hook(paused, paused.current_run, HookStatus.PENDING)  # the plan waiting now: PLAN_HASH

    page = _login("operator").get(_admin_url("approve", paused), {"plan_hash": OTHER_HASH})

    html = page.content.decode()
    assert 'class="errornote alfred-superseded"' in html
    assert f"<code>{OTHER_HASH}</code> you followed a link to is\nsuperseded" in html
    assert f"the plan waiting now is <code>{PLAN_HASH}</code>" in html
    timeline = _login("operator").get(_page(paused)).content.decode()
    assert f"superseded by the plan waiting now, <code>{PLAN_HASH}</code>" in timeline


def test_the_index_shows_what_waits_and_links_straight_to_a_single_approval(paused):
    Lane.objects.create(key="lambda:a:b", state=LaneState.RECOVERY_REQUIRED, owner=paused)

    html = _login("viewer").get(reverse("admin:index")).content.decode()

    assert f'<a href="{_page(paused)}">1 pending approval</a>' in html
    assert "1 lane to recover</a>" in html


def test_the_index_links_several_approvals_to_the_filtered_list(paused):
    second = _execution(ExecutionStatus.PAUSED, "second")
    run = _forward_run(second, RunStatus.WAITING, apply="waiting")
    _hook(second, run, HookStatus.PENDING)

    html = _login("operator").get(reverse("admin:index")).content.decode()

    changelist = reverse("admin:executions_execution_changelist")
    assert f'<a href="{changelist}?awaiting=approval">2 pending approvals</a>' in html
    assert "No lane to recover" in html


# -- bulk actions through a confirmation page --------------------------------------------------


def _action(client: Client, model: str, action: str, pks: list[str], **extra: str) -> Any:
    return client.post(
        reverse(f"admin:{model}_changelist"),
        {"action": action, "_selected_action": pks, **extra},
    )


def test_bulk_rollback_lists_each_compensation_then_queues_with_the_reason(approved, paused):
    client = _login("operator")

    asked = _action(client, "executions_execution", "rollback", [approved.pk, paused.pk])

    html = asked.content.decode()
    assert asked.status_code == 200 and 'name="confirm"' in html
    assert "a rollback run does 1 step, in this order:" in html
    assert "undo apply of aws.route53.batch (run #1, apply / batch)" in html
    assert "rollback is not possible now, it is paused: left as it is." in html
    assert html.count('name="_selected_action"') == 1  # only what can be rolled back
    assert not Execution.objects.get(pk=approved.pk).runs.filter(kind="rollback").exists()

    done = _action(
        client, "executions_execution", "rollback", [approved.pk], confirm="yes", reason="undo"
    )

    assert done.status_code == 302
    assert Execution.objects.get(pk=approved.pk).current_run.kind == "rollback"
    assert AuditEntry.objects.get(target_id=approved.pk, action="execution.rollback").reason == (
        "undo"
    )


def test_a_confirmation_without_a_reason_it_requires_asks_again_and_changes_nothing(approved):
    # rollback requires a reason (executions.controls.ROLLBACK); cancel and retry do not
    response = _action(
        _login("operator"), "executions_execution", "rollback", [approved.pk], confirm="yes"
    )

    assert response.status_code == 200 and b"A reason is required" in response.content
    assert Execution.objects.get(pk=approved.pk).current_run.kind != "rollback"


def test_a_cancel_needs_no_reason_as_on_the_api(paused):
    response = _action(
        _login("operator"), "executions_execution", "cancel", [paused.pk], confirm="yes"
    )

    assert response.status_code == 302
    assert Execution.objects.get(pk=paused.pk).status == ExecutionStatus.CANCELED


def test_a_lane_recovery_expects_the_owner_the_page_named(paused, approved):
    Lane.objects.create(key="aws-infrastructure", state=LaneState.RECOVERY_REQUIRED, owner=approved)
    client = _login("operator")
    page = client.get(reverse("admin:lanes_lane_recover", args=["aws-infrastructure"]))
    assert approved.pk in page.content.decode() and b"succeeded" in page.content

    # meanwhile the lane changed hands: the confirmation names the owner seen, so nothing moves
    Lane.objects.filter(key="aws-infrastructure").update(owner=paused)
    refused = client.post(
        reverse("admin:lanes_lane_recover", args=["aws-infrastructure"]),
        {"confirm": "yes", "reason": "stuck", "seen_owner:aws-infrastructure": approved.pk},
        follow=True,
    )

    assert f"has owner {paused.pk} now; you named owner {approved.pk}" in refused.content.decode()
    assert Lane.objects.get(key="aws-infrastructure").owner_id == paused.pk
    assert not AuditEntry.objects.filter(action="lane.recover").exists()


def test_a_lane_page_offers_recovery_to_an_operator_only(approved):
    Lane.objects.create(key="aws-infrastructure", state=LaneState.RECOVERY_REQUIRED, owner=approved)
    lane = reverse("admin:lanes_lane_change", args=["aws-infrastructure"])
    recover = reverse("admin:lanes_lane_recover", args=["aws-infrastructure"])

    assert f'href="{recover}"' in _login("operator").get(lane).content.decode()
    assert f'href="{recover}"' not in _login("viewer").get(lane).content.decode()
    assert _login("viewer").get(recover).status_code == 403


def test_redelivery_asks_first_then_puts_failed_deliveries_back(approved):
    endpoint = WebhookEndpoint.objects.create(url="https://hooks.example.com/a", secret="whsec_x")
    event = OutboxEvent.objects.filter(execution=approved)[0]
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event=event, status="failed", attempts=8
    )
    client = _login("operator")

    asked = _action(client, "executions_webhookendpoint", "redeliver_failed", [endpoint.pk])
    assert b"1 failed deliveries are sent again" in asked.content
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "failed"

    _action(
        client,
        "executions_webhookdelivery",
        "redeliver",
        [str(delivery.pk)],
        confirm="yes",
        reason="receiver fixed",
    )

    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "pending"
    entry = AuditEntry.objects.get(action="webhook.redeliver", target_id=endpoint.pk)
    assert entry.reason == "receiver fixed"


def test_a_redelivery_needs_no_reason_as_on_the_api(approved):
    endpoint = WebhookEndpoint.objects.create(url="https://hooks.example.com/a", secret="whsec_x")
    event = OutboxEvent.objects.filter(execution=approved)[0]
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event=event, status="failed", attempts=8
    )

    _action(
        _login("operator"),
        "executions_webhookdelivery",
        "redeliver",
        [str(delivery.pk)],
        confirm="yes",
    )

    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "pending"
    assert AuditEntry.objects.get(action="webhook.redeliver", target_id=endpoint.pk).reason == ""


def test_redelivery_sends_a_backing_off_delivery_now_and_leaves_one_in_flight(approved):
    # given a delivery waiting an hour for its next attempt, and one being sent right now
    endpoint = WebhookEndpoint.objects.create(url="https://hooks.example.com/a", secret="whsec_x")
    first, second = OutboxEvent.objects.filter(execution=approved)[:2]
    later = timezone.now() + timedelta(hours=1)
    waiting = WebhookDelivery.objects.create(
        endpoint=endpoint, event=first, status="pending", attempts=3, next_attempt_at=later
    )
    sending = WebhookDelivery.objects.create(
        endpoint=endpoint, event=second, status="pending", attempts=1, claimed_until=later
    )
    client = _login("operator")
    # when an operator selects both
    asked = _action(
        client, "executions_webhookdelivery", "redeliver", [str(waiting.pk), str(sending.pk)]
    )
    # then the page says what becomes of each, and only the waiting one is put back
    html = asked.content.decode()
    assert "waiting for its next attempt at" in html and ": sent now." in html
    assert "being sent right now: its answer decides" in html
    assert html.count('name="_selected_action"') == 1
    _action(
        client,
        "executions_webhookdelivery",
        "redeliver",
        [str(waiting.pk), str(sending.pk)],
        confirm="yes",
        reason="receiver back",
    )
    waiting.refresh_from_db()
    assert waiting.next_attempt_at is not None and waiting.next_attempt_at <= timezone.now()
    assert waiting.round_attempts == 0
    assert WebhookDelivery.objects.get(pk=sending.pk).claimed_until == later


def test_the_endpoint_shows_its_delivery_log(approved):
    endpoint = WebhookEndpoint.objects.create(url="https://hooks.example.com/a", secret="whsec_x")
    event = OutboxEvent.objects.filter(execution=approved)[0]
    WebhookDelivery.objects.create(endpoint=endpoint, event=event, status="failed", attempts=8)

    html = (
        _login("viewer")
        .get(reverse("admin:executions_webhookendpoint_change", args=[endpoint.pk]))
        .content.decode()
    )

    assert "1 failed</a>" in html and "0 delivered</a>" in html
    assert f"<td>{event.type}</td><td>failed</td><td>8</td>" in html


# -- cost -------------------------------------------------------------------------------------


def _queries_for_page(client: Client, execution: Execution) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.get(_page(execution)).status_code == 200
    return len(captured.captured_queries)


def test_the_page_costs_the_same_queries_however_many_runs_and_entries(approved):
    client = _login("operator")
    one_run = _queries_for_page(client, approved)

    # two more runs with stages, receipts, a wait and a checkpoint each
    for number in (2, 3):
        run = Run.objects.create(
            execution=approved, number=number, kind="retry", status=RunStatus.SUCCEEDED
        )
        for position, name in enumerate(("plan", "apply", "verify")):
            StageFactory(run=run, name=name, position=position, status="succeeded")
            for sequence in range(5):
                StepReceipt.objects.create(
                    run=run,
                    stage=name,
                    step_key=f"step-{sequence}",
                    sequence=sequence,
                    status=ReceiptStatus.SUCCEEDED,
                    fence=1,
                )
        Timer.objects.create(
            run=run, stage="apply", key="insync", purpose="poll", due_at=timezone.now()
        )
        Hook.objects.create(
            execution=approved,
            run=run,
            stage="apply",
            name="approve",
            token=f"t-{run.pk}",
            operator=True,
            status=HookStatus.SIGNALLED,
        )
    approved.current_run = run
    approved.save(update_fields=["current_run"])

    assert _queries_for_page(client, approved) == one_run


def test_endpoint_changes_in_the_admin_are_audited_like_the_apis(users, settings):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    client = _login("operator")
    added = client.post(
        reverse("admin:executions_webhookendpoint_add"),
        {"url": "https://hooks.example.com/new", "event_types": "", "active": "on"},
    )
    assert added.status_code == 200 and b"whsec_" in added.content  # shown once
    endpoint = WebhookEndpoint.objects.get(url="https://hooks.example.com/new")

    client.post(
        reverse("admin:executions_webhookendpoint_delete", args=[endpoint.pk]), {"post": "yes"}
    )

    assert not WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    actions = list(
        AuditEntry.objects.filter(target_id=endpoint.pk)
        .order_by("created_at", "id")
        .values_list("action", flat=True)
    )
    assert actions == ["webhook.create", "webhook.delete"]


def test_bulk_retry_and_cancel_say_what_happens_to_each_before_anything_does(
    failed_in_rollback, paused
):
    client = _login("operator")
    both = [failed_in_rollback.pk, paused.pk]

    retry = _action(client, "executions_execution", "retry", both).content.decode()
    cancel = _action(client, "executions_execution", "cancel", both).content.decode()

    assert "a retry run is queued, ahead of its lane&#x27;s queue." in retry
    assert "retry is not possible now, it is paused: left as it is." in retry
    assert "canceled at once, which rejects the plan waiting for approval." in cancel
    assert "cancel is not possible now, it is failed: left as it is." in cancel
    assert Execution.objects.get(pk=paused.pk).status == ExecutionStatus.PAUSED
    assert Execution.objects.get(pk=failed_in_rollback.pk).status == ExecutionStatus.FAILED

"""Acceptance: every row of the idempotency table (docs/contract.md, "Asking for an execution"),
against real PostgreSQL."""

from __future__ import annotations

import pytest

from executions.models import (
    DeliveryKey,
    Execution,
    ExecutionStatus,
    OutboxEvent,
    Run,
    Stage,
)
from tests.support.helpers import CERTIFICATE, SUBDOMAIN, assert_problem, submit

pytestmark = pytest.mark.django_db


def test_a_new_request_is_recorded_durably(api):
    # when
    response = submit(api, "add-subdomain", SUBDOMAIN, key="k-1")

    # then
    assert response.status_code == 202
    body = response.json()
    assert response["Location"] == f"/api/v1/executions/{body['id']}"
    assert body["id"].startswith("exe_")
    assert body["status"] == "queued"
    assert body["start_state"] == "start_pending"
    assert body["terminal"] is False
    assert body["acceptance"] == {"outcome": "created", "replayed": False, "idempotency_key": "k-1"}
    assert body["input"]["dry_run"] is False
    assert [s["name"] for s in body["stages"]] == ["plan", "apply", "verify"]
    assert {s["status"] for s in body["stages"]} == {"pending"}
    assert body["current_run"]["kind"] == "initial"
    assert body["current_run"]["id"].startswith("run_")
    assert body["links"]["events"] == f"/api/v1/executions/{body['id']}/events"
    events = list(OutboxEvent.objects.filter(execution_id=body["id"]))
    assert [(e.sequence, e.type) for e in events] == [(1, "execution.accepted")]
    assert DeliveryKey.objects.get(key="k-1").execution_id == body["id"]


def test_no_idempotency_key_is_400(api):
    response = api.post("/api/v1/workflows/add-subdomain/executions", SUBDOMAIN, format="json")

    assert_problem(response, 400, "idempotency_key_missing")
    assert not Execution.objects.exists()


@pytest.mark.parametrize("key", ["", " padded ", "x" * 256, "tab\tkey"])
def test_a_malformed_idempotency_key_is_400(api, key):
    response = submit(api, "add-subdomain", SUBDOMAIN, key=None, **{"Idempotency-Key": key})

    assert_problem(response, 400, "idempotency_key_invalid" if key else "idempotency_key_missing")


def test_same_key_same_body_replays_the_execution(api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()

    # when: the same body, its members in another order
    reordered = dict(reversed(list(SUBDOMAIN.items())))
    again = submit(api, "add-subdomain", reordered, key="k-1")

    # then
    assert again.status_code == 202
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first["id"]
    assert again.json()["acceptance"]["replayed"] is True
    assert Execution.objects.count() == 1
    assert OutboxEvent.objects.count() == 1


def test_same_key_replays_even_after_a_rollback(api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()
    Execution.objects.filter(pk=first["id"]).update(status=ExecutionStatus.ROLLED_BACK)

    again = submit(api, "add-subdomain", SUBDOMAIN, key="k-1")

    assert again.json()["id"] == first["id"]
    assert again.json()["status"] == "rolled_back"
    assert again["Idempotent-Replayed"] == "true"


def test_same_key_different_body_is_409(api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()

    response = submit(api, "add-subdomain", {**SUBDOMAIN, "subdomain": "www"}, key="k-1")

    body = assert_problem(response, 409, "idempotency_conflict")
    assert body["execution"] == first["id"]
    assert Execution.objects.count() == 1


def test_a_sent_default_changes_the_fingerprint_but_not_the_operation(api):
    # The key decides by the body as sent; the identity by the canonical input.
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()

    conflict = submit(api, "add-subdomain", {**SUBDOMAIN, "dry_run": False}, key="k-1")
    reused = submit(api, "add-subdomain", {**SUBDOMAIN, "dry_run": False}, key="k-2")

    assert_problem(conflict, 409, "idempotency_conflict")
    assert reused.json()["id"] == first["id"]
    assert reused.json()["acceptance"]["outcome"] == "reused"


def test_new_key_for_an_active_operation_reuses_it(api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()

    # when: the same operation, spelled differently, under a new key
    response = submit(api, "add-subdomain", {**SUBDOMAIN, "zone": "Example.COM."}, key="k-2")

    assert response.status_code == 202
    assert response.json()["id"] == first["id"]
    assert response.json()["acceptance"]["outcome"] == "reused"
    assert "Idempotent-Replayed" not in response
    assert Execution.objects.count() == 1
    assert Run.objects.count() == 1


def test_keys_are_scoped_to_the_principal(api, operator_api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="shared").json()

    # when: another principal sends the same key with another operation
    other = submit(operator_api, "add-subdomain", {**SUBDOMAIN, "subdomain": "www"}, key="shared")

    assert other.status_code == 202
    assert other.json()["id"] != first["id"]
    assert other.json()["acceptance"]["outcome"] == "created"


@pytest.mark.parametrize("status", [ExecutionStatus.FAILED, ExecutionStatus.CANCELED])
def test_new_key_for_a_failed_or_canceled_operation_continues_it(api, status):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()
    Execution.objects.filter(pk=first["id"]).update(status=status, error={"code": "boom"})

    response = submit(api, "add-subdomain", SUBDOMAIN, key="k-2")

    body = response.json()
    assert response.status_code == 202
    assert body["id"] == first["id"]
    assert body["acceptance"]["outcome"] == "continued"
    assert body["status"] == "queued"
    assert body["start_state"] == "start_pending"
    assert body["error"] is None
    assert body["current_run"]["kind"] == "continuation"
    assert body["current_run"]["number"] == 2
    assert Stage.objects.filter(run_id=body["current_run"]["id"]).count() == 3
    events = OutboxEvent.objects.filter(execution_id=first["id"]).order_by("sequence")
    assert [(e.sequence, e.type) for e in events] == [
        (1, "execution.accepted"),
        (2, "execution.continued"),
    ]
    assert events[1].payload["from_status"] == status


def test_new_key_for_a_succeeded_operation_returns_it(api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()
    Execution.objects.filter(pk=first["id"]).update(status=ExecutionStatus.SUCCEEDED)

    response = submit(api, "add-subdomain", SUBDOMAIN, key="k-2")

    assert response.json()["id"] == first["id"]
    assert response.json()["acceptance"]["outcome"] == "reused"
    assert response.json()["status"] == "succeeded"
    assert Run.objects.count() == 1


def _succeed_certificate(execution_id: str, verify_output: dict | None) -> None:
    execution = Execution.objects.get(pk=execution_id)
    execution.status = ExecutionStatus.SUCCEEDED
    execution.save(update_fields=["status"])
    Stage.objects.filter(run_id=execution.current_run_id).update(status="succeeded")
    Stage.objects.filter(run_id=execution.current_run_id, name="verify").update(
        output=verify_output
    )


def test_a_succeeded_certificate_with_contract_work_left_is_continued(api):
    first = submit(api, "add-certificate", CERTIFICATE, key="k-1").json()
    _succeed_certificate(first["id"], {"certificate_status": "PENDING_VALIDATION"})
    _release_lane()

    response = submit(api, "add-certificate", CERTIFICATE, key="k-2")

    assert response.json()["id"] == first["id"]
    assert response.json()["acceptance"]["outcome"] == "continued"
    assert response.json()["current_run"]["kind"] == "continuation"


def test_a_complete_succeeded_certificate_is_returned(api):
    first = submit(api, "add-certificate", CERTIFICATE, key="k-1").json()
    _succeed_certificate(
        first["id"], {"certificate_status": "ISSUED", "validation_records_in_place": True}
    )

    response = submit(api, "add-certificate", CERTIFICATE, key="k-2")

    assert response.json()["id"] == first["id"]
    assert response.json()["acceptance"]["outcome"] == "reused"


def test_new_key_after_a_rollback_creates_a_successor(api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()
    Execution.objects.filter(pk=first["id"]).update(status=ExecutionStatus.ROLLED_BACK)

    response = submit(api, "add-subdomain", SUBDOMAIN, key="k-2")

    body = response.json()
    assert body["id"] != first["id"]
    assert body["predecessor"] == first["id"]
    assert body["acceptance"]["outcome"] == "created"
    assert Execution.objects.count() == 2


def test_a_different_operation_is_a_new_execution(api):
    first = submit(api, "add-subdomain", SUBDOMAIN).json()

    response = submit(api, "add-subdomain", {**SUBDOMAIN, "ticket_ids": ["OPS-9"]})

    assert response.json()["id"] != first["id"]
    assert response.json()["acceptance"]["outcome"] == "created"


def _release_lane() -> None:
    from lanes.models import Lane

    Lane.objects.update(state="free", owner=None, owner_token=None)


def test_a_key_used_for_another_workflow_is_a_conflict(api):
    first = submit(api, "add-domain", {"domain": "example.com"}, key="k-1").json()

    response = submit(api, "add-certificate", {"domain": "example.com"}, key="k-1")

    assert assert_problem(response, 409, "idempotency_conflict")["execution"] == first["id"]


def test_a_rotated_token_keeps_its_keys(api):
    from rest_framework.test import APIClient

    from alfred.tokens import token_create, token_rotate

    _, raw = token_create(name="rotating-bot", role="integration")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    first = submit(client, "add-subdomain", SUBDOMAIN, key="k-1").json()

    _, rotated = token_rotate(name="rotating-bot", role="integration")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {rotated}")
    again = submit(client, "add-subdomain", SUBDOMAIN, key="k-1")

    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first["id"]


def test_a_succeeded_dry_run_certificate_is_returned_not_continued(api):
    body = {**CERTIFICATE, "dry_run": True}
    first = submit(api, "add-certificate", body, key="k-1").json()
    _succeed_certificate(first["id"], None)

    response = submit(api, "add-certificate", body, key="k-2")

    assert response.json()["acceptance"]["outcome"] == "reused"


def test_contract_state_of_earlier_runs_counts_for_a_certificate(api):
    # given: run 1 verified the certificate; run 2 (a continuation) skipped that stage
    first = submit(api, "add-certificate", CERTIFICATE, key="k-1").json()
    _succeed_certificate(
        first["id"], {"certificate_status": "ISSUED", "validation_records_in_place": True}
    )
    Execution.objects.filter(pk=first["id"]).update(status=ExecutionStatus.FAILED)
    submit(api, "add-certificate", CERTIFICATE, key="k-2")  # continuation: run 2
    Execution.objects.filter(pk=first["id"]).update(status=ExecutionStatus.SUCCEEDED)

    response = submit(api, "add-certificate", CERTIFICATE, key="k-3")

    assert response.json()["acceptance"]["outcome"] == "reused"
    assert response.json()["current_run"]["number"] == 2


def test_a_continuation_clears_the_previous_result(api):
    first = submit(api, "add-subdomain", SUBDOMAIN, key="k-1").json()
    Execution.objects.filter(pk=first["id"]).update(
        status=ExecutionStatus.FAILED, result={"partial": True}, error={"code": "boom"}
    )

    body = submit(api, "add-subdomain", SUBDOMAIN, key="k-2").json()

    assert body["result"] is None and body["error"] is None


ARN = "arn:aws:acm:us-east-1:123456789012:certificate/0f6a3c2e-7d7b-4b8e-9d0c-1a2b3c4d5e6f"
CERT_BASE = {"domain": "example.com", "ticket_ids": ["OPS-2", "OPS-3"]}


@pytest.mark.parametrize(
    ("variant", "same_operation"),
    [
        ({"domain": "  Example.COM. "}, True),  # case, whitespace, trailing dot
        ({"ticket_ids": ["ops-3", " OPS-2", "OPS-3"]}, True),  # order, case, duplicates
        (
            {
                "alternative_names": [],
                "kirby_mode": "disabled",
                "dry_run": False,
                "certificate_arn": None,
            },
            True,
        ),  # every default sent explicitly
        ({"ticket_ids": ["OPS-2"]}, False),
        ({"ticket_ids": []}, False),
        ({"kirby_mode": "enabled"}, False),
        ({"dry_run": True}, False),
        ({"certificate_arn": ARN}, False),
        ({"alternative_names": ["www.example.com"]}, False),
        ({"domain": "example.org"}, False),
    ],
)
def test_add_certificate_identity_through_the_api(api, variant, same_operation):
    first = submit(api, "add-certificate", CERT_BASE, key="k-1").json()

    response = submit(api, "add-certificate", {**CERT_BASE, **variant}, key="k-2")

    assert response.status_code == 202
    body = response.json()
    if same_operation:
        assert (body["id"], body["acceptance"]["outcome"]) == (first["id"], "reused")
    else:
        assert body["id"] != first["id"]
        assert body["acceptance"]["outcome"] == "created"

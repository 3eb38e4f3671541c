"""Lane take-or-queue at acceptance (docs/architecture.md, "Lanes")."""

from __future__ import annotations

import pytest

from executions.models import DeliveryKey, Execution, OutboxEvent
from lanes.models import Lane, LaneWaiter
from tests.support.helpers import LAMBDA, SUBDOMAIN, assert_problem, submit

pytestmark = pytest.mark.django_db


def test_aws_infrastructure_work_takes_the_lane_then_queues_in_order(api):
    # when
    first = submit(api, "onboard-domain", {"domain": "one.example"}).json()
    second = submit(api, "add-domain", {"domain": "two.example"}).json()
    third = submit(api, "add-certificate", {"domain": "three.example"}).json()

    # then
    assert first["lane"] == {
        "key": "aws-infrastructure",
        "role": "owner",
        "state": "held",
        "position": None,
    }
    assert second["lane"]["role"] == "queued" and second["lane"]["position"] == 1
    assert third["lane"]["role"] == "queued" and third["lane"]["position"] == 2
    lane = Lane.objects.get(key="aws-infrastructure")
    assert lane.owner_id == first["id"]
    assert list(LaneWaiter.objects.values_list("execution_id", flat=True)) == [
        second["id"],
        third["id"],
    ]
    accepted = OutboxEvent.objects.get(execution_id=second["id"], sequence=1)
    assert accepted.payload["lane"] == {
        "key": "aws-infrastructure",
        "role": "queued",
        "position": 1,
    }


def test_add_subdomain_takes_no_lane(api):
    body = submit(api, "add-subdomain", SUBDOMAIN).json()

    assert body["lane"] is None
    assert not Lane.objects.exists()


def test_a_different_version_for_a_busy_fleet_fails_closed(api):
    owner = submit(api, "update-lambda-version", LAMBDA).json()

    # when
    response = submit(api, "update-lambda-version", {**LAMBDA, "version": "43"}, key="v43")

    # then: 409 naming the owner, and nothing of the request is kept
    problem = assert_problem(response, 409, "lane_conflict")
    assert problem["execution"] == owner["id"]
    assert problem["lane"] == "lambda:checkout-api:production"
    assert Execution.objects.count() == 1
    assert not DeliveryKey.objects.filter(key="v43").exists()


def test_a_lane_conflict_keeps_the_key_free_for_a_later_request(api):
    submit(api, "update-lambda-version", LAMBDA)
    submit(api, "update-lambda-version", {**LAMBDA, "version": "43"}, key="retry-me")

    # when: the same key, now for the version the lane holds
    response = submit(
        api, "update-lambda-version", {**LAMBDA, "ticket_ids": ["OPS-7"]}, key="retry-me"
    )

    assert response.status_code == 202


def test_the_same_version_queues_behind_and_a_different_one_conflicts_with_the_queue(api):
    owner = submit(api, "update-lambda-version", LAMBDA).json()
    Lane.objects.filter(key="lambda:checkout-api:production").update(owner_token="41")

    # the lane now holds 41; 42 (a different operation on the same fleet) conflicts with it
    conflict = submit(api, "update-lambda-version", {**LAMBDA, "ticket_ids": ["OPS-8"]})
    assert_problem(conflict, 409, "lane_conflict")

    Lane.objects.filter(key="lambda:checkout-api:production").update(owner_token="42")
    queued = submit(api, "update-lambda-version", {**LAMBDA, "ticket_ids": ["OPS-8"]}).json()
    assert queued["lane"]["role"] == "queued"

    # a third version conflicts with the queued 42 even though the owner is 42 too
    Lane.objects.filter(key="lambda:checkout-api:production").update(owner_token="40")
    problem = assert_problem(
        submit(api, "update-lambda-version", {**LAMBDA, "version": "40"}), 409, "lane_conflict"
    )
    assert problem["execution"] == queued["id"]
    assert owner["id"] != queued["id"]


def test_unrelated_fleets_do_not_share_a_lane(api):
    first = submit(api, "update-lambda-version", LAMBDA).json()
    other = submit(
        api, "update-lambda-version", {**LAMBDA, "environment": "staging", "version": "7"}
    ).json()

    assert first["lane"]["role"] == "owner"
    assert other["lane"]["role"] == "owner"
    assert other["lane"]["key"] == "lambda:checkout-api:staging"


def test_lanes_are_listed_with_their_queue(api):
    owner = submit(api, "add-domain", {"domain": "a.example"}).json()
    queued = submit(api, "add-domain", {"domain": "b.example"}).json()

    listing = api.get("/api/v1/lanes").json()
    detail = api.get("/api/v1/lanes/aws-infrastructure").json()

    assert listing == [
        {
            "key": "aws-infrastructure",
            "state": "held",
            "owner": owner["id"],
            "owner_token": None,
            "version": 1,
            "queued": 1,
            "reason": "",
            "updated_at": listing[0]["updated_at"],
        }
    ]
    assert [w["execution"] for w in detail["queue"]] == [queued["id"]]
    assert_problem(api.get("/api/v1/lanes/nope"), 404, "not_found")


def test_a_queued_execution_asked_for_again_keeps_its_place(api):
    submit(api, "add-domain", {"domain": "a.example"})
    queued = submit(api, "add-domain", {"domain": "b.example"}).json()
    submit(api, "add-domain", {"domain": "c.example"})
    Execution.objects.filter(pk=queued["id"]).update(status="canceled")

    # when: a new key for the same operation continues it
    again = submit(api, "add-domain", {"domain": "b.example"})

    assert again.status_code == 202
    assert again.json()["acceptance"]["outcome"] == "continued"
    assert again.json()["lane"]["role"] == "queued"
    assert again.json()["lane"]["position"] == 1
    assert LaneWaiter.objects.filter(execution_id=queued["id"]).count() == 1


def test_a_continuation_does_not_unblock_a_lane_awaiting_recovery(
    api, django_capture_on_commit_callbacks
):
    owner = submit(api, "add-domain", {"domain": "a.example"}).json()
    Execution.objects.filter(pk=owner["id"]).update(status="canceled")
    Lane.objects.filter(key="aws-infrastructure").update(state="recovery_required")

    with django_capture_on_commit_callbacks() as published:
        again = submit(api, "add-domain", {"domain": "a.example"}).json()

    assert again["acceptance"]["outcome"] == "continued"
    assert again["lane"] == {
        "key": "aws-infrastructure",
        "role": "owner",
        "state": "recovery_required",
        "position": None,
    }
    assert published == []  # recorded, not started: an operator recovers the lane first
    assert Lane.objects.get(key="aws-infrastructure").state == "recovery_required"

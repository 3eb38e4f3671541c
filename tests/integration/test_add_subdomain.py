"""add-subdomain end to end: real Celery workers, real PostgreSQL and Redis, the AWS stand-in
(seeded like `make run`: example.com with an apex A+AAAA alias). Mutations are counted from
the stand-in's own journal of applied change batches."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from alfred.tokens import token_create
from executions.models import Execution, Hook
from providers.sandbox.aws import AwsStandIn
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.integration.test_engine import assert_gapless, event_types
from tests.support import aws_world
from tests.support.helpers import assert_problem, submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started() as aws:
        yield aws


@pytest.fixture
def route53(standin: AwsStandIn) -> Any:
    return aws_world.client(standin, "route53")


@pytest.fixture
def zone_id(route53: Any) -> str:
    return aws_world.zone_id_of(route53)


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    with aws_world.aws_worker(standin, "aws") as worker:
        yield worker


@pytest.fixture
def aws_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    """The module's worker on the stand-in's providers, idle again before the database is
    flushed (see ``tests.conftest.shared_worker``)."""
    yield aws_world.alive(module_worker)
    quiesce()


def _batches(standin: AwsStandIn, execution_id: str) -> list[Any]:
    return [b for b in standin.route53.change_batches if execution_id in (b.comment or "")]


def _records(route53: Any, zone_id: str, name: str) -> list[dict[str, Any]]:
    found = route53.list_resource_record_sets(
        HostedZoneId=zone_id, StartRecordName=name, MaxItems="10"
    )["ResourceRecordSets"]
    return [r for r in found if r["Name"].rstrip(".") == name]


def _terminal(execution_id: str, timeout: float = 60.0) -> Execution:
    return wait_for(
        lambda: (e := Execution.objects.get(pk=execution_id)).terminal and e,
        timeout=timeout,
        interval=0.2,
    )


def _name() -> str:
    return f"e2e-{uuid.uuid4().hex[:10]}"


def test_a_new_name_succeeds_with_one_batch_and_serves_the_alias(
    api, aws_worker, standin, route53, zone_id
):
    name = _name()

    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    execution = _terminal(body["id"])

    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, execution.id)) == 1
    served = {
        r["Type"]: r["AliasTarget"]["DNSName"]
        for r in _records(route53, zone_id, f"{name}.example.com")
    }
    assert served == {
        "A": "d111111abcdef8.cloudfront.net.",
        "AAAA": "d111111abcdef8.cloudfront.net.",
    }
    types = event_types(execution.id)
    assert_gapless(execution.id)
    assert types[-1] == "execution.succeeded"


def _create(route53: Any, zone_id: str, name: str, type_: str, value: str) -> None:
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "UPSERT",
                    "ResourceRecordSet": {
                        "Name": name,
                        "Type": type_,
                        "TTL": 300,
                        "ResourceRecords": [{"Value": value}],
                    },
                }
            ]
        },
    )


def _paused(api: Any, execution_id: str) -> dict[str, Any]:
    def pending() -> Any:
        resource = api.get(f"/api/v1/executions/{execution_id}").json()
        return resource["status"] == "paused" and resource["pending_approval"] and resource

    return wait_for(pending, timeout=30, interval=0.2)


def test_a_plain_a_record_pauses_for_the_plan_and_only_its_hash_applies(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    name = f"{_name()}.example.com"
    _create(route53, zone_id, name, "A", "192.0.2.7")

    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    resource = _paused(api, body["id"])
    pending = resource["pending_approval"]

    assert [r["values"] for r in pending["plan"]["before"] if r["type"] == "A"] == [["192.0.2.7"]]
    assert _batches(standin, body["id"]) == []
    # the paused event says all a chat bot needs to ask a person
    events = api.get(f"/api/v1/executions/{body['id']}/events").json()["events"]
    (paused,) = [e for e in events if e["type"] == "execution.paused"]
    asked = paused["payload"]["approval"]
    assert asked["plan_hash"] == pending["plan_hash"]
    assert asked["plan"] == pending["plan"]
    assert asked["summary"].startswith(f"{name} in example.com: ")
    assert "UPSERT A" in asked["summary"]
    assert parse_datetime(asked["expires_at"]) == parse_datetime(pending["expires_at"])
    assert asked["links"]["admin"].endswith(
        f"/admin/executions/execution/{body['id']}/approve/?plan_hash={pending['plan_hash']}"
    )
    assert asked["links"]["api"].endswith(f"/api/v1/executions/{body['id']}/approve")
    approve = f"/api/v1/executions/{body['id']}/approve"
    assert_problem(
        api.post(approve, {"plan_hash": pending["plan_hash"]}, format="json"),
        403,
        "permission_denied",
    )
    stale = assert_problem(
        operator_api.post(approve, {"plan_hash": "0" * 64}, format="json"), 409, "stale_plan"
    )
    assert stale["plan_hash"] == pending["plan_hash"]

    answer = operator_api.post(
        approve, {"plan_hash": pending["plan_hash"], "reason": "checked"}, format="json"
    )

    assert answer.status_code == 202
    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1
    served = [r for r in _records(route53, zone_id, name) if r["Type"] == "A"]
    assert [r["AliasTarget"]["DNSName"] for r in served] == ["d111111abcdef8.cloudfront.net."]


def test_a_plan_two_operators_must_approve_applies_only_at_the_second(
    api, operator_api, aws_worker, standin, route53, zone_id, settings, tmp_path
):
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[rules]]\nname = "apex zone"\nworkflows = ["add-subdomain"]\n'
        'subjects = ["*.example.com"]\napprovals = 2\n'
    )
    settings.ALFRED_APPROVAL_POLICY = str(policy)  # the web's (this process's) policy
    name = f"{_name()}.example.com"
    _create(route53, zone_id, name, "A", "192.0.2.8")
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    pending = _paused(api, body["id"])["pending_approval"]
    assert pending["policy"]["asks"] == "2 approvals from distinct operators; not the requester"
    approve = f"/api/v1/executions/{body['id']}/approve"
    second = APIClient()
    second.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_create(name='ops-2', role='operator')[1]}"
    )

    first = operator_api.post(approve, {"plan_hash": pending["plan_hash"]}, format="json")

    assert first.status_code == 202
    quiesce()  # whatever a worker would do with it, it has done
    resource = api.get(f"/api/v1/executions/{body['id']}").json()
    assert resource["status"] == "paused"
    assert resource["pending_approval"]["policy"]["summary"] == "1 of 2 approvals (ops)"
    assert _batches(standin, body["id"]) == []  # the stand-in's journal: nothing applied

    assert (
        second.post(approve, {"plan_hash": pending["plan_hash"]}, format="json").status_code == 202
    )

    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1


def test_dns_changed_while_paused_is_a_new_checkpoint_never_the_old_approval(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    name = f"{_name()}.example.com"
    _create(route53, zone_id, name, "CNAME", "first.example.net")
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    pending = _paused(api, body["id"])["pending_approval"]
    first, first_hook = pending["plan_hash"], pending["hook"]

    # someone changes the name while the execution waits
    _create(route53, zone_id, name, "CNAME", "second.example.net")
    operator_api.post(
        f"/api/v1/executions/{body['id']}/approve", {"plan_hash": first}, format="json"
    )

    second = wait_for(
        lambda: (
            (p := api.get(f"/api/v1/executions/{body['id']}").json()["pending_approval"])
            and p["plan_hash"] != first
            and p
        ),
        timeout=30,
        interval=0.2,
    )
    assert _batches(standin, body["id"]) == []  # the old consent applied nothing
    assert [r["values"] for r in second["plan"]["before"]] == [["second.example.net"]]
    hooks = dict(Hook.objects.filter(execution_id=body["id"]).values_list("id", "status"))
    assert hooks == {second["hook"]: "pending", first_hook: "superseded"}
    operator_api.post(
        f"/api/v1/executions/{body['id']}/approve",
        {"plan_hash": second["plan_hash"]},
        format="json",
    )
    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1


def test_rollback_restores_what_was_there_and_ends_rolled_back(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    name = f"{_name()}.example.com"
    _create(route53, zone_id, name, "CNAME", "legacy.example.net")
    before = _records(route53, zone_id, name)
    key = f"k-{uuid.uuid4()}"
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}, key=key).json()
    plan_hash = _paused(api, body["id"])["pending_approval"]["plan_hash"]
    operator_api.post(
        f"/api/v1/executions/{body['id']}/approve", {"plan_hash": plan_hash}, format="json"
    )
    assert _terminal(body["id"]).status == "succeeded"

    assert_problem(
        api.post(f"/api/v1/executions/{body['id']}/rollback", {"reason": "undo"}, format="json"),
        403,
        "permission_denied",
    )
    answer = operator_api.post(
        f"/api/v1/executions/{body['id']}/rollback", {"reason": "wrong name"}, format="json"
    )

    assert answer.status_code == 202
    execution = wait_for(
        lambda: (
            (e := Execution.objects.get(pk=body["id"])).status in ("rolled_back", "failed") and e
        ),
        timeout=60,
        interval=0.2,
    )
    assert execution.status == "rolled_back", execution.error
    assert _records(route53, zone_id, name) == before  # compared whole
    assert len(_batches(standin, body["id"])) == 2  # the change, and the one batch back
    assert_problem(
        operator_api.post(f"/api/v1/executions/{body['id']}/retry"), 409, "not_retryable"
    )
    replay = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}, key=key)
    assert replay.json()["id"] == body["id"] and replay.json()["status"] == "rolled_back"
    again = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    assert again["id"] != body["id"] and again["predecessor"] == body["id"]


def test_a_rollback_over_a_record_changed_since_fails_drifted_and_touches_nothing(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    name = _name()
    fqdn = f"{name}.example.com"
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    assert _terminal(body["id"]).status == "succeeded"
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "DELETE",
                    "ResourceRecordSet": next(
                        r for r in _records(route53, zone_id, fqdn) if r["Type"] == "AAAA"
                    ),
                }
            ]
        },
    )
    now = _records(route53, zone_id, fqdn)

    operator_api.post(
        f"/api/v1/executions/{body['id']}/rollback", {"reason": "undo"}, format="json"
    )

    execution = wait_for(
        lambda: (
            (e := Execution.objects.get(pk=body["id"])).terminal
            and e.current_run.kind == "rollback"
            and e
        ),
        timeout=60,
        interval=0.2,
    )
    assert execution.status == "failed" and execution.error["code"] == "drifted"
    assert _records(route53, zone_id, fqdn) == now
    assert len(_batches(standin, body["id"])) == 1


def test_a_dry_run_succeeds_and_sends_no_batch(api, aws_worker, standin, route53, zone_id):
    name = _name()

    body = submit(
        api, "add-subdomain", {"zone": "example.com", "subdomain": name, "dry_run": True}
    ).json()
    execution = _terminal(body["id"])

    assert execution.status == "succeeded", execution.error
    assert _batches(standin, execution.id) == []
    assert _records(route53, zone_id, f"{name}.example.com") == []


def test_a_missing_zone_is_a_readiness_failure(api, aws_worker):
    body = submit(api, "add-subdomain", {"zone": "nowhere.example", "subdomain": "a"}).json()
    execution = _terminal(body["id"])

    assert execution.status == "failed"
    assert execution.error["code"] == "readiness_failure"
    assert execution.error["readiness"]["code"] == "zone_missing"


def test_an_approval_not_given_in_time_fails_approval_expired(
    api, operator_api, aws_worker, durable_clock, standin, route53, zone_id
):
    name = f"{_name()}.example.com"
    _create(route53, zone_id, name, "A", "192.0.2.8")
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    pending = _paused(api, body["id"])["pending_approval"]
    assert pending["expires_at"] > pending["requested_at"]

    # when: the approval's seven days pass (the durable clock moved on, not waited for)
    durable_clock.advance(body["id"], settings.ALFRED_APPROVAL_TTL_SECONDS)

    execution = _terminal(body["id"], timeout=30)

    assert execution.status == "failed" and execution.error["code"] == "approval_expired"
    assert Hook.objects.get(pk=pending["hook"]).status == "expired"
    assert_problem(
        operator_api.post(
            f"/api/v1/executions/{body['id']}/approve",
            {"plan_hash": pending["plan_hash"]},
            format="json",
        ),
        409,
        "invalid_state",
    )
    assert _batches(standin, body["id"]) == []
    assert [r["Type"] for r in _records(route53, zone_id, name)] == ["A"]


def test_an_approval_given_days_later_still_applies_past_the_runs_own_deadline(
    api, operator_api, aws_worker, durable_clock, standin, route53, zone_id
):
    # given: a plan paused for an operator for three days (the run's deadline is 24 hours)
    name = f"{_name()}.example.com"
    _create(route53, zone_id, name, "CNAME", "legacy.example.net")
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    plan_hash = _paused(api, body["id"])["pending_approval"]["plan_hash"]
    durable_clock.advance(body["id"], 3 * 24 * 3600)

    # when
    answer = operator_api.post(
        f"/api/v1/executions/{body['id']}/approve", {"plan_hash": plan_hash}, format="json"
    )

    # then: waiting for a person is not the run being slow
    assert answer.status_code == 202, answer.content
    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1


def test_an_approval_past_its_expiry_is_refused(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    name = f"{_name()}.example.com"
    _create(route53, zone_id, name, "A", "192.0.2.9")
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    pending = _paused(api, body["id"])["pending_approval"]
    # the window closed a moment ago; the run's expiry timer has not fired yet
    Hook.objects.filter(pk=pending["hook"]).update(expires_at=timezone.now() - timedelta(seconds=1))

    problem = assert_problem(
        operator_api.post(
            f"/api/v1/executions/{body['id']}/approve",
            {"plan_hash": pending["plan_hash"]},
            format="json",
        ),
        409,
        "approval_expired",
    )

    assert problem["execution"] == body["id"]
    assert Hook.objects.get(pk=pending["hook"]).signals.count() == 0
    assert _batches(standin, body["id"]) == []


def test_a_batch_over_the_blast_radius_needs_an_approval_with_force(
    api, operator_api, aws_worker, standin, route53
):
    zone, name = f"blast-{uuid.uuid4().hex[:8]}.com", "www"
    zone_id = _small_zone(route53, zone, weighted_at=f"{name}.{zone}")
    body = submit(api, "add-subdomain", {"zone": zone, "subdomain": name}).json()
    pending = _paused(api, body["id"])["pending_approval"]
    approve = f"/api/v1/executions/{body['id']}/approve"

    assert pending["force_required"] is True
    refused = operator_api.post(approve, {"plan_hash": pending["plan_hash"]}, format="json")
    assert_problem(refused, 409, "force_required")
    assert _batches(standin, body["id"]) == []

    forced = operator_api.post(
        approve, {"plan_hash": pending["plan_hash"], "force": True}, format="json"
    )

    assert forced.status_code == 202
    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1
    served = _records(route53, zone_id, f"{name}.{zone}")
    assert [(r["Type"], "AliasTarget" in r) for r in served] == [("A", True)]


def test_a_dry_run_over_the_blast_radius_fails_blast_radius(api, aws_worker, standin, route53):
    zone, name = f"blast-{uuid.uuid4().hex[:8]}.com", "www"
    _small_zone(route53, zone, weighted_at=f"{name}.{zone}")

    body = submit(api, "add-subdomain", {"zone": zone, "subdomain": name, "dry_run": True})
    execution = _terminal(body.json()["id"])

    assert execution.status == "failed" and execution.error["code"] == "blast_radius"
    assert execution.error["forceable"] is True
    assert _batches(standin, execution.id) == []


def _small_zone(route53: Any, zone: str, *, weighted_at: str) -> str:
    """A zone of 10 record sets (SOA, NS, the apex alias, 3 TXT, and 4 weighted A at
    ``weighted_at``): replacing the weighted ones deletes 40% of it."""
    zone_id = str(
        route53.create_hosted_zone(Name=zone, CallerReference=f"t-{zone}")["HostedZone"]["Id"]
    ).removeprefix("/hostedzone/")
    alias = {
        "HostedZoneId": "Z2FDTNDATAQYW2",
        "DNSName": "d111111abcdef8.cloudfront.net.",
        "EvaluateTargetHealth": False,
    }
    records: list[dict[str, Any]] = [{"Name": f"{zone}.", "Type": "A", "AliasTarget": alias}]
    records += [
        {"Name": f"t{i}.{zone}.", "Type": "TXT", "TTL": 60, "ResourceRecords": [{"Value": '"x"'}]}
        for i in range(3)
    ]
    records += [
        {
            "Name": f"{weighted_at}.",
            "Type": "A",
            "TTL": 60,
            "SetIdentifier": f"w{i}",
            "Weight": 1,
            "ResourceRecords": [{"Value": f"192.0.2.{20 + i}"}],
        }
        for i in range(4)
    ]
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={"Changes": [{"Action": "CREATE", "ResourceRecordSet": r} for r in records]},
    )
    return zone_id


def _held(api: Any, execution_id: str) -> dict[str, Any]:
    def waiting() -> Any:
        resource = api.get(f"/api/v1/executions/{execution_id}").json()
        held = resource["waiting_for"] and resource["waiting_for"]["code"] == "freeze"
        return held and resource

    return wait_for(waiting, timeout=30, interval=0.2)


def test_a_freeze_holds_the_first_change_until_it_is_ended(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    freeze = operator_api.post(
        "/api/v1/freezes",
        {
            "reason": "holiday freeze",
            "ends_at": (timezone.now() + timedelta(hours=2)).isoformat(),
            "workflows": ["add-subdomain"],
            "subjects": ["*.example.com"],
        },
        format="json",
    )
    assert freeze.status_code == 201, freeze.content
    freeze_id = freeze.json()["id"]
    name = f"{_name()}.example.com"
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    other = submit(api, "add-subdomain", {"zone": "acme.com", "subdomain": _name()}).json()
    dry = submit(
        api, "add-subdomain", {"zone": "example.com", "subdomain": _name(), "dry_run": True}
    ).json()

    resource = _held(api, body["id"])

    assert resource["status"] == "waiting"
    assert resource["waiting_for"]["freeze"] == freeze_id
    assert "holiday freeze" in resource["waiting_for"]["detail"]
    assert resource["waiting_for"]["links"]["end"].endswith(f"/freezes/{freeze_id}/end")
    assert _batches(standin, body["id"]) == []  # the stand-in's journal: nothing sent
    # another zone and a dry run are not held
    assert _terminal(other["id"]).status == "succeeded"
    assert _terminal(dry["id"]).status == "succeeded"
    assert operator_api.get(f"/api/v1/freezes/{freeze_id}").json()["holds"] == [body["id"]]
    assert event_types(body["id"]).count("execution.held") == 1

    ended = operator_api.post(f"/api/v1/freezes/{freeze_id}/end", {"reason": "over"}, format="json")

    assert ended.status_code == 202
    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1
    assert_gapless(body["id"])


def test_an_operator_lets_one_execution_through_a_freeze_with_a_reason(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    freeze_id = operator_api.post(
        "/api/v1/freezes", {"reason": "incident 42"}, format="json"
    ).json()["id"]
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": _name()}).json()
    _held(api, body["id"])
    refused = operator_api.post(
        f"/api/v1/freezes/{freeze_id}/exempt", {"execution": body["id"]}, format="json"
    )
    assert_problem(refused, 422, "invalid_input")  # a reason is required

    let = operator_api.post(
        f"/api/v1/freezes/{freeze_id}/exempt",
        {"execution": body["id"], "reason": "the fix for incident 42"},
        format="json",
    )

    assert let.status_code == 202, let.content
    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert "execution.let_through" in event_types(body["id"])
    operator_api.post(f"/api/v1/freezes/{freeze_id}/end", {}, format="json")


def test_a_freeze_longer_than_the_runs_deadline_holds_it_and_it_still_goes_on(
    api, operator_api, aws_worker, standin, route53, zone_id, durable_clock
):
    freeze_id = operator_api.post(
        "/api/v1/freezes",
        {"reason": "a long weekend", "ends_at": (timezone.now() + timedelta(days=3)).isoformat()},
        format="json",
    ).json()["id"]
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": _name()}).json()
    _held(api, body["id"])

    # two days of durable time pass while it is held: past the run's 24-hour deadline
    durable_clock.advance(body["id"], 2 * 24 * 3600)
    quiesce()
    resource = _held(api, body["id"])  # held again, not timed out
    assert resource["status"] == "waiting"

    operator_api.post(f"/api/v1/freezes/{freeze_id}/end", {}, format="json")
    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1

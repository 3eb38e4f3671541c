"""add-subdomain end to end: real Celery workers, real PostgreSQL and Redis, the AWS stand-in
(seeded like `make run`: example.com with an apex A+AAAA alias). Mutations are counted from
the stand-in's own journal of applied change batches."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from executions.engine.hooks import hook_signal
from executions.models import Execution, Hook
from providers.sandbox.aws import AwsStandIn, seed_aws
from tests.conftest import WorkerProcess, wait_for
from tests.helpers import submit
from tests.integration.test_engine import assert_gapless, event_types

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    aws = AwsStandIn(route53_change_delay=0.3).start()
    seed_aws(aws.url)
    try:
        yield aws
    finally:
        aws.stop()


@pytest.fixture
def route53(standin: AwsStandIn) -> Any:
    return boto3.client(
        "route53",
        endpoint_url=standin.url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


@pytest.fixture
def zone_id(route53: Any) -> str:
    zones = route53.list_hosted_zones_by_name(DNSName="example.com")["HostedZones"]
    return str(zones[0]["Id"]).removeprefix("/hostedzone/")


@pytest.fixture
def aws_worker(standin: AwsStandIn, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerProcess]:
    """A worker whose providers are the stand-in's."""
    for name, value in {
        "ALFRED_PROVIDERS": "sandbox",
        "AWS_ENDPOINT_URL": standin.url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }.items():
        monkeypatch.setenv(name, value)
    proc = WorkerProcess("aws").start()
    try:
        yield proc
    finally:
        proc.stop()


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


def test_a_plain_a_record_pauses_for_the_plan_then_applies_its_approval(
    api, aws_worker, standin, route53, zone_id
):
    name = f"{_name()}.example.com"
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "CREATE",
                    "ResourceRecordSet": {
                        "Name": name,
                        "Type": "A",
                        "TTL": 300,
                        "ResourceRecords": [{"Value": "192.0.2.7"}],
                    },
                }
            ]
        },
    )

    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    paused = wait_for(
        lambda: api.get(f"/api/v1/executions/{body['id']}").json()["status"] == "paused",
        timeout=30,
        interval=0.2,
    )
    resource = api.get(f"/api/v1/executions/{body['id']}").json()

    assert paused and resource["pending_approval"]["plan_hash"]
    plan = resource["pending_approval"]["plan"]
    assert [r["values"] for r in plan["before"] if r["type"] == "A"] == [["192.0.2.7"]]
    assert _batches(standin, body["id"]) == []

    # when: the approval of that hash (what the approve control will send)
    hook = Hook.objects.get(execution_id=body["id"], status="pending")
    hook_signal(
        token=hook.token,
        idempotency_key="ok",
        payload={"plan_hash": resource["pending_approval"]["plan_hash"]},
        principal="ops",
    )

    execution = _terminal(body["id"])
    assert execution.status == "succeeded", execution.error
    assert len(_batches(standin, body["id"])) == 1
    served = [r for r in _records(route53, zone_id, name) if r["Type"] == "A"]
    assert [r.get("AliasTarget", {}).get("DNSName") for r in served] == [
        "d111111abcdef8.cloudfront.net."
    ]


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

"""The sixth workflow, set-txt-record, end to end — proof that docs/writing-a-workflow.md is
enough to add one: nothing outside ``tests/txt_record/`` was edited for it. It is registered
here (this process's catalogue, and the worker's and the web server's through
``ALFRED_EXTRA_WORKFLOWS``), then run as an integrator and an operator would: the API, the
event stream, the admin's pages (its subject and its approval view), the commands, an
approval, a rollback, a dry run, and an approval left to expire with the durable clock moved
forward. Real Celery worker, real uvicorn, real PostgreSQL and Redis, the AWS stand-in; the
mutations are counted from the stand-in's own journal of change batches."""

from __future__ import annotations

import io
import json
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from httpx_sse import connect_sse

from executions import catalog
from executions.models import Execution
from executions.runtime import registry
from providers.sandbox.aws import AwsStandIn
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.support import aws_world
from tests.support.helpers import submit
from tests.support.live import WebServer
from tests.txt_record import workflow

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

EXTRA = f"{os.environ.get('ALFRED_EXTRA_WORKFLOWS', '')},tests.txt_record".lstrip(",")


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    """set-txt-record in this process's catalogue for this module only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(catalog, "_WORKFLOWS", dict(catalog._WORKFLOWS))
        patch.setattr(registry, "_DEFINITIONS", dict(registry._DEFINITIONS))
        catalog.workflow_register(workflow)
        yield


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started() as aws:
        yield aws


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    with aws_world.aws_worker(standin, "txt", ALFRED_EXTRA_WORKFLOWS=EXTRA) as worker:
        yield worker


@pytest.fixture
def aws_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    yield aws_world.alive(module_worker)
    quiesce()


@pytest.fixture(scope="module")
def web(django_db_setup: None) -> Iterator[WebServer]:
    server = WebServer("txt-record", ALFRED_EXTRA_WORKFLOWS=EXTRA).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def route53(standin: AwsStandIn) -> Any:
    return aws_world.client(standin, "route53")


@pytest.fixture
def zone_id(route53: Any) -> str:
    return aws_world.zone_id_of(route53)


def _label() -> str:
    return f"v{uuid.uuid4().hex[:8]}"


def _txt(route53: Any, zone_id: str, name: str, value: str) -> None:
    record = {"Name": name, "Type": "TXT", "TTL": 300, "ResourceRecords": [{"Value": value}]}
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={"Changes": [{"Action": "UPSERT", "ResourceRecordSet": record}]},
    )


def _values(route53: Any, zone_id: str, name: str) -> list[str]:
    found = route53.list_resource_record_sets(
        HostedZoneId=zone_id, StartRecordName=name, StartRecordType="TXT", MaxItems="1"
    )["ResourceRecordSets"]
    return [
        v["Value"]
        for r in found
        if r["Name"].rstrip(".") == name and r["Type"] == "TXT"
        for v in r["ResourceRecords"]
    ]


def _batches(standin: AwsStandIn, execution_id: str) -> int:
    return len([b for b in standin.route53.change_batches if execution_id in (b.comment or "")])


def _until(execution_id: str, *statuses: str, timeout: float = 60) -> Execution:
    return wait_for(
        lambda: (e := Execution.objects.get(pk=execution_id)).status in statuses and e,
        timeout=timeout,
        interval=0.2,
    )


def _follow(base: str, token: str, execution_id: str, seen: list[str]) -> None:
    """The event stream, as docs/contract.md's recipe reads it, until the execution settles."""
    last: str | None = None
    with httpx.Client(
        base_url=base,
        timeout=None,  # noqa: S113 - the recipe's: a stream lasts as long as the execution
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        while True:
            headers = {"Last-Event-ID": last} if last else {}
            try:
                with connect_sse(
                    client,
                    "GET",
                    f"/api/v1/executions/{execution_id}/events/stream",
                    headers=headers,
                ) as source:
                    if source.response.status_code == 204:
                        return
                    for sse in source.iter_sse():
                        if sse.data:
                            last = sse.id
                            seen.append(json.loads(sse.data)["type"])
            except httpx.TransportError:
                continue


def _admin() -> Client:
    client = Client()
    client.force_login(
        get_user_model().objects.create_superuser(f"admin-{uuid.uuid4().hex[:6]}", password="x")
    )
    return client


def _command(*args: str) -> str:
    """What the command says, on its output and on its error stream (the notes for a person)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("alfred_executions", *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_it_is_served_like_the_five(api):
    listed = {w["name"]: w for w in api.get("/api/v1/workflows").json()}
    assert listed["set-txt-record"]["stages"] == ["plan", "apply", "verify"]
    assert listed["set-txt-record"]["input_schema"]["required"] == ["zone", "name", "value"]

    refused = submit(api, "set-txt-record", {"zone": "example.com", "name": "a b", "value": ""})

    assert refused.status_code == 422
    assert {e["field"] for e in refused.json()["errors"]} == {"/name", "/value"}


def test_replacing_a_value_waits_for_approval_applies_once_and_rolls_back_exactly(
    api, operator_api, integration_token, aws_worker, web, standin, route53, zone_id
):
    # given: someone else's value at the name
    name = f"{_label()}.example.com"
    _txt(route53, zone_id, name, '"theirs"')
    body = submit(api, "set-txt-record", {"zone": "example.com", "name": name, "value": "ours"})
    assert body.status_code == 202, body.content
    execution_id = body.json()["id"]
    seen: list[str] = []
    follower = threading.Thread(
        target=_follow, args=(web.base, integration_token, execution_id, seen), daemon=True
    )
    follower.start()

    # when: it pauses on its plan, which the admin and the command line show
    paused = _until(execution_id, "paused")
    pending = api.get(f"/api/v1/executions/{execution_id}").json()["pending_approval"]
    page = _admin().get(f"/admin/executions/execution/{execution_id}/change/")
    shown = _command("show", execution_id)

    # then: its subject and its approval view, drawn by the engine from the workflow's words
    assert page.status_code == 200
    html = page.content.decode()
    assert f"TXT {name}" in html and "The TXT values at the name" in html
    assert "&quot;theirs&quot;" in html and "&quot;ours&quot;" in html
    assert f"acts on: TXT {name}" in shown
    assert f"plan {pending['plan_hash']} waits for approval:" in shown
    assert '"theirs" | "ours" | replaced' in shown and f"UPSERT TXT {name}" in shown
    assert paused.input["name"] == name and _batches(standin, execution_id) == 0

    # when: an operator approves the exact plan from the command line
    said = _command("approve", execution_id, "--plan-hash", pending["plan_hash"], "--actor", "al")

    # then: one batch, the value in place, every event streamed
    assert f"plan {pending['plan_hash']} approved" in said
    assert _until(execution_id, "succeeded", "failed").status == "succeeded"
    assert _values(route53, zone_id, name) == ['"ours"']
    assert _batches(standin, execution_id) == 1
    follower.join(60)
    assert seen[0] == "execution.accepted" and "execution.paused" in seen
    assert seen[-1] == "execution.succeeded" or "execution.succeeded" in seen

    # when: it is rolled back
    answer = operator_api.post(
        f"/api/v1/executions/{execution_id}/rollback", {"reason": "undo"}, format="json"
    )

    # then: the batch's exact undo, from its receipt: their value back, one batch more
    assert answer.status_code == 202, answer.content
    assert _until(execution_id, "rolled_back", "failed").status == "rolled_back"
    assert _values(route53, zone_id, name) == ['"theirs"']
    assert _batches(standin, execution_id) == 2


def test_its_drift_check_is_the_watch_s_like_the_five_s(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    # given: a value it set, then changed by hand
    name = f"{_label()}.example.com"
    body = submit(api, "set-txt-record", {"zone": "example.com", "name": name, "value": "ours"})
    assert _until(body.json()["id"], "succeeded", "failed").status == "succeeded"
    _txt(route53, zone_id, name, '"edited"')

    # when: an operator checks it now, from the command line (a worker checks it)
    said = _drift("check", body.json()["id"])

    # then: the watch found it, in the workflow's own words, through the engine that knows
    # no workflow; the API and the list show it
    assert f"{body.json()['id']}: drifted" in said and f"TXT {name}" in said
    assert 'expected: ["\\"ours\\""]' in said and 'found:    ["\\"edited\\""]' in said
    resource = api.get(f"/api/v1/executions/{body.json()['id']}").json()
    drift = api.get(resource["links"]["drift"]).json()
    assert drift["workflow"] == "set-txt-record" and drift["subject"] == f"TXT {name}"
    assert f"TXT {name}" in _drift("list")


def _drift(*args: str) -> str:
    out = io.StringIO()
    call_command("alfred_drift", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_plans_from_the_zone_and_changes_nothing(
    api, aws_worker, standin, route53, zone_id
):
    name = f"{_label()}.example.com"
    _txt(route53, zone_id, name, '"theirs"')

    body = submit(
        api, "set-txt-record", {"zone": "example.com", "name": name, "value": "x", "dry_run": True}
    ).json()

    execution = _until(body["id"], "succeeded", "failed")
    assert execution.status == "succeeded", execution.error
    assert execution.result == {"verified": "simulated", "values": ['"x"']}  # verify's output
    assert _batches(standin, body["id"]) == 0
    assert _values(route53, zone_id, name) == ['"theirs"']


def test_an_approval_nobody_gives_expires_when_the_durable_clock_moves_on(
    api, aws_worker, durable_clock, standin, route53, zone_id
):
    name = f"{_label()}.example.com"
    _txt(route53, zone_id, name, '"theirs"')
    body = submit(api, "set-txt-record", {"zone": "example.com", "name": name, "value": "ours"})
    execution_id = body.json()["id"]
    _until(execution_id, "paused")

    # when: the approval's lifetime passes (7 days), in no time
    durable_clock.advance(execution_id, settings.ALFRED_APPROVAL_TTL_SECONDS)

    # then
    execution = _until(execution_id, "failed", "succeeded")
    assert execution.error["code"] == "approval_expired"
    assert _batches(standin, execution_id) == 0

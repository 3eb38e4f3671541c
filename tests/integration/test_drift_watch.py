"""The drift watch end to end (docs/contract.md, "The drift watch"): a real Celery worker runs
the beat's task against the AWS stand-in, real PostgreSQL records what it found. What the watch
sends to AWS is counted from the stand-in's own journal: reads, never a mutation.

The worker watches with a one-second period, so each tick finds every watched execution due
(in production a period is hours and the checks spread over it)."""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command

from executions import drift as watch
from executions.models import AuditEntry, Drift, DriftWatch, Execution, OutboxEvent
from executions.tasks import drift_watch
from providers.config import ProviderConfig
from providers.sandbox.aws import AwsStandIn
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.integration.test_engine import assert_gapless
from tests.integration.test_update_lambda_version import make_fleet
from tests.support import aws_world
from tests.support.helpers import assert_problem, submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# What would change something at AWS: none of these may reach the stand-in from a check.
MUTATIONS = frozenset(
    {
        "ChangeResourceRecordSets",
        "CreateHostedZone",
        "DeleteHostedZone",
        "RequestCertificate",
        "DeleteCertificate",
        "UpdateAlias",
        "CreateAlias",
        "DeleteAlias",
        "UpdateFunctionCode",
        "PublishVersion",
    }
)


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started() as aws:
        yield aws


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    with aws_world.aws_worker(standin, "drift", ALFRED_DRIFT_PERIOD_SECONDS="1") as worker:
        yield worker


@pytest.fixture
def aws_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    yield aws_world.alive(module_worker)
    quiesce()


@pytest.fixture
def route53(standin: AwsStandIn) -> Any:
    return aws_world.client(standin, "route53")


@pytest.fixture
def zone_id(route53: Any) -> str:
    return aws_world.zone_id_of(route53)


@pytest.fixture
def providers_here(standin: AwsStandIn, settings: Any) -> None:
    """This process's providers are the stand-in's too (the tests that run the watch here)."""
    settings.ALFRED_PROVIDERS = ProviderConfig.from_env(aws_world.environ(standin))


def _mutations(standin: AwsStandIn) -> int:
    return sum(n for op, n in standin.journal()["calls"].items() if op in MUTATIONS)


def _succeeded(api: Any, workflow: str, body: dict[str, Any]) -> Execution:
    answer = submit(api, workflow, body).json()
    execution = wait_for(
        lambda: (e := Execution.objects.get(pk=answer["id"])).terminal and e,
        timeout=60,
        interval=0.2,
    )
    assert execution.status == "succeeded", execution.error
    return execution


def _checked(execution_id: str, after: int = 0) -> DriftWatch:
    """The execution's watch once the worker's watch checked it more than ``after`` times
    (a tick is sent to the worker as beat sends it, again each second until then)."""

    def done() -> DriftWatch | None:
        drift_watch.apply_async(queue="scanners")
        found = DriftWatch.objects.filter(pk=execution_id).first()
        return found if found is not None and found.checks > after else None

    return wait_for(done, timeout=30, interval=1.0)


def _retired(execution_id: str) -> DriftWatch:
    """The execution's watch once the worker's watch retired it (ticks sent as in _checked)."""

    def done() -> DriftWatch | None:
        drift_watch.apply_async(queue="scanners")
        found = DriftWatch.objects.get(pk=execution_id)
        return found if found.retired_at is not None else None

    return wait_for(done, timeout=30, interval=1.0)


def _types(execution_id: str) -> list[str]:
    return list(
        OutboxEvent.objects.filter(execution_id=execution_id)
        .order_by("sequence")
        .values_list("type", flat=True)
    )


def _upsert_plain_a(route53: Any, zone_id: str, name: str, value: str = "192.0.2.10") -> None:
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "UPSERT",
                    "ResourceRecordSet": {
                        "Name": name,
                        "Type": "A",
                        "TTL": 300,
                        "ResourceRecords": [{"Value": value}],
                    },
                }
            ]
        },
    )


def _name() -> str:
    return f"drift-{uuid.uuid4().hex[:10]}.example.com"


def test_a_record_changed_by_hand_is_drift_once_and_an_operator_accepts_it(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    name = _name()
    execution = _succeeded(api, "add-subdomain", {"zone": "example.com", "subdomain": name})
    mutations = _mutations(standin)

    first = _checked(execution.id)
    assert first.outcome == "in_place" and not Drift.objects.filter(execution=execution).exists()

    _upsert_plain_a(route53, zone_id, name)
    mutations += 1  # the change by hand, the only one
    seen = _checked(execution.id, first.checks)
    assert seen.outcome == "drifted"
    drift = Drift.objects.get(execution=execution)
    assert drift.status == "open"
    assert [f["what"] for f in drift.findings] == [f"A {name}"]
    (finding,) = drift.findings
    assert finding["expected"]["alias"]["dns_name"].startswith("d111111abcdef8.cloudfront.net")
    assert finding["found"]["values"] == ["192.0.2.10"] and finding["found"]["alias"] is None

    again = _checked(execution.id, seen.checks)  # the same drift seen again: no new event
    assert again.outcome == "drifted"
    assert _types(execution.id).count("execution.drifted") == 1
    assert _mutations(standin) == mutations  # the watch read, and changed nothing

    resource = api.get(f"/api/v1/executions/{execution.id}").json()
    assert resource["drift"] == drift.id and "accept_drift" not in resource["links"]
    assert resource["links"]["redo"].endswith(f"/executions/{execution.id}/redo")
    listed = api.get("/api/v1/drifts?status=open").json()["results"]
    assert [d["id"] for d in listed] == [drift.id] and listed[0]["subject"] == name
    assert api.get(f"/api/v1/drifts/{drift.id}").json()["findings"] == drift.findings
    assert_problem(api.get("/api/v1/drifts?status=gone"), 400, "malformed_request")
    assert_problem(api.get("/api/v1/drifts?workflow=nope"), 400, "malformed_request")
    assert api.get("/api/v1/drifts?status=open&workflow=add-subdomain").json()["results"]

    assert_problem(
        operator_api.post(f"/api/v1/executions/{execution.id}/accept_drift", {}, format="json"),
        422,
        "invalid_input",
    )
    answer = operator_api.post(
        f"/api/v1/executions/{execution.id}/accept_drift",
        {"reason": "the origin moved to a fixed address"},
        format="json",
    )
    assert answer.status_code == 202, answer.content
    assert answer.json()["drift"] is None
    drift.refresh_from_db()
    assert drift.status == "accepted" and drift.reason == "the origin moved to a fixed address"
    assert AuditEntry.objects.filter(action="execution.accept_drift", target_id=execution.id)

    accepted = _checked(execution.id, again.checks)  # what was accepted is not drift again
    assert accepted.outcome == "accepted"
    assert Drift.objects.filter(execution=execution, status="open").count() == 0

    _upsert_plain_a(route53, zone_id, name, "192.0.2.11")  # changed from what was accepted
    _checked(execution.id, accepted.checks)
    reopened = Drift.objects.get(execution=execution, status="open")
    assert reopened.findings[0]["found"]["values"] == ["192.0.2.11"]
    assert _types(execution.id)[-3:] == [
        "execution.drifted",
        "execution.drift_ended",
        "execution.drifted",
    ]
    assert_gapless(execution.id)


def test_a_drift_put_back_by_hand_ends_resolved(api, aws_worker, route53, zone_id):
    name = _name()
    execution = _succeeded(api, "add-subdomain", {"zone": "example.com", "subdomain": name})
    served = route53.list_resource_record_sets(
        HostedZoneId=zone_id, StartRecordName=name, StartRecordType="A", MaxItems="1"
    )["ResourceRecordSets"][0]
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={"Changes": [{"Action": "DELETE", "ResourceRecordSet": served}]},
    )
    deleted = _checked(execution.id)
    drift = Drift.objects.get(execution=execution)
    assert deleted.outcome == "drifted" and drift.findings[0]["found"] is None

    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={"Changes": [{"Action": "CREATE", "ResourceRecordSet": served}]},
    )
    _checked(execution.id, deleted.checks)
    drift.refresh_from_db()
    assert drift.status == "resolved" and drift.ended_by == "drift-watch"
    assert Execution.objects.get(pk=execution.id).drift_id is None


def test_started_again_the_new_execution_asks_for_approval_and_supersedes_the_drifted_one(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    name = _name()
    execution = _succeeded(api, "add-subdomain", {"zone": "example.com", "subdomain": name})
    _upsert_plain_a(route53, zone_id, name)
    _checked(execution.id)
    drift = Drift.objects.get(execution=execution, status="open")

    answer = operator_api.post(f"/api/v1/executions/{execution.id}/redo", {}, format="json")
    assert answer.status_code == 202, answer.content
    again = answer.json()
    assert again["id"] != execution.id and again["predecessor"] == execution.id
    twice = api.post(f"/api/v1/executions/{execution.id}/redo", {}, format="json")
    assert twice.json()["id"] == again["id"]  # one drift starts one execution
    assert Execution.objects.get(pk=again["id"]).principal == execution.principal

    # its plan replaces the A record someone wrote: it waits for an operator, as any would
    paused = wait_for(
        lambda: (
            (r := api.get(f"/api/v1/executions/{again['id']}").json())["status"] == "paused" and r
        ),
        timeout=30,
        interval=0.2,
    )
    plan_hash = paused["pending_approval"]["plan_hash"]
    # the operator who started it again asked for it: another approves its plan
    assert_problem(
        operator_api.post(
            f"/api/v1/executions/{again['id']}/approve", {"plan_hash": plan_hash}, format="json"
        ),
        403,
        "approver_not_permitted",
    )
    said = io.StringIO()
    call_command(
        "alfred_executions",
        "approve",
        again["id"],
        "--plan-hash",
        plan_hash,
        "--actor",
        "second",
        "--wait",
        "0",
        stdout=said,
    )
    assert f"approval of plan {plan_hash} rec" in said.getvalue()
    wait_for(
        lambda: Execution.objects.get(pk=again["id"]).status == "succeeded",
        timeout=60,
        interval=0.2,
    )

    retired = _retired(execution.id)
    assert retired.retired_reason == f"superseded by {again['id']}"
    drift.refresh_from_db()
    assert drift.status == "superseded" and drift.replaced_by_id == again["id"]
    assert _checked(again["id"]).outcome == "in_place"
    assert AuditEntry.objects.filter(action="execution.redo", target_id=execution.id).count() == 1


def test_an_alias_moved_by_hand_is_drift_and_one_moved_by_a_later_execution_is_not(
    api, aws_worker, standin
):
    client = aws_world.client(standin, "lambda")
    fleet, names = make_fleet(client)
    body = {"target": fleet, "environment": "staging", "version": "3", "ticket_ids": ["REL-1"]}
    execution = _succeeded(api, "update-lambda-version", body)

    client.update_alias(FunctionName=names[0], Name="staging", FunctionVersion="1")
    _checked(execution.id)
    drift = Drift.objects.get(execution=execution, status="open")
    assert drift.findings == [
        {"what": f"alias staging of {names[0]}", "expected": "3", "found": "1"}
    ]

    later = _succeeded(
        api, "update-lambda-version", {**body, "version": "2", "ticket_ids": ["REL-2"]}
    )
    retired = _retired(execution.id)
    assert retired.retired_reason == f"superseded by {later.id}"
    drift.refresh_from_db()
    assert drift.status == "superseded"
    assert _checked(later.id).outcome == "in_place"


def test_two_watches_at_once_check_each_execution_once(
    api, aws_worker, standin, providers_here, settings
):
    settings.ALFRED_DRIFT_PERIOD_SECONDS = 3600.0  # checked now, then not for an hour
    executions = [
        _succeeded(api, "add-subdomain", {"zone": "example.com", "subdomain": _name()})
        for _ in range(4)
    ]
    # enrolled a batch of one at a time: each finds the next, though all four finished
    # within the margin enrolment looks back over (the worker's own beat, a third watch,
    # may have enrolled some first: it ticks every 30 s, at a moment of its own)
    enrolled = [watch.watch_enrol(limit=1) for _ in range(5)]
    assert set(enrolled) <= {0, 1} and enrolled[-1] == 0 and enrolled == sorted(enrolled)[::-1]
    assert DriftWatch.objects.filter(execution__in=executions).count() == len(executions)
    DriftWatch.objects.update(due_at=watch.db_now() - timedelta(seconds=1))
    reads = standin.journal()["calls"].get("ListResourceRecordSets", 0)
    ticks: list[watch.Tick] = []

    def beat() -> None:
        ticks.append(watch.drift_watch_tick(budget=30))

    beats = [threading.Thread(target=beat) for _ in range(2)]
    for thread in beats:
        thread.start()
    for thread in beats:
        thread.join()

    assert sum(t.checked for t in ticks) <= len(executions)  # the worker's beat: see above
    assert [w.checks for w in DriftWatch.objects.all()] == [1] * len(executions)
    # one read per check (the name's record sets), none twice
    assert standin.journal()["calls"]["ListResourceRecordSets"] - reads == len(executions)


def test_a_check_whose_process_died_after_its_claim_is_made_again_after_the_lease(
    api, aws_worker, providers_here, settings, monkeypatch
):
    settings.ALFRED_DRIFT_PERIOD_SECONDS = 3600.0
    execution = _succeeded(api, "add-subdomain", {"zone": "example.com", "subdomain": _name()})
    watch.watch_enrol()
    lost = watch.watch_claim(execution.id)  # claimed by a process that then died
    assert lost is not None

    assert watch.drift_watch_tick(budget=5).checked == 0  # within the lease: nobody checks it

    DriftWatch.objects.filter(pk=execution.id).update(due_at=watch.db_now())  # the lease ran out
    assert watch.drift_watch_tick(budget=5).outcomes == {"in_place": 1}
    watch._record(
        lost, watch.Checked(watch.Outcome.DRIFTED, [{"what": "x", "expected": 1, "found": 2}])
    )
    checked = DriftWatch.objects.get(pk=execution.id)
    assert checked.checks == 1 and checked.outcome == "in_place"  # the dead claim's fence lost
    assert not Drift.objects.exists()


def test_a_check_that_finds_drift_while_a_rollback_starts_records_none(
    api, operator_api, aws_worker, route53, zone_id, providers_here, settings
):
    settings.ALFRED_DRIFT_PERIOD_SECONDS = 3600.0
    name = _name()
    execution = _succeeded(api, "add-subdomain", {"zone": "example.com", "subdomain": name})
    watch.watch_enrol()
    claim = watch.watch_claim(execution.id)
    assert claim is not None
    _upsert_plain_a(route53, zone_id, name)
    checked = watch._checked(Execution.objects.get(pk=execution.id))  # the reads: drift
    assert checked.outcome == "drifted"

    # an operator rolls it back while the check was reading (the rollback's own change is
    # what the check saw, or will see)
    answer = operator_api.post(
        f"/api/v1/executions/{execution.id}/rollback", {"reason": "undo"}, format="json"
    )
    assert answer.status_code == 202, answer.content

    assert watch._record(claim, checked) in ("postponed", "retired")
    assert not Drift.objects.filter(execution=execution).exists()
    assert "execution.drifted" not in _types(execution.id)

"""add-certificate end to end: a real Celery worker (one for the module), real PostgreSQL and
Redis, the AWS stand-in (seeded like `make run`: the example.com and acme.com zones; ACM
issues a certificate only once its validation CNAMEs are served by the stand-in's Route53).
Mutations are counted from the stand-in's own records: moto's certificates (tagged with the
execution id), the journal of applied change batches (each batch's comment names the
execution) and the requests that reached it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from executions.drift import drift_check_now
from executions.models import Drift, Execution, Stage, StepReceipt
from providers.config import ProviderConfig
from providers.sandbox.aws import AwsStandIn
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.integration.test_engine import assert_gapless
from tests.support import aws_world
from tests.support.helpers import submit
from workflows.add_certificate.stages import ISSUED_TIMEOUT_SECONDS

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]

REGION = "us-east-1"
REQUEST = "RequestCertificate"
SEND = "ChangeResourceRecordSets"


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started(acm_record_delay=0.5, acm_issue_delay=1.0) as aws:
        yield aws


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    """One worker for the module, the stand-in's providers (after the test database exists:
    the worker is given its name)."""
    with aws_world.aws_worker(standin, "acm") as worker:
        yield worker


@pytest.fixture
def aws_worker(module_worker: WorkerProcess, standin: AwsStandIn) -> Iterator[WorkerProcess]:
    """The module's worker, idle again before the database is flushed (see
    ``tests.conftest.shared_worker``)."""
    yield aws_world.alive(module_worker)
    standin.faults.clear()
    quiesce()


def _client(standin: AwsStandIn, service: str) -> Any:
    return aws_world.client(standin, service)


def _label() -> str:
    return f"c{uuid.uuid4().hex[:10]}"


def _terminal(execution_id: str, timeout: float = 60.0, *, rollback: bool = False) -> Execution:
    def done() -> Execution | None:
        execution = Execution.objects.select_related("current_run").get(pk=execution_id)
        run = execution.current_run
        ended = execution.terminal and run is not None and (run.kind == "rollback") == rollback
        return execution if ended else None

    return wait_for(done, timeout=timeout, interval=0.2)


def certificates_of(standin: AwsStandIn, execution_id: str) -> list[dict[str, Any]]:
    """The certificates in the stand-in's account tagged with the execution (describe)."""
    acm = _client(standin, "acm")
    found = []
    for summary in acm.list_certificates()["CertificateSummaryList"]:
        arn = summary["CertificateArn"]
        tags = acm.list_tags_for_certificate(CertificateArn=arn).get("Tags") or []
        if {"Key": "alfred:execution", "Value": execution_id} in tags:
            found.append(
                {**acm.describe_certificate(CertificateArn=arn)["Certificate"], "Tags": tags}
            )
    return found


def batches_of(standin: AwsStandIn, execution_id: str) -> list[Any]:
    return [b for b in standin.route53.change_batches if execution_id in (b.comment or "")]


def served(standin: AwsStandIn, name: str) -> list[str]:
    return standin.route53.lookup(name, "CNAME")


def _moto_certificate(standin: AwsStandIn, arn: str) -> Any:
    from moto.acm.models import acm_backends

    return acm_backends[standin.moto_account][REGION].get_certificate(arn)


def _stage(execution_id: str, name: str) -> Stage:
    return Stage.objects.filter(run__execution_id=execution_id, name=name).order_by("-run__number")[
        0
    ]


def test_a_certificate_is_requested_once_validated_per_zone_and_issued_after_pending(
    api, aws_worker, standin
):
    # given: names in two zones, a wildcard sharing its base's validation record
    label = _label()
    domain = f"{label}.example.com"
    alternative = [f"*.{label}.example.com", f"{label}.acme.com"]
    requests = standin.calls[REQUEST]

    # when
    body = submit(
        api,
        "add-certificate",
        {"domain": domain, "alternative_names": alternative, "ticket_ids": ["ops-9"]},
    ).json()
    execution = _terminal(body["id"])

    # then: succeeded with ONE certificate (tagged), ONE batch per zone, ISSUED after PENDING
    assert execution.status == "succeeded", execution.error
    (certificate,) = certificates_of(standin, execution.id)
    assert certificate["Status"] == "ISSUED"
    assert {"Key": "alfred:tickets", "Value": "OPS-9"} in certificate["Tags"]
    assert standin.calls[REQUEST] - requests == 1
    assert sorted(b.comment.rsplit(" ", 1)[1] for b in batches_of(standin, execution.id)) == [
        "acme.com",
        "example.com",
    ]
    records = _stage(execution.id, "validate_dns").output["records"]
    assert len(records) == 2  # the wildcard's record is its base's
    assert all(served(standin, r["name"]) for r in records)
    issued = StepReceipt.objects.get(run__execution_id=execution.id, step_key="issued")
    assert issued.output["polls"] >= 2  # at least one poll saw PENDING_VALIDATION
    verify = _stage(execution.id, "verify").output
    assert verify["certificate_status"] == "ISSUED"
    assert verify["validation_records_in_place"] is True
    assert verify["certificate_arn"] == certificate["CertificateArn"]
    assert_gapless(execution.id)


def test_an_adopted_certificate_is_validated_without_requesting_one(api, aws_worker, standin):
    # given: a certificate someone requested, pending validation, and one of its records
    # already in place (identical: a no-op, and not Alfred's)
    label = _label()
    domain = f"{label}.example.com"
    acm = _client(standin, "acm")
    arn = acm.request_certificate(
        DomainName=domain,
        ValidationMethod="DNS",
        SubjectAlternativeNames=[domain, f"www.{label}.acme.com"],
    )["CertificateArn"]

    def published() -> list[dict[str, Any]] | None:
        found = acm.describe_certificate(CertificateArn=arn)["Certificate"]
        options = found.get("DomainValidationOptions") or []
        return options if options and all(o.get("ResourceRecord") for o in options) else None

    options = wait_for(published, timeout=10)
    existing = next(o["ResourceRecord"] for o in options if o["DomainName"] == domain)
    route53 = _client(standin, "route53")
    zone_id = route53.list_hosted_zones_by_name(DNSName="example.com")["HostedZones"][0]["Id"]
    route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "CREATE",
                    "ResourceRecordSet": {
                        "Name": existing["Name"],
                        "Type": "CNAME",
                        "TTL": 60,
                        "ResourceRecords": [{"Value": existing["Value"]}],
                    },
                }
            ]
        },
    )
    requests = standin.calls[REQUEST]

    # when
    body = submit(api, "add-certificate", {"domain": domain, "certificate_arn": arn}).json()
    execution = _terminal(body["id"])

    # then: no certificate requested; only the missing record written, in its zone's batch
    assert execution.status == "succeeded", execution.error
    assert standin.calls[REQUEST] == requests
    (batch,) = batches_of(standin, execution.id)
    assert batch.comment.endswith("acme.com")
    assert _stage(execution.id, "request").output == {"certificate_arn": arn, "requested": False}
    verify = _stage(execution.id, "verify").output
    assert verify["certificate_arn"] == arn and verify["certificate_status"] == "ISSUED"


def test_a_certificate_arn_that_does_not_cover_the_names_fails_in_plan(api, aws_worker, standin):
    # given: a certificate for another name
    label = _label()
    arn = _client(standin, "acm").request_certificate(
        DomainName=f"other-{label}.example.com", ValidationMethod="DNS"
    )["CertificateArn"]
    requests, sent = standin.calls[REQUEST], standin.calls[SEND]

    # when
    body = submit(
        api, "add-certificate", {"domain": f"{label}.example.com", "certificate_arn": arn}
    ).json()
    execution = _terminal(body["id"])

    # then
    assert execution.status == "failed"
    assert execution.error["code"] == "certificate_mismatch"
    assert execution.error["missing"] == [f"{label}.example.com"]
    assert _stage(execution.id, "plan").status == "failed"
    assert (standin.calls[REQUEST], standin.calls[SEND]) == (requests, sent)


def test_a_name_without_a_zone_is_a_readiness_failure_that_frees_the_lane(api, aws_worker, standin):
    # given: the plan of the first is slowed (its zone lookups throttled, then answered), so
    # the second queues behind it on the aws-infrastructure lane
    label = _label()
    standin.faults.arm("ListHostedZonesByName", "throttle", times=2)
    first = submit(
        api,
        "add-certificate",
        {"domain": f"{label}.example.com", "alternative_names": [f"{label}.example.org"]},
    ).json()
    second = submit(api, "add-certificate", {"domain": f"next-{label}.example.com"}).json()
    assert second["lane"]["role"] == "queued", second["lane"]

    # when
    failed = _terminal(first["id"])

    # then: a readiness failure naming the name, the lane let go, the next one run
    assert failed.status == "failed"
    assert failed.error["code"] == "readiness_failure"
    assert failed.error["readiness"]["code"] == "hosted_zone_missing"
    assert f"{label}.example.org" in failed.error["message"]
    assert f"{label}.example.com" not in failed.error["message"]
    assert certificates_of(standin, failed.id) == []
    succeeded = _terminal(second["id"])
    assert succeeded.status == "succeeded", succeeded.error


def test_lost_responses_to_the_request_and_the_batch_change_nothing_twice(api, aws_worker, standin):
    # given: the first answers to RequestCertificate and to the batch are lost (applied)
    label = _label()
    standin.faults.arm(REQUEST, "lose_response", times=1)
    standin.faults.arm(SEND, "lose_response", times=1)
    requests, sent = standin.calls[REQUEST], standin.calls[SEND]

    # when
    body = submit(api, "add-certificate", {"domain": f"{label}.example.com"}).json()
    execution = _terminal(body["id"])

    # then: both faults struck; one certificate (the repeat, with the execution's token, got
    # the same one back), one batch, sent once (the recovery read found it landed)
    assert execution.status == "succeeded", execution.error
    assert standin.faults.listing() == []
    assert standin.calls[REQUEST] - requests == 2
    assert len(certificates_of(standin, execution.id)) == 1
    assert len(batches_of(standin, execution.id)) == 1
    assert standin.calls[SEND] - sent == 1


def test_a_rollback_deletes_the_records_and_the_certificate_alfred_made(
    api, operator_api, aws_worker, standin
):
    # given: an issued certificate
    label = _label()
    body = submit(api, "add-certificate", {"domain": f"{label}.example.com"}).json()
    assert _terminal(body["id"]).status == "succeeded"
    (record,) = _stage(body["id"], "validate_dns").output["records"]

    # when
    answer = operator_api.post(
        f"/api/v1/executions/{body['id']}/rollback", {"reason": "test"}, format="json"
    )
    assert answer.status_code == 202, answer.content
    execution = _terminal(body["id"], rollback=True)

    # then: the record Alfred wrote is gone, and so is the certificate
    assert execution.status == "rolled_back", execution.error
    assert served(standin, record["name"]) == []
    assert certificates_of(standin, execution.id) == []
    assert (
        len(
            [
                b
                for b in standin.route53.change_batches
                if b.comment == f"alfred rollback {execution.id}"
            ]
        )
        == 1
    )


def test_a_rollback_leaves_a_certificate_in_use_and_its_records_alone_as_drifted(
    api, operator_api, aws_worker, standin
):
    # given: an issued certificate that a load balancer uses since
    label = _label()
    body = submit(api, "add-certificate", {"domain": f"{label}.example.com"}).json()
    assert _terminal(body["id"]).status == "succeeded"
    arn = _stage(body["id"], "verify").output["certificate_arn"]
    _moto_certificate(standin, arn).in_use_by.append("arn:aws:elasticloadbalancing:lb/app/x")
    (record,) = _stage(body["id"], "validate_dns").output["records"]

    # when
    answer = operator_api.post(
        f"/api/v1/executions/{body['id']}/rollback", {"reason": "test"}, format="json"
    )
    assert answer.status_code == 202, answer.content
    execution = _terminal(body["id"], rollback=True)

    # then: nothing is undone: the certificate and the records it renews with stay, for an
    # operator (who holds the lane)
    assert execution.status == "failed"
    assert execution.error["code"] == "drifted"
    assert served(standin, record["name"]) != []
    assert len(certificates_of(standin, execution.id)) == 1
    assert not [
        b for b in standin.route53.change_batches if b.comment == f"alfred rollback {execution.id}"
    ]
    _release_lane(operator_api, execution.id)


def _release_lane(operator_api: Any, owner: str) -> None:
    """An operator lets the blocked aws-infrastructure lane go (the next tests need it)."""
    answer = operator_api.post(
        "/api/v1/lanes/aws-infrastructure/recover",
        {"expected_owner": owner, "reason": "test: the drift is known"},
        format="json",
    )
    assert answer.status_code == 202, answer.content


def test_a_certificate_that_failed_validation_is_continued_without_a_second(
    api, operator_api, aws_worker, standin
):
    # given: a certificate that ACM fails once its records are written
    label = _label()
    data = {"domain": f"{label}.example.com"}
    delay, standin.acm_issue_delay = standin.acm_issue_delay, 3600.0
    try:
        first = submit(api, "add-certificate", data).json()
        wait_for(lambda: _stage(first["id"], "validate_dns").status == "succeeded", timeout=30)
        (certificate,) = certificates_of(standin, first["id"])
        _moto_certificate(standin, certificate["CertificateArn"]).status = "FAILED"
        failed = _terminal(first["id"])
    finally:
        standin.acm_issue_delay = delay
    assert failed.status == "failed"
    assert failed.error["code"] == "certificate_failed"
    assert _stage(first["id"], "await_issued").status == "failed"

    # when: (the failure unclassified, an operator lets the lane go; ACM would try again) it
    # is asked for again, with a new key
    _release_lane(operator_api, first["id"])
    _moto_certificate(standin, certificate["CertificateArn"]).status = "PENDING_VALIDATION"
    again = submit(api, "add-certificate", data).json()
    execution = _terminal(first["id"])

    # then: the same execution, continued to ISSUED, with no second certificate nor batch
    assert again["id"] == first["id"]
    assert again["acceptance"]["outcome"] == "continued"
    assert execution.status == "succeeded", execution.error
    assert len(certificates_of(standin, first["id"])) == 1
    assert len(batches_of(standin, first["id"])) == 1


def test_a_certificate_acm_never_issues_ends_after_acm_s_72_hours_not_the_runs_deadline(
    api, aws_worker, standin, durable_clock
):
    # given: ACM keeps the certificate PENDING_VALIDATION
    delay, standin.acm_issue_delay = standin.acm_issue_delay, 10.0**9
    try:
        body = submit(api, "add-certificate", {"domain": f"{_label()}.example.com"}).json()
        wait_for(
            lambda: StepReceipt.objects.filter(
                run__execution_id=body["id"], step_key="issued", status="waiting"
            ).exists(),
            timeout=30,
        )

        # when: ACM's 72 hours pass (the durable clock moved on, not waited for)
        durable_clock.advance(body["id"], ISSUED_TIMEOUT_SECONDS)

        # then: the wait ends on its own terms, not on the run's deadline
        execution = _terminal(body["id"])
    finally:
        standin.acm_issue_delay = delay
    assert execution.status == "failed"
    assert execution.error["code"] == "wait_timed_out", execution.error


def test_a_dry_run_simulates_every_stage_and_changes_nothing(api, aws_worker, standin):
    label = _label()
    requests, sent = standin.calls[REQUEST], standin.calls[SEND]

    body = submit(
        api, "add-certificate", {"domain": f"{label}.example.com", "dry_run": True}
    ).json()
    execution = _terminal(body["id"])

    assert execution.status == "succeeded", execution.error
    assert (standin.calls[REQUEST], standin.calls[SEND]) == (requests, sent)
    assert _stage(execution.id, "verify").output["verified"] == "simulated"
    receipts = StepReceipt.objects.filter(run__execution_id=execution.id, mutation__isnull=False)
    assert receipts.count() == 2 and all(r.mutation["simulated"] for r in receipts)


def test_the_drift_watch_finds_a_validation_record_deleted_and_an_expiry_within_its_days(
    api, operator_api, aws_worker, standin, settings
):
    # given: an issued certificate, and its validation record deleted by hand (ACM could no
    # longer renew it)
    body = submit(api, "add-certificate", {"domain": f"{_label()}.example.com"}).json()
    assert _terminal(body["id"]).status == "succeeded"
    (record,) = _stage(body["id"], "validate_dns").output["records"]
    route53 = _client(standin, "route53")
    zone = aws_world.zone_id_of(route53)
    (served_set,) = [
        r
        for r in route53.list_resource_record_sets(
            HostedZoneId=zone, StartRecordName=record["name"], StartRecordType="CNAME"
        )["ResourceRecordSets"]
        if r["Name"].rstrip(".") == record["name"].rstrip(".")
    ]
    settings.ALFRED_PROVIDERS = ProviderConfig.from_env(aws_world.environ(standin))
    settings.ALFRED_DRIFT_CERTIFICATE_DAYS = 30.0
    assert drift_check_now(body["id"]) == "in_place"
    mutations = sum(standin.calls[op] for op in (REQUEST, "DeleteCertificate"))
    requests = standin.calls[REQUEST]
    route53.change_resource_record_sets(
        HostedZoneId=zone,
        ChangeBatch={"Changes": [{"Action": "DELETE", "ResourceRecordSet": served_set}]},
    )

    # when: the watch checks it
    assert drift_check_now(body["id"]) == "drifted"

    # then: the record is the finding, what was there and that nothing is
    (finding,) = Drift.objects.get(execution_id=body["id"], status="open").findings
    assert finding["what"] == f"validation record {record['name']}"
    assert finding["expected"]["values"] == [record["value"]] and finding["found"] is None

    # when: the certificate expires within the days the watch looks ahead (moto issues for
    # a year: 400 days ahead sees it)
    settings.ALFRED_DRIFT_CERTIFICATE_DAYS = 400.0
    assert drift_check_now(body["id"]) == "drifted"

    # then: the same drift, now with both findings, and nothing changed at ACM
    drift = Drift.objects.get(execution_id=body["id"], status="open")
    assert [f["what"].split(" ")[0] for f in drift.findings] == ["expiry", "validation"]
    assert drift.findings[0]["expected"] == "valid for more than 400 days"
    assert sum(standin.calls[op] for op in (REQUEST, "DeleteCertificate")) == mutations

    # when: started again, it repairs the same certificate instead of requesting another
    answer = operator_api.post(f"/api/v1/executions/{body['id']}/redo", {}, format="json")
    assert answer.status_code == 202, answer.content
    again = answer.json()
    assert again["input"]["certificate_arn"] == drift.findings[0]["what"].split(" ")[-1]
    assert again["predecessor"] == body["id"]
    assert _terminal(again["id"]).status == "succeeded"

    # then: its validation record is served again, no certificate was requested, and the
    # old drift ended superseded by it
    assert served(standin, record["name"])
    assert standin.calls[REQUEST] - requests == 0
    assert drift_check_now(body["id"]) == "retired"
    drift.refresh_from_db()
    assert drift.status == "superseded" and drift.replaced_by_id == again["id"]

"""add-certificate with its worker SIGKILLed at the step boundaries — after the request landed
before its receipt, after a validation batch landed before its receipt, during the
await_issued wait, in verify — and inside its rollback (issue 12): each execution still
completes with exactly one certificate and one validation batch per zone (and one batch back
per zone), and no event twice that happens once.

The kill points sit at the ACM and Route53 adapters' network edge in the worker
(:mod:`tests.support.kill_points_acm`). Certificates are counted on the stand-in's side (moto's
certificates tagged with the execution), batches by its journal of applied batches and by
the ChangeResourceRecordSets requests it received. One worker for the module.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from executions.models import Execution
from providers.sandbox.aws import AwsStandIn, seed_aws
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_add_certificate import batches_of, certificates_of, served
from tests.integration.test_add_subdomain_kills import _assert_once, _finished, _killed
from tests.support.engine_workflows import KILL_POINTS, counters
from tests.support.helpers import submit
from tests.support.kill_points import SETTLE
from tests.support.kill_points_acm import ENABLE

pytestmark = [
    pytest.mark.worker,
    pytest.mark.standin,
    pytest.mark.django_db(transaction=True),
]

SEND = "ChangeResourceRecordSets"
STAGES = {"plan": 1, "request": 1, "validate_dns": 1, "await_issued": 1, "verify": 1}


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    aws = AwsStandIn(route53_change_delay=0.3, acm_record_delay=0.5, acm_issue_delay=1.0).start()
    seed_aws(aws.url)
    try:
        yield aws
    finally:
        aws.stop()


@pytest.fixture(scope="module")
def kills_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    with pytest.MonkeyPatch.context() as env:
        for name, value in {
            "ALFRED_PROVIDERS": "sandbox",
            "AWS_ENDPOINT_URL": standin.url,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            ENABLE: "1",
            SETTLE: "1",
        }.items():
            env.setenv(name, value)
        worker = WorkerProcess("acm-kills")
        try:
            worker.start()
            wait_for(lambda: "ready." in worker.output(), timeout=60, interval=0.1)
            yield worker
        finally:
            worker.stop()


def _arm(domain: str, *points: str) -> None:
    counters().sadd(KILL_POINTS, *[f"{domain}:{point}" for point in points])


def _add(api: Any, label: str, worker: WorkerProcess) -> tuple[str, Execution]:
    body = submit(
        api,
        "add-certificate",
        {"domain": f"{label}.example.com", "alternative_names": [f"{label}.acme.com"]},
    ).json()
    return body["id"], _finished(body["id"], worker)


def _assert_one_certificate_one_batch_per_zone(
    standin: AwsStandIn, execution_id: str, sent: int
) -> list[dict[str, Any]]:
    certificates = certificates_of(standin, execution_id)
    assert len(certificates) == 1
    zones = sorted(b.comment.rsplit(" ", 1)[1] for b in batches_of(standin, execution_id))
    assert [z for z in zones if z != execution_id] == ["acme.com", "example.com"]
    assert standin.calls[SEND] - sent == 2
    return certificates


def test_killed_at_each_forward_boundary_in_turn_it_requests_once_and_writes_once_per_zone(
    api, kills_worker, standin
):
    # given: the pool process dies once at each boundary, in turn, in one execution: after
    # the request landed (receipt unwritten), after the first validation batch landed
    # (receipt unwritten), on a poll of the await_issued wait, and at verify's read
    label = f"k{uuid.uuid4().hex[:10]}"
    domain = f"{label}.example.com"
    _arm(
        domain,
        "request:request",
        "change:validate_dns",
        "describe:await_issued",
        "describe:verify",
    )
    sent = standin.calls[SEND]

    # when
    execution_id, execution = _add(api, label, kills_worker)

    # then
    assert execution.status == "succeeded", execution.error
    _killed(kills_worker)
    (certificate,) = _assert_one_certificate_one_batch_per_zone(standin, execution_id, sent)
    assert certificate["Status"] == "ISSUED"
    _assert_once(execution_id, STAGES, "execution.succeeded")


def test_killed_between_stages_and_in_the_rollback_it_undoes_each_thing_once(
    api, operator_api, kills_worker, standin
):
    # given: an issued certificate whose run was killed between stages (its receipts all
    # proven), then killed in its rollback after the batch back landed and after the
    # certificate was deleted
    label = f"k{uuid.uuid4().hex[:10]}"
    domain = f"{label}.example.com"
    _arm(domain, "after:request", "before:await_issued")
    sent = standin.calls[SEND]
    execution_id, added = _add(api, label, kills_worker)
    assert added.status == "succeeded", added.error
    _killed(kills_worker)
    _assert_one_certificate_one_batch_per_zone(standin, execution_id, sent)
    records = [r["name"] for r in _validation_records(execution_id)]
    _arm(domain, "change:rollback", "delete:rollback")

    # when
    answer = operator_api.post(
        f"/api/v1/executions/{execution_id}/rollback", {"reason": "kill test"}, format="json"
    )
    assert answer.status_code == 202, answer.content
    execution = _finished(execution_id, kills_worker, rollback=True)

    # then: ONE batch back per zone, the records and the certificate gone
    assert execution.status == "rolled_back", execution.error
    _killed(kills_worker)
    back = [
        b for b in standin.route53.change_batches if b.comment == f"alfred rollback {execution_id}"
    ]
    assert len(back) == 2
    assert standin.calls[SEND] - sent == 4
    assert all(served(standin, name) == [] for name in records)
    assert certificates_of(standin, execution_id) == []
    _assert_once(
        execution_id, {**STAGES, "rollback": 1}, "execution.succeeded", "execution.rolled_back"
    )


def _validation_records(execution_id: str) -> list[dict[str, Any]]:
    from executions.models import Stage

    stage = Stage.objects.get(run__execution_id=execution_id, run__number=1, name="validate_dns")
    return list(stage.output["records"])


def test_a_whole_worker_killed_after_a_batch_landed_is_taken_over_without_a_second(
    api, kills_worker, standin
):
    # given: the whole worker (main process, beat, pool) dies once the first validation
    # batch has landed, its receipt unwritten and the stage's message unacknowledged
    label = f"k{uuid.uuid4().hex[:10]}"
    _arm(f"{label}.example.com", "worker:change:validate_dns")
    sent = standin.calls[SEND]
    body = submit(
        api,
        "add-certificate",
        {"domain": f"{label}.example.com", "alternative_names": [f"{label}.acme.com"]},
    ).json()
    assert kills_worker.proc is not None
    assert kills_worker.proc.wait(45) == -signal.SIGKILL

    # when: a worker starts again (its recovery scan finds the run once the lease ran out)
    kills_worker.start()
    wait_for(lambda: "ready." in kills_worker.output(), timeout=60, interval=0.1)
    execution = _finished(body["id"], kills_worker)

    # then: it recognized the batch that had landed and sent it no second time
    assert execution.status == "succeeded", execution.error
    _assert_one_certificate_one_batch_per_zone(standin, body["id"], sent)
    _assert_once(body["id"], STAGES, "execution.succeeded")

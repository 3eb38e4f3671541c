"""Metrics as Prometheus scrapes them: the web's ``/metrics`` (served by this process, as a
scrape from the pod's own network) and a real worker's, on its port, during and after a
real add-domain on the sandbox. Counts are checked against the stand-ins' own records (the
change batches Route53 applied) and the database (the deliveries a receiver got)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from alfred.devstack import free_ports
from alfred.principals import Caller
from delivery.endpoints import webhook_endpoint_save
from executions.models import DeliveryStatus, Execution, WebhookDelivery, WebhookEndpoint
from executions.runtime.registry import definition_get
from providers.sandbox.stack import Sandbox
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.integration.test_add_domain import terminal
from tests.integration.test_webhooks import Receiver
from tests.support import platform_world as world
from tests.support.helpers import submit

PROMTOOL = shutil.which("promtool")

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parsed(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value (0 when absent: a counter never incremented has no sample)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def matching(
    samples: Samples, name: str, **labels: str
) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        found: v
        for (n, found), v in samples.items()
        if n == name and set(labels.items()) <= set(found)
    }


def web_scrape() -> Samples:
    response = Client().get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return parsed(response.content.decode())


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with world.sandbox_started() as started:
        yield started


@pytest.fixture(scope="module")
def worker_port() -> int:
    return free_ports()


@pytest.fixture(scope="module")
def module_worker(
    sandbox: Sandbox, worker_port: int, django_db_setup: None
) -> Iterator[WorkerProcess]:
    with (
        tempfile.TemporaryDirectory(prefix="alfred-metrics-") as directory,
        world.platform_worker(
            sandbox,
            "metrics",
            PROMETHEUS_MULTIPROC_DIR=directory,
            ALFRED_WORKER_HTTP_PORT=str(worker_port),
            ALFRED_WORKER_HEARTBEAT_SECONDS="1",
            ALFRED_WEBHOOK_ALLOW_PRIVATE="1",
        ) as worker,
    ):
        yield worker


@pytest.fixture
def platform(module_worker: WorkerProcess, sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    quiesce(60)


def worker_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_web_and_worker_metrics_follow_a_real_add_domain(api, platform, worker_port, settings):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    # given a webhook endpoint, so the relay has work, and the counts before
    receiver = Receiver().start()
    endpoint = WebhookEndpoint(url=receiver.url)
    receiver.secret = str(
        webhook_endpoint_save(endpoint, caller=Caller("prn_tests", "operator", "tests"))
    )
    before = web_scrape()
    domain = f"m{os.getpid()}{int(time.time())}.example.com"
    try:
        # when an add-domain runs, scraped while it waits on its child certificate
        body = submit(api, "add-domain", {"domain": domain, "kirby_mode": "enabled"}).json()
        wait_for(lambda: Execution.objects.get(pk=body["id"]).status == "waiting", timeout=60)
        during = web_scrape()
        execution = terminal(body["id"])
        assert execution.status == "succeeded", execution.error
        wait_for(
            lambda: not WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING).exists(),
            timeout=30,
        )
        after = web_scrape()
        status, text = worker_get(worker_port, "/metrics")
        assert status == 200, text
        worker = parsed(text)
    finally:
        receiver.stop()

    # then the web counted the acceptance, and saw the execution waiting on its lane
    created = ("alfred_acceptances_total", {"workflow": "add-domain", "outcome": "created"})
    assert value(after, created[0], **created[1]) - value(before, created[0], **created[1]) == 1
    assert value(during, "alfred_executions", workflow="add-domain", status="waiting") >= 1
    assert value(during, "alfred_lanes", state="held") >= 1
    assert value(during, "alfred_active_runs", workflow="add-domain", version="1") >= 1
    waiting = value(
        during, "alfred_oldest_run_age_seconds", lane="aws-infrastructure", state="waiting"
    )
    assert 0 < waiting < 60
    assert value(after, "alfred_executions", workflow="add-domain", status="waiting") == 0
    # the state every scrape reads: the worker's heartbeat, beat's lease, timers, approvals
    (heartbeat,) = matching(after, "alfred_worker_heartbeat_age_seconds").values()
    assert 0 <= heartbeat < 3
    assert 0 <= value(after, "alfred_beat_lease_age_seconds") < 2
    assert ("alfred_timers_overdue", ()) in after
    assert value(after, "alfred_approvals_pending") == 0
    assert value(after, "alfred_webhook_backlog", endpoint=endpoint.pk) == 0

    # and the worker timed every stage of the root and of its child, and every step
    child = Execution.objects.get(parent_id=execution.id)
    for workflow in ("add-domain", "add-certificate"):
        for stage in definition_get(workflow).stages:
            count = value(
                worker,
                "alfred_stage_duration_seconds_count",
                workflow=workflow,
                stage=stage,
                outcome="succeeded",
            )
            assert count >= 1, (workflow, stage)
        steps = matching(worker, "alfred_step_duration_seconds_count", workflow=workflow)
        assert sum(steps.values()) >= 1
    assert (
        value(
            worker, "alfred_execution_transitions_total", workflow="add-domain", status="succeeded"
        )
        == 1
    )
    # each Route53 batch the stand-in applied is one successful ChangeResourceRecordSets
    batches = len(world.batches_of(platform, execution.id)) + len(
        world.batches_of(platform, child.id)
    )
    changes = value(
        worker,
        "alfred_provider_calls_total",
        provider="aws.route53",
        operation="ChangeResourceRecordSets",
        outcome="ok",
    )
    assert batches >= 2 and changes == batches
    assert sum(matching(worker, "alfred_provider_calls_total", provider="github").values()) > 0
    assert sum(matching(worker, "alfred_provider_calls_total", provider="argocd").values()) > 0
    # every delivery to the receiver was one delivered attempt
    delivered = WebhookDelivery.objects.filter(endpoint=endpoint, status="delivered").count()
    assert delivered == len(receiver.delivered_ids()) > 0
    assert (
        value(worker, "alfred_webhook_attempts_total", endpoint=endpoint.pk, outcome="delivered")
        == delivered
    )


def test_a_worker_that_stops_consuming_turns_unready(platform, module_worker, worker_port):
    # given a worker that proves it consumes
    wait_for(lambda: worker_get(worker_port, "/readyz")[0] == 200, timeout=15)
    assert worker_get(worker_port, "/healthz")[0] == 200
    # when its pool stops taking tasks (its process alive, its broker connection held)
    pool = module_worker.pool()
    assert pool
    for pid in pool:
        os.kill(pid, signal.SIGSTOP)
    try:
        # then its readiness fails once three heartbeats went unconsumed, and the web says so
        _, body = wait_for(
            lambda: (answer := worker_get(worker_port, "/readyz"))[0] == 503 and answer,
            timeout=15,
        )
        assert '"ready": false' in body
        (age,) = matching(web_scrape(), "alfred_worker_heartbeat_age_seconds").values()
        assert age >= 3
    finally:
        for pid in pool:
            os.kill(pid, signal.SIGCONT)
    # and once it consumes again, it is ready again
    wait_for(lambda: worker_get(worker_port, "/readyz")[0] == 200, timeout=15)


def test_scrapes_need_the_token_or_the_network(settings, platform, worker_port):
    settings.ALFRED_METRICS_NETWORKS = ["10.0.0.0/8"]
    assert Client().get("/metrics").status_code == 403  # this client is 127.0.0.1
    settings.ALFRED_METRICS_TOKEN = "scrape-secret"
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    answered = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert answered.status_code == 200 and b"alfred_executions" in answered.content
    assert answered["Content-Type"].startswith("text/plain")
    if PROMTOOL is not None:  # Prometheus' own linter on the whole exposition
        linted = subprocess.run(
            [PROMTOOL, "check", "metrics"], input=answered.content, capture_output=True
        )
        assert linted.returncode == 0, linted.stdout + linted.stderr
    # the worker's port lets in its own network (loopback by default)
    status, _ = worker_get(worker_port, "/metrics")
    assert status == 200

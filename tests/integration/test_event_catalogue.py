"""Integrators receive the public event catalogue (``executions.events``) and nothing else: an
engine diagnostic — a stage message refused because another worker holds the run — goes to
the worker's log and metrics, never to the outbox, its sequence or a webhook.

A real Celery worker (stages, beat's recovery scan, the relay) with its metrics port, a real
webhook receiver on a local port, real PostgreSQL and Redis."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from prometheus_client.parser import text_string_to_metric_families

from alfred.devstack import free_ports
from alfred.principals import Caller
from delivery.endpoints import webhook_endpoint_save
from executions.events import PUBLIC_EVENT_TYPES
from executions.models import (
    DeliveryStatus,
    Execution,
    OutboxEvent,
    Run,
    WebhookDelivery,
    WebhookEndpoint,
)
from executions.runtime import dispatch
from executions.runtime.dispatch import run_dispatch
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_engine import assert_gapless, finished
from tests.integration.test_metrics import worker_get
from tests.integration.test_webhooks import FAST, Receiver
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 8  # long enough that the warm worker sees the message while the lease lives


@pytest.fixture
def metrics_port() -> int:
    return free_ports()


@pytest.fixture
def worker(metrics_port: int) -> Iterator[WorkerProcess]:
    with tempfile.TemporaryDirectory(prefix="alfred-metrics-") as directory:
        proc = WorkerProcess("catalogue").start(
            environ={
                **FAST,
                "PROMETHEUS_MULTIPROC_DIR": directory,
                "ALFRED_WORKER_HTTP_PORT": str(metrics_port),
            }
        )
        try:
            yield proc
        finally:
            proc.stop()


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    found = Receiver().start()
    try:
        yield found
    finally:
        found.stop()


def duplicates_counted(port: int, workflow: str) -> float:
    status, text = worker_get(port, "/metrics")
    assert status == 200, text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "alfred_duplicate_deliveries_total"
        and sample.labels.get("workflow") == workflow
    )


def test_a_refused_duplicate_delivery_reaches_logs_and_metrics_not_integrators(
    api, worker, metrics_port, receiver, monkeypatch
):
    # given a webhook endpoint for every event type, and a worker up and ready
    endpoint = WebhookEndpoint(url=receiver.url)
    receiver.secret = str(
        webhook_endpoint_save(endpoint, caller=Caller("prn_tests", "operator", "tests"))
    )
    warm = submit(api, "test-counter", {"label": "warm"}).json()
    assert finished(warm["id"], worker).status == "succeeded"
    # and a run held by a worker elsewhere that went silent (its start message held back,
    # so that no worker sees it before the foreign lease is in place)
    held: list[str] = []
    monkeypatch.setattr(dispatch, "run_publish", lambda run_id, *a, **kw: held.append(run_id))
    body = submit(api, "test-counter", {"label": "held"}).json()
    monkeypatch.undo()
    run_id = body["current_run"]["id"]
    assert held == [run_id]
    Run.objects.filter(pk=run_id).update(
        status="running",
        fence=1,
        lease_owner="gone@elsewhere:1",
        lease_expires_at=Now() + timedelta(seconds=LEASE_SECONDS),
    )
    Execution.objects.filter(pk=body["id"]).update(status="running", start_state="started")

    # when its stage message reaches the worker while that lease lives (refused), and the
    # recovery scan takes the run over once it has run out
    run_dispatch(run_id)
    assert finished(body["id"], worker, timeout=60).status == "succeeded"

    # then every event of the execution is of the public catalogue, gapless
    types = set(OutboxEvent.objects.filter(execution_id=body["id"]).values_list("type", flat=True))
    assert types <= PUBLIC_EVENT_TYPES, types - PUBLIC_EVENT_TYPES
    assert_gapless(body["id"])
    # and the endpoint was owed, and sent, those events and no other
    wait_for(
        lambda: not WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING).exists(),
        timeout=30,
    )
    sent = {r["payload"]["type"] for r in receiver.received if "payload" in r}
    owed = set(
        WebhookDelivery.objects.filter(endpoint=endpoint).values_list("event__type", flat=True)
    )
    assert "execution.succeeded" in sent
    assert sent <= PUBLIC_EVENT_TYPES, sent - PUBLIC_EVENT_TYPES
    assert owed <= PUBLIC_EVENT_TYPES, owed - PUBLIC_EVENT_TYPES
    # and the refusal is in the worker's log, and counted in its metrics
    assert f"duplicate delivery of run {run_id} stage plan" in worker.output()
    assert duplicates_counted(metrics_port, "test-counter") == 1

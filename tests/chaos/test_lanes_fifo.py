"""Thirty concurrent requests for aws-infrastructure work: one root owner at a time, in the
order they were accepted. A real worker, real PostgreSQL and Redis."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

from executions.models import ACTIVE_STATUSES, Execution, OutboxEvent
from tests.conftest import WorkerProcess, wait_for
from tests.engine_workflows import counters
from tests.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _owners_now() -> int:
    """Root executions of the lane past their acceptance and not finished: running or waiting
    on their own stages (queued ones wait for the lane and have not started)."""
    return Execution.objects.filter(
        lane_key="aws-infrastructure",
        parent__isnull=True,
        status__in=sorted(ACTIVE_STATUSES - {"queued"}),
    ).count()


def test_thirty_concurrent_requests_never_share_the_lane_and_finish_in_order(integration_token):
    worker = WorkerProcess("fifo").start(concurrency=2)
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        try:
            while not stop.is_set():
                samples.append(_owners_now())
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:

        def ask(i: int) -> str:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {integration_token}")
            try:
                return submit(client, "test-infra", {"label": f"r{i}", "seconds": 0.05}).json()[
                    "id"
                ]
            finally:
                connections.close_all()

        with ThreadPoolExecutor(max_workers=10) as pool:
            ids = list(pool.map(ask, range(30)))
        wait_for(
            lambda: Execution.objects.filter(pk__in=ids, status="succeeded").count() == 30,
            timeout=180,
            interval=0.5,
        )
    finally:
        stop.set()
        sampler.join()
        worker.stop()

    assert len(samples) > 100 and max(samples) == 1  # never two root owners at once
    accepted = [
        e.execution_id
        for e in OutboxEvent.objects.filter(
            execution_id__in=ids, type="execution.accepted"
        ).order_by("created_at", "id")
    ]
    finished = [
        e.execution_id
        for e in OutboxEvent.objects.filter(
            execution_id__in=ids, type="execution.succeeded"
        ).order_by("created_at", "id")
    ]
    assert finished == accepted  # FIFO: in the order the lane queued them
    order = [label.decode() for label in counters().lrange("alfred-test:infra-order", 0, -1)]
    assert len(order) == 30 and len(set(order)) == 30  # each applied once
    assert connection.is_usable()


def test_a_child_runs_under_its_roots_lane(api, worker):
    root = submit(api, "test-infra", {"label": "root", "with_child": True}).json()["id"]
    behind = submit(api, "test-infra", {"label": "behind"}).json()["id"]

    wait_for(lambda: Execution.objects.filter(pk=behind, status="succeeded").exists(), 60)

    child = Execution.objects.get(parent_id=root)
    assert child.lane_key is None  # no slot of its own: not queued behind its root
    assert Execution.objects.get(pk=root).result == {"ok": True, "child": "succeeded"}
    root_done = OutboxEvent.objects.get(execution_id=root, type="execution.succeeded")
    behind_acquired = OutboxEvent.objects.get(execution_id=behind, type="lane.acquired")
    assert behind_acquired.sequence > 1 and behind_acquired.created_at >= root_done.created_at

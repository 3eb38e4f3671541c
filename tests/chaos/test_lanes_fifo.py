"""Thirty concurrent requests for aws-infrastructure work: one root owner at a time, in the
order they were accepted. A real worker, real PostgreSQL and Redis."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

from executions.models import Execution, OutboxEvent
from tests.conftest import WorkerProcess, wait_for
from tests.support.engine_workflows import EXCLUSIVE_ORDER, INFLIGHT_MAX, counters
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


CONCURRENT = 30


def test_thirty_concurrent_requests_never_share_the_lane_and_finish_in_order(integration_token):
    worker = WorkerProcess("fifo").start(concurrency=2)  # two processes: room for a second owner
    barrier = threading.Barrier(CONCURRENT)
    responses: dict[str, Any] = {}

    def ask(i: int) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {integration_token}")
        try:
            barrier.wait(30)  # all thirty requests in flight at once
            body = {"label": f"r{i}", "seconds": 0.1}
            responses[f"r{i}"] = submit(client, "test-infra-exclusive", body)
        finally:
            connections.close_all()

    try:
        # when: thirty requests for aws-infrastructure work arrive together
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(CONCURRENT)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(responses) == CONCURRENT
        assert {r.status_code for r in responses.values()} == {202}
        labels = {r.json()["id"]: label for label, r in responses.items()}
        ids = list(labels)
        wait_for(
            lambda: Execution.objects.filter(pk__in=ids, status="succeeded").count() == CONCURRENT,
            timeout=180,
            interval=0.5,
        )
    finally:
        worker.stop()

    # then: the side effect never ran for two owners at once, counted around itself
    assert int(counters().get(INFLIGHT_MAX) or 0) == 1
    # and the provider saw the work in the order it was accepted: acceptances serialize on
    # the lane's row lock, so the accepted events' ids (allocated under it) are that order
    # (their created_at is each transaction's start, taken before the lock)
    accepted = [
        labels[execution_id]
        for execution_id in OutboxEvent.objects.filter(
            execution_id__in=ids, type="execution.accepted"
        )
        .order_by("id")
        .values_list("execution_id", flat=True)
    ]
    applied = [label.decode() for label in counters().lrange(EXCLUSIVE_ORDER, 0, -1)]
    assert applied == accepted  # FIFO, seen outside Alfred; each applied once
    finished = [
        labels[execution_id]
        for execution_id in OutboxEvent.objects.filter(
            execution_id__in=ids, type="execution.succeeded"
        )
        .order_by("id")
        .values_list("execution_id", flat=True)
    ]
    assert finished == accepted  # and Alfred's own record agrees
    # each owner got the lane only after the one before it had finished
    acquired = dict(
        OutboxEvent.objects.filter(execution_id__in=ids, type="lane.acquired").values_list(
            "execution_id", "id"
        )
    )
    succeeded = dict(
        OutboxEvent.objects.filter(execution_id__in=ids, type="execution.succeeded").values_list(
            "execution_id", "id"
        )
    )
    by_label = {label: execution_id for execution_id, label in labels.items()}
    for before, after in itertools.pairwise(accepted):
        assert acquired[by_label[after]] > succeeded[by_label[before]]
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

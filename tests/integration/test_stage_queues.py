"""Stages where Celery users send them (docs/architecture.md, "Queues"): a stage that declares
a queue runs only on a worker consuming it, the hop to it is a message to that queue, and the
hop survives the first worker's death and the loss of its message. Real workers on real
Redis and PostgreSQL; which worker ran a stage is read from the stage's own output."""

from __future__ import annotations

import time

import pytest
from celery import current_app
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from executions.models import Execution, Run, Stage
from tests.conftest import WorkerProcess, wait_for
from tests.support.engine_workflows import effects
from tests.support.helpers import submit

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULT = "stages,scanners,webhooks,celery"


def _submit(api, label: str) -> str:
    return _submit_to(api, "test-hopping", {"label": label})


def _submit_to(api, workflow: str, body: dict[str, object]) -> str:
    response = submit(api, workflow, body)
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


def depth(queue: str) -> float:
    """``alfred_broker_queue_messages`` for ``queue``, as a scrape of the web's /metrics
    reads it from the broker."""
    response = Client().get("/metrics")
    assert response.status_code == 200, response.content
    samples = {
        (sample.name, sample.labels.get("queue")): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert ("alfred_broker_queue_messages", "stages") in samples  # the settings' queues too
    return samples[("alfred_broker_queue_messages", queue)]


def _between_stages(execution_id: str) -> bool:
    stages = dict(
        Stage.objects.filter(run__execution_id=execution_id).values_list("name", "status")
    )
    return stages == {"near": "succeeded", "far": "pending"}


def test_a_stage_on_its_own_queue_runs_only_on_its_queues_worker(api):
    near = WorkerProcess("near").start(queues=DEFAULT, environ={"ALFRED_TEST_WORKER": "near"})
    far = WorkerProcess("far").start(
        queues="far", beat=False, environ={"ALFRED_TEST_WORKER": "far"}
    )
    try:
        execution_id = _submit(api, "both")
        wait_for(lambda: Execution.objects.get(pk=execution_id).status == "succeeded", timeout=60)
    finally:
        near.stop()
        far.stop()
    outputs = dict(
        Stage.objects.filter(run__execution_id=execution_id).values_list("name", "output")
    )
    assert outputs["near"]["worker"] == "near"
    assert outputs["far"]["worker"] == "far"
    assert outputs["far"]["near"] == outputs["near"]


def test_the_hop_survives_the_first_workers_death_and_a_lost_message(api):
    # given only the default queue's worker: the first stage runs, the second waits for
    # a worker of its queue, the run leased to no one (the hand-off)
    near = WorkerProcess("near").start(queues=DEFAULT, environ={"ALFRED_TEST_WORKER": "near"})
    try:
        execution_id = _submit(api, "lost")
        wait_for(lambda: _between_stages(execution_id), timeout=60)
        time.sleep(1)  # long enough for a wrongly routed "far" message to be taken
        assert _between_stages(execution_id)  # nothing on the default queue ran it
    finally:
        near.kill()  # when the hop has been sent: the first worker dies
    run = Run.objects.get(execution_id=execution_id)
    assert run.lease_owner == ""
    # the hop's message waits in its queue, as the web's /metrics says
    assert depth("far") == 1
    # and it is lost (the queue purged)
    with current_app.connection_for_write() as connection:
        purged = current_app.amqp.queues["far"].bind(connection.default_channel).purge()
    assert purged == 1
    assert depth("far") == 0

    # when a worker of that queue comes up (with the scans: the recovery scan finds the run
    # once the hand-off's grace is over and publishes its next stage to its queue again)
    far = WorkerProcess("far").start(queues="far,scanners", environ={"ALFRED_TEST_WORKER": "far"})
    try:
        wait_for(lambda: Execution.objects.get(pk=execution_id).status == "succeeded", timeout=60)
    finally:
        far.stop()

    # then the second stage ran once, on its queue's worker
    outputs = dict(
        Stage.objects.filter(run__execution_id=execution_id).values_list("name", "output")
    )
    assert (outputs["near"]["worker"], outputs["far"]["worker"]) == ("near", "far")


def test_a_stage_past_its_time_limit_fails_and_its_worker_goes_on(api, worker):
    """``stage_time_limits``: Celery stops the stage at its limit (the soft one, raised in the
    stage's code); the execution fails ``stage_time_limit`` instead of holding a worker, and
    the worker runs the next execution. Within its limit the same stage succeeds."""
    stuck = _submit_to(api, "test-limited", {"label": "stuck", "sleep": 30})
    wait_for(lambda: Execution.objects.get(pk=stuck).status == "failed", timeout=30)
    failed = Execution.objects.get(pk=stuck)
    assert failed.error["code"] == "stage_time_limit", failed.error
    assert "1 s" in failed.error["message"]
    assert effects("stuck", "slow") == 1  # stopped, not run again

    quick = _submit_to(api, "test-limited", {"label": "quick", "sleep": 0})
    wait_for(lambda: Execution.objects.get(pk=quick).status == "succeeded", timeout=30)

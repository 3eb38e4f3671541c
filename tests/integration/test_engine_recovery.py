"""The recovery paths: what lost its message or its worker is found and finished."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery
from django.db.models.functions import Now
from django.utils import timezone

from executions.models import Execution, OutboxEvent, Run, Stage
from executions.runtime import dispatch
from executions.runtime.dispatch import run_dispatch
from tests.integration.test_engine import finished
from tests.support.engine_workflows import effects
from tests.support.helpers import assert_problem, submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


# Long enough that a warm worker sees the start message well before it runs out.
LEASE_SECONDS = 8


def test_a_run_whose_worker_vanished_elsewhere_is_taken_over_after_its_lease(
    api, worker, monkeypatch
):
    # given: a worker up and ready (it has finished a run)
    warm = submit(api, "test-counter", {"label": "warm"}).json()
    assert finished(warm["id"], worker).status == "succeeded"
    # and a run claimed by a worker on another host that then went silent: accepted with its
    # start message held back, so no worker sees it before the foreign lease is in place
    held: list[str] = []
    monkeypatch.setattr(dispatch, "run_publish", lambda run_id, *a, **kw: held.append(run_id))
    body = submit(api, "test-counter", {"label": "lost"}).json()
    monkeypatch.undo()
    run_id = body["current_run"]["id"]
    assert held == [run_id]
    Run.objects.filter(pk=run_id).update(
        status="running",
        fence=1,
        lease_owner="gone@elsewhere:1",
        lease_expires_at=Now() + timedelta(seconds=LEASE_SECONDS),  # the database's clock
    )
    expires = Run.objects.get(pk=run_id).lease_expires_at
    assert expires is not None
    Execution.objects.filter(pk=body["id"]).update(status="running", start_state="started")

    # when: its start message reaches the ready worker while the lease lives
    run_dispatch(run_id)

    # then: the recovery scan (beat) takes the run over, only once the lease has run out
    execution = finished(body["id"], worker, timeout=60)
    assert execution.status == "succeeded"
    run = Run.objects.get(pk=run_id)
    plan = Stage.objects.get(run_id=run_id, name="plan")
    assert run.started_at is not None and run.started_at >= expires
    assert plan.started_at is not None and plan.started_at >= expires
    # and the message that came while the lease lived was refused, naming the holder (in the
    # worker's log: a diagnostic, not an event)
    assert f"duplicate delivery of run {run_id} stage plan" in worker.output()
    assert "held by gone@elsewhere:1" in worker.output()
    assert not OutboxEvent.objects.filter(execution_id=body["id"], type__startswith="run.").exists()
    assert [effects("lost", f"effect-{i}") for i in range(1, 6)] == [1] * 5


def test_a_start_that_failed_to_publish_is_recovered(api, worker, monkeypatch):
    # given: the broker does not answer the API when it publishes the start (a real
    # connection failure), so the run is start_failed and no message of it exists
    dead = Celery("alfred-dead-broker", set_as_current=False)
    dead.config_from_object("django.conf:settings", namespace="CELERY")
    dead.conf.update(broker_write_url="redis://127.0.0.1:1/0")
    publish = dispatch.run_publish
    monkeypatch.setattr(
        dispatch, "run_publish", lambda run_id, app=None, **kw: publish(run_id, dead, **kw)
    )
    try:
        body = submit(api, "test-counter", {"label": "sf"}).json()
    finally:
        monkeypatch.undo()
        dead.close()
    execution = Execution.objects.get(pk=body["id"])
    assert execution.start_state == "start_failed"
    assert (execution.start_error or {})["type"] == "OperationalError"

    # when: the broker is back for the workers; only the recovery scan (beat) knows of the run
    execution = finished(body["id"], worker, timeout=40)

    # then
    assert (execution.status, execution.start_state) == ("succeeded", "started")
    assert [effects("sf", f"effect-{i}") for i in range(1, 6)] == [1] * 5


def test_a_continuation_skips_the_stages_an_earlier_run_finished(api, worker):
    # given: a run that failed in its last stage
    body = submit(api, "test-counter", {"label": "cont"}).json()
    finished(body["id"], worker)
    run_id = body["current_run"]["id"]
    Stage.objects.filter(run_id=run_id, name="verify").update(status="failed", output=None)
    Execution.objects.filter(pk=body["id"]).update(status="failed")

    # when: the same operation is asked for again under a new key
    again = submit(api, "test-counter", {"label": "cont"}).json()

    assert again["acceptance"]["outcome"] == "continued"
    execution = finished(body["id"], worker)
    assert execution.status == "succeeded"
    assert [effects("cont", f"effect-{i}") for i in range(1, 6)] == [1] * 5  # work not redone
    stages = {s.name: s.status for s in Stage.objects.filter(run_id=execution.current_run_id)}
    assert stages == {"plan": "succeeded", "work": "succeeded", "verify": "succeeded"}


def test_retry_refuses_an_input_that_no_longer_fits_the_schema(api, worker):
    body = submit(api, "test-flaky", {"label": "old", "fatal": True}).json()
    finished(body["id"], worker)
    Execution.objects.filter(pk=body["id"]).update(input={"label": "old", "retired": 1})

    problem = assert_problem(
        api.post(f"/api/v1/executions/{body['id']}/retry"), 422, "invalid_input"
    )

    assert problem["errors"][0]["field"] == "/retired"
    assert Execution.objects.get(pk=body["id"]).status == "failed"


def test_dispatching_a_finished_run_again_changes_nothing(api, worker):
    body = submit(api, "test-counter", {"label": "again"}).json()
    execution = finished(body["id"], worker)
    events = execution.events.count()

    run_dispatch(str(execution.current_run_id))
    run_dispatch(str(execution.current_run_id))

    second = submit(api, "test-counter", {"label": "after"}).json()
    finished(second["id"], worker)  # the worker has drained the queue by now
    assert execution.events.count() == events
    assert [effects("again", f"effect-{i}") for i in range(1, 6)] == [1] * 5


def test_a_read_only_instance_runs_no_scan(api, settings):
    from executions.models import Timer
    from executions.tasks import runs_recover, timers_scan

    body = submit(api, "test-waits", {"label": "ro", "mode": "sleep"}).json()
    timer = Timer.objects.create(
        run_id=body["current_run"]["id"],
        stage="wait",
        key="nap",
        purpose="sleep",
        due_at=timezone.now() - timedelta(seconds=1),
    )

    settings.ALFRED_READ_ONLY = True
    assert timers_scan.apply().get() == 0
    assert runs_recover.apply().get() == 0
    timer.refresh_from_db()
    assert timer.status == "pending"

    settings.ALFRED_READ_ONLY = False
    assert timers_scan.apply().get() == 1
    timer.refresh_from_db()
    assert timer.status == "fired"

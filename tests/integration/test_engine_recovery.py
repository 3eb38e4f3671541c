"""The recovery paths: what lost its message or its worker is found and finished."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from executions.engine.dispatch import run_dispatch
from executions.models import Execution, Run, Stage
from tests.conftest import WorkerProcess
from tests.engine_workflows import effects
from tests.helpers import assert_problem, submit
from tests.integration.test_engine import finished

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_run_whose_worker_vanished_elsewhere_is_taken_over_after_its_lease(api):
    # given: a run claimed by a worker on another host that then went silent
    body = submit(api, "test-counter", {"label": "lost"}).json()
    Run.objects.filter(pk=body["current_run"]["id"]).update(
        status="running",
        fence=1,
        lease_owner="gone@elsewhere:1",
        lease_expires_at=timezone.now() + timedelta(seconds=2),
    )
    Execution.objects.filter(pk=body["id"]).update(status="running", start_state="started")

    worker = WorkerProcess("recover").start()
    try:
        # its start message is refused while the lease lives; the recovery scan (beat) takes
        # the run over once it has run out
        execution = finished(body["id"], worker, timeout=60)
    finally:
        worker.stop()
    assert execution.status == "succeeded"
    assert [effects("lost", f"effect-{i}") for i in range(1, 6)] == [1] * 5


def test_a_start_that_failed_to_publish_is_recovered(api, worker):
    body = submit(api, "test-counter", {"label": "sf"}).json()
    finished(body["id"], worker)  # let the first run go by, then simulate a lost start
    execution = Execution.objects.get(pk=body["id"])
    assert execution.status == "succeeded"

    second = submit(api, "test-waits", {"label": "sf2", "mode": "sleep", "seconds": 0}).json()
    Execution.objects.filter(pk=second["id"]).update(start_state="start_failed")

    assert finished(second["id"], worker).status == "succeeded"


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

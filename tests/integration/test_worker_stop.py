"""How a real worker ends (alfred/worker_stop.py): asked to stop while a stage runs longer
than its grace, it cancels the stage and exits within the grace instead of being SIGKILLed;
once it stopped consuming, it stops on its own so that its restart policy (compose's, the
pod's) starts a new one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest
from celery.utils.nodenames import worker_direct
from django.conf import settings

from alfred.celery import app as celery_app
from alfred.devstack import GRACE_SECONDS, children_for, free_ports
from alfred.models import WorkerHeartbeat
from executions.models import Execution
from tests.conftest import ROOT, WorkerProcess, subprocess_database_url, wait_for
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_make_runs_worker_stops_within_the_grace_while_a_stage_outlasts_it(
    api, tmp_path, monkeypatch
):
    # given: the worker `make run` starts (its command and environment), against the tests'
    # database and broker, with the tests' workflows
    monkeypatch.setenv("ALFRED_WORKER_HTTP_PORT", str(free_ports()))
    (worker,) = [c for c in children_for("127.0.0.1", "8000", tmp_path) if c.name == "worker"]
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "DJANGO_SETTINGS_MODULE": "alfred.settings",
        "ALFRED_ENV": "test",
        **worker.environ,
    }
    proc = subprocess.Popen(
        worker.argv,
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: " ready." in log.read_text(), timeout=90)
        # and: a stage in a step far longer than the launcher's grace
        body = submit(
            api, "test-slow", {"label": "outlasts", "steps": 1, "step_seconds": 120}
        ).json()
        wait_for(lambda: Execution.objects.get(pk=body["id"]).status == "running", timeout=30)
        time.sleep(1)  # inside the step

        # when: the launcher stops it (SIGTERM to the worker's main process)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {GRACE_SECONDS} s after SIGTERM:\n{log.read_text()}")
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    # then: it ended by itself within the grace, having cancelled the stage (whose message
    # goes back to the queue), and the execution is not failed by it
    output = log.read_text()
    assert took < GRACE_SECONDS
    assert proc.returncode >= 0, output  # not killed by a signal
    assert "cancelling the tasks still running" in output, output
    assert Execution.objects.get(pk=body["id"]).status == "running"


def test_a_worker_that_stopped_consuming_stops_so_that_it_is_restarted():
    # given: a worker that checks its heartbeat every half second and gives up after 4 s
    worker = WorkerProcess("liveness").start(
        beat=False,
        environ={
            "ALFRED_WORKER_HEARTBEAT_SECONDS": "0.5",
            "ALFRED_WORKER_LIVENESS_SECONDS": "4",
            "ALFRED_WORKER_STOP_SECONDS": "3",
        },
    )
    name = f"liveness@{socket.gethostname()}"
    try:
        wait_for(lambda: WorkerHeartbeat.objects.filter(worker=name).exists(), timeout=90)
        assert worker.proc is not None and worker.proc.poll() is None

        # when: it silently stops consuming its own queue (as after a broker reconnect that
        # ended consumption: the process alive, its connection held)
        celery_app.control.cancel_consumer(
            worker_direct(name).name, destination=[name], reply=True, timeout=10
        )

        # then: once not ready for 4 s it stops on its own, saying why
        began = time.monotonic()
        worker.proc.wait(30)
    finally:
        worker.stop()
    output = worker.output()
    assert time.monotonic() - began >= 3.5
    assert "has not consumed its heartbeat for 4 s" in output, output
    assert worker.proc.returncode >= 0, output

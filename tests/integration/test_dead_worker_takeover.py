"""A run whose holder is known to be gone is taken over within seconds, not after its lease.

Two real workers consume the stages on one host. The whole worker running a stage is
SIGKILLed (its message goes with it: the broker gives it back only after its visibility
timeout) or frozen (SIGSTOP: its processes live, its main process marks nothing). The leases
are long (``LEASE_SECONDS``), so a takeover within a few seconds is the holder known to be
gone, never the lease run out; and a frozen holder, woken after the takeover, is fenced out.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from executions.models import Execution, OutboxEvent, Run, StepReceipt
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_engine import finished
from tests.support.engine_workflows import KILL_POINTS, counters, effects
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 60
# Well under the lease: a takeover this soon is not the lease's.
SOON = 15.0


def _pair(heartbeat_seconds: float) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    environ = {
        "ALFRED_LEASE_SECONDS": str(LEASE_SECONDS),
        "ALFRED_WORKER_HEARTBEAT_SECONDS": str(heartbeat_seconds),
    }
    pair = (WorkerProcess("one"), WorkerProcess("two"))
    for worker in pair:
        worker.start(environ=environ)
    try:
        yield pair
    finally:
        for worker in pair:
            if worker.proc is not None and worker.proc.poll() is None:
                os.killpg(worker.proc.pid, signal.SIGCONT)
            worker.stop()


@pytest.fixture
def slow_marks() -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    """Workers that mark themselves present so seldom (gone after three 30 s periods, more
    than a lease) that only the holder's dead process can make a takeover soon."""
    yield from _pair(30)


@pytest.fixture
def quick_marks() -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    """Workers gone once three 1 s periods pass without their main process's mark."""
    yield from _pair(1)


def _arm(label: str, point: str) -> None:
    counters().sadd(KILL_POINTS, f"{label}:{point}")


def _warm(api, pair: tuple[WorkerProcess, WorkerProcess]) -> None:
    """Both workers ready: each has consumed its heartbeat (and so is recorded)."""
    from alfred.models import WorkerHeartbeat

    names = {f"{w.name}@{os.uname().nodename}" for w in pair}
    wait_for(lambda: set(WorkerHeartbeat.objects.values_list("worker", flat=True)) >= names, 30)


def _holder(run_id: str) -> str:
    return Run.objects.values_list("lease_owner", flat=True).get(pk=run_id)


def _worker_of(holder: str, pair: tuple[WorkerProcess, WorkerProcess]) -> WorkerProcess:
    return next(w for w in pair if holder.startswith(f"{w.name}@"))


def _stopped(worker: WorkerProcess) -> bool:
    assert worker.proc is not None
    stat = Path(f"/proc/{worker.proc.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _work_started_by(execution_id: str) -> list[str]:
    return list(
        OutboxEvent.objects.filter(
            execution_id=execution_id, type="stage.started", payload__stage="work"
        )
        .order_by("sequence")
        .values_list("payload__worker", flat=True)
    )


def test_a_whole_worker_killed_mid_stage_has_its_run_taken_over_within_seconds(api, slow_marks):
    # given: two workers on this host; the whole worker that runs the work stage is killed
    # after its second step (main process, beat, pool: its message goes with it)
    _warm(api, slow_marks)
    label = "killed-whole"
    _arm(label, "worker:step:2")
    body = submit(api, "test-kill-points", {"label": label}).json()
    run_id = body["current_run"]["id"]
    dead = wait_for(
        lambda: next((w for w in slow_marks if w.proc and w.proc.poll() is not None), None),
        timeout=30,
    )
    died = time.monotonic()
    assert dead.proc is not None and dead.proc.returncode == -signal.SIGKILL
    holder = _holder(run_id)
    assert holder.startswith(f"{dead.name}@")  # the lease still names the dead process

    # when: the other worker's recovery scan looks (every second)
    survivor = next(w for w in slow_marks if w is not dead)
    takers = wait_for(lambda: (t := _work_started_by(body["id"])) and len(t) == 2 and t, SOON)

    # then: the survivor took the stage over within seconds of the kill, not after the lease
    assert time.monotonic() - died < SOON
    assert takers[0] == holder and takers[1].startswith(f"{survivor.name}@")
    execution = finished(body["id"], survivor, timeout=30)
    assert execution.status == "succeeded", execution.error
    # and every step ran once: the two before the kill were replayed from their receipts
    assert [effects(label, f"effect-{i}") for i in range(1, 6)] == [1] * 5
    assert OutboxEvent.objects.filter(execution_id=body["id"], type="stage.succeeded").count() == 3


def test_a_frozen_worker_is_taken_for_gone_and_fenced_out_when_it_wakes(api, quick_marks):
    # given: two workers; the whole worker that runs the work stage stops (SIGSTOP) after
    # its second step: its processes live, its main process marks nothing any more
    _warm(api, quick_marks)
    label = "frozen-whole"
    _arm(label, "freeze:step:2")
    body = submit(api, "test-kill-points", {"label": label}).json()
    run_id = body["current_run"]["id"]
    frozen = wait_for(lambda: next((w for w in quick_marks if _stopped(w)), None), timeout=30)
    stopped = time.monotonic()
    holder = _holder(run_id)
    assert holder.startswith(f"{frozen.name}@")
    fence = Run.objects.values_list("fence", flat=True).get(pk=run_id)

    # when: its worker is gone (three 1 s periods unmarked); the other's scan looks
    survivor = next(w for w in quick_marks if w is not frozen)
    execution = finished(body["id"], survivor, timeout=SOON)

    # then: the run was taken over within seconds, under a new fence, and finished
    assert time.monotonic() - stopped < SOON
    assert execution.status == "succeeded", execution.error
    takers = _work_started_by(body["id"])
    assert takers[0] == holder and takers[1].startswith(f"{survivor.name}@")
    assert Run.objects.values_list("fence", flat=True).get(pk=run_id) > fence

    # and when: the frozen worker wakes, mid-stage, its round's lease long taken
    assert frozen.proc is not None
    events = OutboxEvent.objects.filter(execution_id=body["id"]).count()
    receipts = list(
        StepReceipt.objects.filter(run_id=run_id).order_by("pk").values_list("pk", "fence")
    )
    os.killpg(frozen.proc.pid, signal.SIGCONT)

    # then: it is fenced out at its next boundary: no step, receipt or event of its round
    wait_for(lambda: "is no longer ours" in frozen.output(), timeout=SOON)
    time.sleep(0.5)
    assert [effects(label, f"effect-{i}") for i in range(1, 6)] == [1] * 5
    assert (
        list(StepReceipt.objects.filter(run_id=run_id).order_by("pk").values_list("pk", "fence"))
        == receipts
    )
    assert OutboxEvent.objects.filter(execution_id=body["id"]).count() == events
    assert Execution.objects.get(pk=body["id"]).status == "succeeded"

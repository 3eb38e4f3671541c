"""Breaking the real things: SIGKILLed workers, a flushed broker, duplicate deliveries, many
waiting runs. Real Celery worker processes, real Redis, real PostgreSQL."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from celery import current_app

from executions.models import Execution, OutboxEvent, Run
from executions.runtime.dispatch import RUN_STAGE_TASK
from executions.runtime.hooks import hook_signal
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_engine import assert_gapless, event_types, finished
from tests.support.engine_workflows import KILL_POINTS, counters, effects
from tests.support.helpers import submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_sigkill_at_every_step_boundary_repeats_no_side_effect(api, worker):
    # given: the worker process dies after each of the 5 steps in turn (once each)
    counters().sadd("alfred-test:kill:boom", 1, 2, 3, 4, 5)

    body = submit(api, "test-counter", {"label": "boom"}).json()

    execution = finished(body["id"], worker, timeout=120)
    assert execution.status == "succeeded"
    assert counters().scard("alfred-test:kill:boom") == 0  # every kill happened
    assert [effects("boom", f"effect-{i}") for i in range(1, 6)] == [1, 1, 1, 1, 1]
    assert_gapless(body["id"])
    keys = list(OutboxEvent.objects.filter(execution_id=body["id"]).values_list("key", flat=True))
    assert len(keys) == len(set(keys))
    types = event_types(body["id"])
    assert types.count("stage.succeeded") == 3
    assert types.count("execution.succeeded") == 1
    assert Run.objects.get(pk=execution.current_run_id).fence >= 6  # 5 takeovers + 3 claims


def test_sigkill_between_stages_repeats_no_side_effect(api, worker):
    # given: the worker's pool process dies between stages: before "work" and "verify" are
    # claimed (their messages delivered), and after "plan" and "work" committed (the next
    # stage published, their own messages not yet acknowledged), once each
    points = ["before:work", "before:verify", "after:plan", "after:work"]
    counters().sadd(KILL_POINTS, *[f"between:{point}" for point in points])

    body = submit(api, "test-kill-points", {"label": "between"}).json()

    execution = finished(body["id"], worker, timeout=120)
    assert execution.status == "succeeded"
    assert counters().scard(KILL_POINTS) == 0  # every kill happened
    assert [effects("between", f"effect-{i}") for i in range(1, 6)] == [1] * 5
    assert_gapless(body["id"])
    types = event_types(body["id"])
    assert types.count("stage.succeeded") == 3  # each stage once, redeliveries were no-ops
    assert types.count("execution.succeeded") == 1


@pytest.mark.parametrize("point", ["step:2", "before:work"], ids=["in-a-stage", "between-stages"])
def test_a_whole_worker_sigkilled_is_taken_over_without_waiting_out_its_lease(api, point):
    # given: a run whose whole worker (main process, beat, pool) is SIGKILLed: inside the work
    # stage after its second step, or between stages with the work stage's message delivered;
    # the message dies unacknowledged with it. Its lease is long (60 s): a takeover before it
    # runs out is its holder known to be gone (its process, on this host), not the lease.
    label = f"whole-{point.replace(':', '-')}"
    counters().sadd(KILL_POINTS, f"{label}:worker:{point}")
    environ = {"ALFRED_LEASE_SECONDS": "60"}
    victim = WorkerProcess("victim").start(environ=environ)
    taker = WorkerProcess("taker")
    try:
        body = submit(api, "test-kill-points", {"label": label}).json()
        assert victim.proc is not None
        assert victim.proc.wait(60) == -signal.SIGKILL
        assert counters().scard(KILL_POINTS) == 0
        run = Run.objects.get(pk=body["current_run"]["id"])
        assert run.status == "running"
        # the lease the dead worker left: its own, or between stages the hand-off's grace
        lease_expires_at = run.lease_expires_at

        # when: another worker starts on this host
        taker.start(environ=environ)
        execution = finished(body["id"], taker, timeout=60)
    finally:
        victim.stop()
        taker.stop()

    # then: it took the run over well before the lease ran out, and repeated no side effect
    assert execution.status == "succeeded"
    assert [effects(label, f"effect-{i}") for i in range(1, 6)] == [1] * 5
    takeover = (
        OutboxEvent.objects.filter(execution_id=body["id"], type="stage.started")
        .filter(payload__stage="work", payload__worker__startswith="taker@")
        .get()
    )
    assert lease_expires_at is not None
    assert takeover.created_at < lease_expires_at - timedelta(seconds=30)
    assert_gapless(body["id"])


def test_a_flushed_broker_loses_nothing(api, worker):
    def pair(i: int) -> list[str]:
        sleeper = {"label": f"f{i}", "mode": "sleep", "seconds": 2}
        return [
            submit(api, "test-waits", sleeper).json()["id"],
            submit(api, "test-counter", {"label": f"g{i}"}).json()["id"],
        ]

    # given: mid-flight: some finished, some sleeping on timers...
    ids = [execution_id for i in range(5) for execution_id in pair(i)]
    wait_for(
        lambda: (
            Execution.objects.filter(pk__in=ids, status="succeeded").count() >= 2
            and Execution.objects.filter(pk__in=ids, status="waiting").exists()
        ),
        timeout=60,
    )
    # ...one running a long step (the one worker process is busy), and the rest accepted
    # behind it, their messages waiting in the broker
    blocker = submit(api, "test-slow", {"label": "blocker", "steps": 1, "step_seconds": 3})
    ids.append(blocker.json()["id"])
    wait_for(lambda: Execution.objects.filter(pk=ids[-1], status="running").exists(), 30)
    ids += [execution_id for i in range(5, 10) for execution_id in pair(i)]
    assert Execution.objects.filter(pk__in=ids, status="succeeded").count() < len(ids)

    # when: the broker's database is flushed: every message is gone
    with current_app.connection_for_write() as conn:
        client = conn.default_channel.client  # type: ignore[attr-defined]
        with client.pipeline(transaction=True) as flush:  # one MULTI: counted as flushed
            queued, _ = flush.llen("stages").flushdb().execute()
    assert queued > 0  # the broker held messages when it lost them

    # then: everything finishes, no side effect twice
    for execution_id in ids:
        assert finished(execution_id, worker, timeout=120).status == "succeeded"
    for i in range(10):
        assert effects(f"f{i}", "after") == 1
        assert [effects(f"g{i}", f"effect-{n}") for n in range(1, 6)] == [1] * 5
    assert effects("blocker", "slow-0") == 1


@pytest.fixture
def two_workers():
    workers = [WorkerProcess("w1").start(beat=False), WorkerProcess("w2").start(beat=False)]
    yield workers
    for proc in workers:
        proc.stop()


def test_one_message_delivered_to_two_workers_runs_the_stage_once(api, two_workers):
    body = submit(api, "test-slow", {"label": "dup", "steps": 3, "step_seconds": 1}).json()
    run_id = body["current_run"]["id"]
    wait_for(lambda: effects("dup", "slow-0") == 1, timeout=30)

    # when: the same stage message arrives again while the first worker is running it
    current_app.send_task(RUN_STAGE_TASK, args=[run_id, "plan"], queue="stages")

    def done() -> bool:
        return Execution.objects.filter(pk=body["id"], status="succeeded").exists()

    try:
        wait_for(done, timeout=60)
    except AssertionError:
        logs = two_workers[0].output()[-3000:] + two_workers[1].output()[-3000:]
        raise AssertionError(logs) from None
    assert [effects("dup", f"slow-{i}") for i in range(3)] == [1, 1, 1]
    # the second delivery was refused by the worker that did not hold the run (its log says
    # so: a diagnostic, not an event)
    logs = two_workers[0].output() + two_workers[1].output()
    assert logs.count(f"duplicate delivery of run {run_id} stage plan") == 1
    assert not OutboxEvent.objects.filter(execution_id=body["id"], type__startswith="run.").exists()
    assert_gapless(body["id"])


# A hundred times more waiting runs than worker processes: the proof that a wait holds no
# worker (the scale benchmarks, bench/, go to 10^4).
EACH = 100


def test_two_hundred_waiting_runs_hold_no_worker_on_two_processes(api, integration_token):
    worker = WorkerProcess("many").start(concurrency=2)
    try:
        sleepers = [
            submit(api, "test-waits", {"label": f"z{i}", "mode": "sleep", "seconds": 3600}).json()[
                "id"
            ]
            for i in range(EACH)
        ]
        hooked = [
            submit(api, "test-waits", {"label": f"k{i}", "mode": "hook"}).json()["id"]
            for i in range(EACH)
        ]
        waiting = sleepers + hooked
        wait_for(
            lambda: Execution.objects.filter(pk__in=waiting, status="waiting").count() == 2 * EACH,
            timeout=240,
            interval=0.5,
        )

        # the same two worker processes run other work meanwhile
        quick = submit(api, "test-counter", {"label": "between"}).json()
        assert finished(quick["id"], worker, timeout=60).status == "succeeded"
        assert Execution.objects.filter(pk__in=waiting, status="waiting").count() == 2 * EACH

        # an hour passes for the sleepers (their timers and receipts say so), and the hooks
        # are answered, each twice
        from django.utils import timezone

        from executions.models import StepReceipt, Timer

        now = timezone.now()
        Timer.objects.filter(run__execution_id__in=sleepers).update(due_at=now)
        StepReceipt.objects.filter(run__execution_id__in=sleepers, kind="sleep").update(
            output={"due": now.isoformat()}
        )
        for i in range(EACH):
            hook_signal(token=f"go-k{i}", idempotency_key="s", payload={}, principal="ops")
            hook_signal(token=f"go-k{i}", idempotency_key="s", payload={}, principal="ops")
        wait_for(
            lambda: (
                Execution.objects.filter(pk__in=waiting, status="succeeded").count() == 2 * EACH
            ),
            timeout=300,
            interval=1,
        )
        assert all(effects(f"k{i}", "after") == 1 for i in range(EACH))
        assert all(effects(f"z{i}", "after") == 1 for i in range(EACH))
    finally:
        worker.stop()


def test_a_wake_whose_message_was_lost_is_recovered(api):
    from executions.models import Run

    worker = WorkerProcess("wake").start()
    try:
        body = submit(api, "test-waits", {"label": "lostwake", "mode": "hook"}).json()
        wait_for(
            lambda: Execution.objects.filter(pk=body["id"], status="waiting").exists(), timeout=30
        )
    finally:
        worker.stop()

    # when: the hook is answered, and the message that would resume the run is lost
    hook_signal(token="go-lostwake", idempotency_key="s", payload={}, principal="ops")
    with current_app.connection_for_write() as conn:
        conn.default_channel.client.flushdb()  # type: ignore[attr-defined]
    run = Run.objects.get(pk=body["current_run"]["id"])
    assert run.wakeups > run.wakeups_seen  # a wake is owed

    # then: the recovery scan of a new worker resumes it
    worker = WorkerProcess("wake2").start()
    try:
        assert finished(body["id"], worker, timeout=60).status == "succeeded"
    finally:
        worker.stop()
    assert effects("lostwake", "after") == 1


@pytest.mark.parametrize("where", ["inside-a-step", "between-steps"])
def test_work_longer_than_the_lease_is_not_taken_over(where):
    from django.conf import settings as django_settings
    from rest_framework.test import APIClient

    from alfred.tokens import token_create
    from executions.models import Run

    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_create(name='hb', role='integration')[1]}"
    )
    # given: a step, or stage code between two steps, longer than the lease
    seconds = django_settings.ALFRED_LEASE_SECONDS * 1.75
    slow = (
        {"steps": 1, "step_seconds": seconds}
        if where == "inside-a-step"
        else {"steps": 2, "step_seconds": 0.1, "pause_seconds": seconds}
    )
    label = f"long-{where}"
    worker = WorkerProcess("heartbeat").start(concurrency=2)  # a second process is free
    try:
        # when
        body = submit(client, "test-slow", {"label": label, **slow}).json()
        execution = finished(body["id"], worker, timeout=60)
    finally:
        worker.stop()

    # then: the heartbeat kept the lease: no takeover, every step ran once
    assert execution.status == "succeeded"
    assert all(effects(label, f"slow-{i}") == 1 for i in range(slow["steps"]))
    assert Run.objects.get(pk=execution.current_run_id).fence == 2  # one claim + the end

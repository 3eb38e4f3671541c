"""The engine with a real Celery worker process on real Redis and PostgreSQL."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.utils.dateparse import parse_datetime

from executions.models import Execution, OutboxEvent, Stage, StepReceipt
from tests.conftest import WorkerProcess, wait_for
from tests.support.engine_workflows import counters, effects
from tests.support.helpers import submit

pytestmark = [
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.server(
        "the engine's one-statement claims, hand-off and finish on another major version, and "
        "stage messages over a TCP Redis"
    ),
]


@pytest.fixture
def worker(shared_worker: WorkerProcess) -> WorkerProcess:
    """One worker for the module: every test here ends idle (its executions terminal, or
    waiting on a timer or a hook)."""
    return shared_worker


def finished(execution_id: str, worker: WorkerProcess, timeout: float = 60) -> Execution:
    def terminal() -> Execution | None:
        execution = Execution.objects.get(pk=execution_id)
        return execution if execution.terminal else None

    try:
        return wait_for(terminal, timeout=timeout, interval=0.1)
    except AssertionError:
        raise AssertionError(worker.output()[-6000:]) from None


def event_types(execution_id: str) -> list[str]:
    return list(
        OutboxEvent.objects.filter(execution_id=execution_id)
        .order_by("sequence")
        .values_list("type", flat=True)
    )


def assert_gapless(execution_id: str) -> None:
    sequences = list(
        OutboxEvent.objects.filter(execution_id=execution_id)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert sequences == list(range(1, len(sequences) + 1))


def test_a_run_goes_through_its_stages_to_success(api, worker):
    body = submit(api, "test-counter", {"label": "happy"}).json()

    execution = finished(body["id"], worker)

    assert execution.status == "succeeded"
    assert execution.start_state == "started"
    assert execution.result == {"verified": True}
    assert [effects("happy", f"effect-{i}") for i in range(1, 6)] == [1] * 5
    stages = Stage.objects.filter(run_id=execution.current_run_id).order_by("position")
    assert [(s.name, s.status) for s in stages] == [
        ("plan", "succeeded"),
        ("work", "succeeded"),
        ("verify", "succeeded"),
    ]
    assert event_types(body["id"]) == [
        "execution.accepted",
        "execution.started",
        "execution.running",
        "stage.started",
        "stage.succeeded",
        "stage.started",
        "stage.succeeded",
        "stage.started",
        "stage.succeeded",
        "execution.succeeded",
    ]
    assert_gapless(body["id"])


def test_a_retryable_step_backs_off_durably_then_succeeds(api, worker):
    body = submit(api, "test-flaky", {"label": "flaky", "failures": 2}).json()

    execution = finished(body["id"], worker)

    assert execution.status == "succeeded"
    assert execution.result == {"attempts": 3}
    receipt = StepReceipt.objects.get(run_id=execution.current_run_id, step_key="flaky")
    assert receipt.attempts == 3
    # between attempts the stage waited on a timer: no worker was held. (A wake that lands
    # before the due time on the database's clock — the countdown hint is a few ms early —
    # finds the backoff not over, arms the timer again and waits once more: a third wait,
    # never a third attempt before its time.)
    assert event_types(body["id"]).count("stage.waiting") >= 2


def test_a_retry_waits_at_least_what_the_failure_asked_for(api, worker):
    # given: a step whose failure says "not before 1.5 s" (its backoff alone would be < 0.5 s)
    body = submit(api, "test-flaky", {"label": "after", "failures": 1, "retry_after": 1.5}).json()

    # when
    execution = finished(body["id"], worker)

    # then: the second attempt came no sooner, and the receipt kept the reason
    assert execution.status == "succeeded"
    first, second = (float(t) for t in counters().lrange("alfred-test:times:after", 0, -1))
    assert second - first >= 1.5
    receipt = StepReceipt.objects.get(run_id=execution.current_run_id, step_key="flaky")
    assert receipt.error["retry_after"] == 1.5


def test_a_fatal_error_stops_at_once(api, worker):
    body = submit(api, "test-flaky", {"label": "fatal", "fatal": True}).json()

    execution = finished(body["id"], worker)

    assert execution.status == "failed"
    assert execution.error["code"] == "refused"
    assert effects("fatal", "attempts") == 1


def test_an_unexpected_exception_is_a_failure_with_a_safe_projection(api, worker):
    body = submit(api, "test-crashing", {"label": "crash"}).json()

    execution = finished(body["id"], worker)

    error: Any = execution.error
    assert execution.status == "failed"
    assert error["code"] == "unclassified"
    assert error["type"] == "KeyError"
    assert any("stage_plan" in frame for frame in error["frames"])
    assert "s3cr3t-value" not in str(error)


def test_a_readiness_failure_is_structured(api, worker):
    body = submit(api, "test-not-ready", {"label": "nr"}).json()

    execution = finished(body["id"], worker)

    error: Any = execution.error
    assert execution.status == "failed"
    assert error["code"] == "readiness_failure"
    assert error["readiness"]["code"] == "zone_not_delegated"
    stage = Stage.objects.get(run_id=execution.current_run_id, name="plan")
    assert stage.status == "failed" and stage.error["readiness"]["checks"][0]["ok"] is False


def test_a_run_past_its_deadline_fails_timed_out(api, worker):
    body = submit(api, "test-deadline", {"label": "late"}).json()

    execution = finished(body["id"], worker, timeout=30)

    assert execution.status == "failed"
    assert execution.error["code"] == "timed_out"


def test_wait_until_polls_durably_until_the_condition_holds(api, worker):
    from tests.support.engine_workflows import counters

    body = submit(api, "test-probe", {"label": "pr"}).json()
    wait_for(lambda: effects("pr", "polls") >= 3, timeout=30)
    # between polls it waits on a timer, holding no worker
    wait_for(lambda: Execution.objects.filter(pk=body["id"], status="waiting").exists(), 10)

    counters().set("alfred-test:ready:pr", "yes")

    execution = finished(body["id"], worker)
    assert execution.status == "succeeded"
    assert execution.result["value"] == "yes"
    polls = effects("pr", "polls")
    receipt = StepReceipt.objects.get(run_id=execution.current_run_id, step_key="ready")
    assert receipt.output["polls"] == polls  # every poll recorded, none repeated on replay
    # ctx.now() returned the recorded instant on every replay of the stage
    instants = counters().lrange("alfred-test:now:pr", 0, -1)
    assert len(instants) >= 3 and len(set(instants)) == 1


def test_a_waits_polls_come_the_installations_poll_scale_times_their_interval_apart(
    api, worker, settings
):
    # given: a wait declared to poll every 40 s, under the test settings' ALFRED_POLL_SCALE
    scale = float(os.environ["ALFRED_POLL_SCALE"])
    body = submit(api, "test-probe", {"label": "scaled", "every": 40, "timeout": 1}).json()

    # when: its first poll saw nothing
    def first_poll() -> StepReceipt | None:
        return StepReceipt.objects.filter(
            run__execution_id=body["id"], step_key="ready", output__polls=1
        ).first()

    receipt = wait_for(first_poll, timeout=30)

    # then: the next is due 40 x the scale after it, on the database's clock
    due = parse_datetime(receipt.output["next_poll_at"])
    since = parse_datetime(receipt.output["since"])
    assert due is not None and since is not None
    assert (due - since).total_seconds() == pytest.approx(40 * scale)
    assert scale < 1 and scale == settings.ALFRED_POLL_SCALE


def test_wait_until_gives_up_after_its_timeout(api, worker):
    body = submit(api, "test-probe", {"label": "never", "timeout": 1}).json()

    execution = finished(body["id"], worker)

    assert execution.status == "failed"
    assert execution.error["code"] == "wait_timed_out"


def test_a_poll_that_meets_a_transient_provider_error_is_polled_again(api, worker):
    """A probe's read failing as a provider's transient error would is a poll that saw
    nothing (it failed the execution before): the wait goes on and succeeds."""
    from tests.support.engine_workflows import counters

    counters().set("alfred-test:ready:blink", "yes")
    body = submit(api, "test-probe", {"label": "blink", "flaky": 2}).json()

    execution = finished(body["id"], worker)

    assert execution.status == "succeeded", execution.error
    assert execution.result["value"] == "yes"
    receipt = StepReceipt.objects.get(run_id=execution.current_run_id, step_key="ready")
    assert receipt.output["polls"] == effects("blink", "polls") == 3


def test_a_wait_whose_polls_keep_failing_times_out_naming_the_last_error(api, worker):
    body = submit(api, "test-probe", {"label": "down", "flaky": 10_000, "timeout": 1}).json()

    execution = finished(body["id"], worker)

    assert execution.status == "failed"
    assert execution.error["code"] == "wait_timed_out"
    assert execution.error["last_error"]["code"] == "provider_transient"
    assert effects("down", "polls") >= 2


def test_a_replay_that_reaches_another_step_key_is_fatal(api, worker):
    body = submit(api, "test-shifty", {"label": "shift"}).json()

    execution = finished(body["id"], worker)

    assert execution.status == "failed"
    assert execution.error["code"] == "nondeterministic"
    assert "first-1" in execution.error["message"] and "first-2" in execution.error["message"]
    assert effects("shift", "first") == 1


def test_mutation_receipts_are_validated_and_kept(api, worker):
    good = submit(api, "test-mutating", {"label": "m1"}).json()
    bad = submit(api, "test-mutating", {"label": "m2", "bad": True}).json()

    assert finished(good["id"], worker).status == "succeeded"
    receipt = StepReceipt.objects.get(run__execution_id=good["id"], step_key="change")
    assert receipt.mutation["undo"] == {"action": "delete", "values": ["1.2.3.4"]}
    failed = finished(bad["id"], worker)
    assert failed.status == "failed"
    assert failed.error["code"] == "bad_mutation_receipt"


def _sessions_started() -> int:
    """Connections PostgreSQL has accepted into the test database so far (its own count)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


@pytest.mark.worker
def test_a_worker_keeps_its_database_connection_from_task_to_task(api):
    # given: one worker process, connected by a first run
    worker = WorkerProcess("keeps").start(concurrency=1)
    try:
        assert finished(submit(api, "test-counter", {"label": "keep-0"}).json()["id"], worker)
        before = _sessions_started()

        # when: five more runs, one after another
        for i in range(1, 6):
            body = submit(api, "test-counter", {"label": f"keep-{i}", "steps": 1}).json()
            assert finished(body["id"], worker).status == "succeeded"
        started = _sessions_started() - before
    finally:
        worker.stop()

    # then: they ran on the connection it had (Celery's own rule opened one per task); at
    # most one more, for the lease heartbeat's thread
    assert started <= 1, started

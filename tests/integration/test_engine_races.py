"""Regressions: the engine's windows between statements (issue: crash windows and races).

A lease heartbeat whose connection dies, a stage whose connection dies after its step ran, a
worker killed between a wait's receipt and its timer, a scanner whose clock runs ahead of the
workers'. Real PostgreSQL, real Celery workers where a process must die; side effects counted
in Redis, outside the database.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from executions.models import (
    Execution,
    OutboxEvent,
    Run,
    Stage,
    StepReceipt,
    Timer,
    WebhookDelivery,
    WebhookEndpoint,
)
from executions.runtime.holders import worker_identity
from executions.runtime.runner import Outcome, stage_execute
from executions.runtime.scans import timers_fire
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_engine import event_types, finished
from tests.support.engine_workflows import Reads, effects
from tests.support.helpers import submit

pytestmark = pytest.mark.django_db(transaction=True)


def _backends(where: str, *params: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "  # noqa: S608
            f"AND pid <> pg_backend_pid() AND {where}",
            list(params),
        )
        return [row[0] for row in cursor.fetchall()]


def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def _deliver(execution_id: str, stage: str) -> Outcome:
    run_id = Execution.objects.values_list("current_run_id", flat=True).get(pk=execution_id)
    return stage_execute(str(run_id), stage, "test@here:0:1", onward=False)  # one stage


def _started(
    call: Callable[[], Outcome],
) -> tuple[threading.Thread, list[Outcome | BaseException]]:
    """``call`` on a thread of its own, started; what it returns or raises lands in the list
    (its connections are closed when it ends)."""
    outcome: list[Outcome | BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.worker
def test_a_lease_heartbeat_renews_through_a_terminated_connection_and_the_step_runs_once(api):
    # given: two worker processes (one could take the run over), a step longer than the lease
    worker = WorkerProcess("heartbeat").start(concurrency=2)
    try:
        body = submit(api, "test-slow", {"label": "hb", "steps": 2, "step_seconds": 9}).json()
        wait_for(lambda: Run.objects.filter(pk=body["current_run"]["id"], fence=1).exists(), 30)

        # when: the heartbeat's backend is terminated while the step runs
        (pid,) = wait_for(lambda: _backends("application_name = 'alfred-lease'"), 30)
        _terminate(pid)

        # then: the heartbeat renews on a new connection; nobody takes the run over, and
        # each step ran once
        execution = finished(body["id"], worker, timeout=60)
    finally:
        worker.stop()
    assert execution.status == "succeeded"
    assert [effects("hb", "slow-0"), effects("hb", "slow-1")] == [1, 1]
    assert event_types(body["id"]).count("stage.started") == 1  # claimed once, never taken over


def test_a_step_whose_connection_dies_while_it_runs_keeps_its_receipt(api):
    # given: a stage inside a 2 s step, in a thread of this process
    label = f"cut-{uuid.uuid4().hex[:8]}"  # (no worker here: the counters are not reset)
    body = submit(api, "test-slow", {"label": label, "steps": 2, "step_seconds": 2}).json()
    stage, outcome = _started(lambda: _deliver(body["id"], "plan"))
    # (its connection's last statement, outside any transaction, renewed the lease at the
    # step's boundary: it is in the step now; the heartbeat's own connection is named)
    renewing = (
        "state = 'idle' AND query LIKE '%%SET lease_expires_at = clock_timestamp()%%' "
        "AND application_name <> 'alfred-lease'"
    )
    (pid,) = wait_for(lambda: _backends(renewing), 10, interval=0.01)

    # when: the stage's own connection is terminated while its step runs
    _terminate(pid)
    stage.join(30)

    # then: the receipt was written on a new connection; the stage finished; once each
    assert outcome == [Outcome.STOP]  # its only stage done: the execution succeeded
    assert Execution.objects.get(pk=body["id"]).status == "succeeded"
    assert StepReceipt.objects.filter(step_key="slow-0", status="succeeded").count() == 1
    assert [effects(label, "slow-0"), effects(label, "slow-1")] == [1, 1]


def test_a_stage_whose_database_goes_away_mid_stage_is_claimed_again_not_failed(api):
    # given: a run whose second stage reads the database after a pause of its own code
    label = f"away-{uuid.uuid4().hex[:8]}"
    body = submit(api, "test-reads", {"label": label, "pause_seconds": 2}).json()
    stage, outcome = _started(
        lambda: stage_execute(body["current_run"]["id"], "plan", "test@here:0:1")
    )
    pausing = "state = 'idle' AND query = %s"
    (pid,) = wait_for(lambda: _backends(pausing, Reads.MARK), 10, interval=0.01)

    # when: the stage's connection is cut while it pauses, so its read fails
    _terminate(pid)
    stage.join(30)

    # then: not the workflow's failure: the worker claimed the stage again and replayed it
    assert outcome == [Outcome.STOP]
    execution = Execution.objects.get(pk=body["id"])
    assert execution.status == "succeeded", execution.error
    assert effects(label, "after") == 1
    started = OutboxEvent.objects.filter(execution_id=body["id"], type="stage.started")
    assert [e.payload["stage"] for e in started.order_by("sequence")] == ["plan", "use", "use"]


def test_a_stage_whose_end_cannot_be_written_is_claimed_again_and_ends_once(api):
    # given: a run whose last stage's connection dies as the stage returns (once)
    label = f"end-{uuid.uuid4().hex[:8]}"
    body = submit(api, "test-reads", {"label": label, "cut_at_end": True}).json()

    # when: a worker runs it
    stage, outcome = _started(
        lambda: stage_execute(body["current_run"]["id"], "plan", "test@here:0:1")
    )
    stage.join(30)

    # then: its end was written on a new connection after the stage was claimed again and
    # replayed: the run succeeded, its step ran once
    assert outcome == [Outcome.STOP]
    execution = Execution.objects.get(pk=body["id"])
    assert execution.status == "succeeded", execution.error
    assert [effects(label, "after"), effects(label, "cut")] == [1, 2]
    started = OutboxEvent.objects.filter(execution_id=body["id"], type="stage.started")
    assert [e.payload["stage"] for e in started.order_by("sequence")] == ["plan", "use", "use"]


def test_a_scanner_fires_timers_by_the_databases_clock_not_its_own(api, monkeypatch):
    # given: a run asleep for 90 s
    body = submit(api, "test-waits", {"label": "skew", "mode": "sleep", "seconds": 90}).json()
    assert _deliver(body["id"], "plan") is Outcome.NEXT
    assert _deliver(body["id"], "wait") is Outcome.STOP
    assert Timer.objects.filter(status="pending").count() == 1

    # when: a scanner whose clock runs an hour ahead looks for due timers
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(hours=1))
    fired = timers_fire()

    # then: nothing is due by the database's clock: nothing fires
    assert fired == 0
    assert Timer.objects.filter(status="pending").count() == 1


def test_a_redelivered_finished_stage_stands_for_the_next_until_that_one_waits(api):
    # given: a run whose plan is done and whose wait has not started
    body = submit(api, "test-waits", {"label": "again", "mode": "sleep", "seconds": 90}).json()
    assert _deliver(body["id"], "plan") is Outcome.NEXT

    # when: plan's message comes again (the worker died before it claimed the wait)
    # then: it runs the wait, which goes to sleep on its timer
    assert _deliver(body["id"], "plan") is Outcome.STOP
    run = Execution.objects.get(pk=body["id"]).current_run
    assert dict(run.stages.values_list("name", "status")) == {
        "plan": "succeeded",
        "wait": "waiting",
    }
    assert Timer.objects.filter(status="pending").count() == 1

    # and once the wait waits, plan's message again stops there: the timer wakes it
    fence = Run.objects.get(pk=run.pk).fence
    assert _deliver(body["id"], "plan") is Outcome.STOP
    assert Run.objects.get(pk=run.pk).fence == fence


def test_a_redelivered_finished_stage_takes_over_the_next_from_a_dead_worker(api):
    # given: a run whose worker handed itself the wait stage and died in it (its lease names
    # a process of this host that is gone)
    body = submit(api, "test-waits", {"label": "died", "mode": "sleep", "seconds": 90}).json()
    assert _deliver(body["id"], "plan") is Outcome.NEXT
    run = Execution.objects.get(pk=body["id"]).current_run
    dead = subprocess.Popen(["true"])
    dead.wait()
    Stage.objects.filter(run=run, name="wait").update(status="running", started_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(
        status="running",
        lease_owner=worker_identity(socket.gethostname()).rsplit(":", 1)[0] + f":{dead.pid}",
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )

    # when: the run's message (plan's) is delivered again
    assert _deliver(body["id"], "plan") is Outcome.STOP

    # then: the wait is taken over at once and goes to sleep, under the new worker's fence
    assert Stage.objects.get(run=run, name="wait").status == "waiting"
    started = list(
        OutboxEvent.objects.filter(execution_id=body["id"], type="stage.started").values_list(
            "payload__stage", "payload__worker"
        )
    )
    assert started == [("plan", "test@here:0:1"), ("wait", "test@here:0:1")]


def test_a_claim_serves_its_stages_due_timers_so_the_scanner_wakes_nobody_twice(api):
    # given: a run asleep whose timer is due (its countdown hint delivers the stage)
    body = submit(api, "test-waits", {"label": "served", "mode": "sleep", "seconds": 90}).json()
    assert _deliver(body["id"], "plan") is Outcome.NEXT
    assert _deliver(body["id"], "wait") is Outcome.STOP
    now = timezone.now()
    Timer.objects.filter(status="pending").update(due_at=now)
    StepReceipt.objects.filter(kind="sleep").update(output={"due": now.isoformat()})

    # when: the hinted delivery claims the stage
    _deliver(body["id"], "wait")

    # then: the timer it served is fired, and the scanner finds nothing left to wake
    assert list(Timer.objects.values_list("status", flat=True)) == ["fired"]
    assert timers_fire() == 0


def test_a_wait_woken_before_its_time_arms_its_timer_again(api):
    # given: a run asleep for 90 s whose timer fired early (a skewed scanner, a stray wake)
    body = submit(api, "test-waits", {"label": "early", "mode": "sleep", "seconds": 90}).json()
    assert _deliver(body["id"], "plan") is Outcome.NEXT
    assert _deliver(body["id"], "wait") is Outcome.STOP
    timer = Timer.objects.get(status="pending")
    Timer.objects.filter(pk=timer.pk).update(status="fired", fired_at=timezone.now())
    Run.objects.filter(pk=timer.run_id).update(wakeups=F("wakeups") + 1)  # as a fire wakes

    # when: the run replays its wait before the due time
    assert _deliver(body["id"], "wait") is Outcome.STOP

    # then: it waits on, and a timer is armed for the due time: nothing strands
    assert Execution.objects.get(pk=body["id"]).status == "waiting"
    armed = Timer.objects.get(run_id=body["current_run"]["id"], status="pending")
    assert armed.due_at == timer.due_at


def test_a_stale_message_for_a_paused_stage_leaves_it_paused_and_runs_nothing(api):
    # given: a run paused on an operator's checkpoint
    body = submit(api, "test-waits", {"label": "stale", "mode": "operator"}).json()
    assert _deliver(body["id"], "plan") is Outcome.NEXT
    assert _deliver(body["id"], "wait") is Outcome.STOP
    run = Run.objects.get(pk=body["current_run"]["id"])
    events = event_types(body["id"])
    assert Execution.objects.get(pk=body["id"]).status == "paused"

    # when: the stage's message comes again with nothing to wake it (a redelivery, a lost
    # race of the recovery scan)
    assert _deliver(body["id"], "wait") is Outcome.STOP

    # then: it is not claimed: the execution stays paused throughout (an approval in that
    # window is not refused), under the same fence, with no event
    assert Execution.objects.get(pk=body["id"]).status == "paused"
    assert Run.objects.get(pk=run.pk).fence == run.fence
    assert event_types(body["id"]) == events


STALL_TIMER_INSERT = """
    CREATE SEQUENCE alfred_test_timer_stall;
    CREATE FUNCTION alfred_test_timer_stall() RETURNS trigger AS $$
    BEGIN
        IF nextval('alfred_test_timer_stall') = 1 THEN
            PERFORM pg_sleep(60);
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql;
    CREATE TRIGGER alfred_test_timer_stall BEFORE INSERT ON {table}
        FOR EACH ROW EXECUTE FUNCTION alfred_test_timer_stall();
"""
DROP_STALL = """
    DROP TRIGGER IF EXISTS alfred_test_timer_stall ON {table};
    DROP FUNCTION IF EXISTS alfred_test_timer_stall();
    DROP SEQUENCE IF EXISTS alfred_test_timer_stall;
"""


@pytest.mark.worker
def test_a_worker_killed_between_a_waits_receipt_and_its_timer_leaves_neither(api):
    # given: the first Timer insert stalls inside its statement
    table = Timer._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(STALL_TIMER_INSERT.format(table=table))
    worker = WorkerProcess("stall").start()
    try:
        body = submit(api, "test-waits", {"label": "torn", "mode": "sleep", "seconds": 3}).json()
        (stalled,) = wait_for(lambda: _backends("wait_event = 'PgSleep'"), 30)
        holder = Run.objects.get(pk=body["current_run"]["id"]).lease_owner

        # when: the worker process is SIGKILLed right there, and its backend goes with it
        os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)
        _terminate(stalled)

        # then: the redelivered stage writes the wait anew and the run wakes and finishes
        execution = finished(body["id"], worker, timeout=45)
    finally:
        worker.stop()
        with connection.cursor() as cursor:
            cursor.execute(DROP_STALL.format(table=table))
    assert execution.status == "succeeded"
    assert effects("torn", "after") == 1
    assert StepReceipt.objects.filter(step_key="nap").count() == 1


REFUSE_HEARTBEAT = """
    CREATE FUNCTION alfred_test_refuse_heartbeat() RETURNS trigger AS $$
    BEGIN
        IF current_setting('application_name') = 'alfred-lease' THEN
            RAISE EXCEPTION 'heartbeat refused by the test';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql;
    CREATE TRIGGER alfred_test_refuse_heartbeat BEFORE UPDATE ON {table}
        FOR EACH ROW EXECUTE FUNCTION alfred_test_refuse_heartbeat();
"""
ALLOW_HEARTBEAT = """
    DROP TRIGGER IF EXISTS alfred_test_refuse_heartbeat ON {table};
    DROP FUNCTION IF EXISTS alfred_test_refuse_heartbeat();
"""


def test_a_stage_whose_heartbeat_cannot_renew_for_half_a_lease_stops_at_its_next_boundary(api):
    # given: every renewal by the heartbeat fails (the stage's own writes still succeed)
    label = f"doubt-{uuid.uuid4().hex[:8]}"
    table = Run._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(REFUSE_HEARTBEAT.format(table=table))
    try:
        # a step longer than half a lease, then another
        body = submit(api, "test-slow", {"label": label, "steps": 2, "step_seconds": 4}).json()

        outcome = _deliver(body["id"], "plan")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(ALLOW_HEARTBEAT.format(table=table))

    # then: the step in flight finished with its receipt; the next one never started (the
    # lease may have lapsed: the run is left for whoever takes it over)
    assert outcome is Outcome.STOP
    assert [effects(label, "slow-0"), effects(label, "slow-1")] == [1, 0]
    assert StepReceipt.objects.filter(step_key="slow-0", status="succeeded").count() == 1
    assert Execution.objects.get(pk=body["id"]).status == "running"


def test_the_recovery_scan_backs_off_a_run_it_has_just_published(api):
    from executions.runtime.scans import START_GRACE_SECONDS, runs_recover

    # given: an execution whose start message has not been claimed within the grace (a
    # backlog, or a lost message)
    body = submit(api, "test-counter", {"label": f"backlog-{uuid.uuid4().hex[:8]}"}).json()
    late = timezone.now() - timedelta(seconds=START_GRACE_SECONDS + 1)
    Run.objects.filter(pk=body["current_run"]["id"]).update(created_at=late)

    # when: the scan runs every tick
    first, second = runs_recover(), runs_recover()

    # then: it publishes the run again once, and not on every tick while that message may
    # still be on its way; after the backoff (the grace, then doubling), once more
    assert (first, second) == (1, 0)
    run = Run.objects.get(pk=body["current_run"]["id"])
    assert (run.recoveries, run.recovered_at is not None) == (1, True)
    Run.objects.filter(pk=run.pk).update(recovered_at=late)
    assert runs_recover() == 1
    Run.objects.filter(pk=run.pk).update(recovered_at=late)
    assert runs_recover() == 0  # 2 × the grace now
    assert _deliver(body["id"], "plan") is Outcome.NEXT  # claimed: the backoff starts over
    assert Run.objects.get(pk=run.pk).recoveries == 0


def test_a_worker_going_on_passes_a_stage_done_already_without_running_it(api):
    # given: a run whose middle stage was done by an earlier run (a continuation skips it:
    # its row is succeeded with the output persisted before)
    body = submit(api, "test-counter", {"label": "skipped", "steps": 2}).json()
    run_id = body["current_run"]["id"]
    Stage.objects.filter(run_id=run_id, name="work").update(
        status="succeeded", output={"counts": ["earlier"]}
    )

    # when: a worker takes the run's message and goes on from stage to stage
    outcome = stage_execute(run_id, "plan", "test@here:0:1")

    # then: the done stage kept its output and ran no step; the run finished past it
    assert outcome is Outcome.STOP
    assert Execution.objects.get(pk=body["id"]).status == "succeeded"
    assert Stage.objects.get(run_id=run_id, name="work").output == {"counts": ["earlier"]}
    assert effects("skipped", "effect-1") == effects("skipped", "effect-2") == 0
    started = OutboxEvent.objects.filter(execution_id=body["id"], type="stage.started")
    assert sorted(e.payload["stage"] for e in started) == ["plan", "verify"]


def test_a_worker_hands_the_run_to_itself_from_stage_to_stage(api):
    # given: a run of three stages, published as one message naming its first
    body = submit(api, "test-counter", {"label": "inline", "steps": 0}).json()
    run_id = body["current_run"]["id"]

    # when: a worker takes that message
    with CaptureQueriesContext(connection) as queries:
        outcome = stage_execute(run_id, "plan", "test@here:0:1")

    # then: it ran every stage, one claim each, with no message between them
    assert outcome is Outcome.STOP
    execution = Execution.objects.get(pk=body["id"])
    assert execution.status == "succeeded", execution.error
    assert Run.objects.get(pk=run_id).fence == 4  # three claims, then the terminal transition
    started = OutboxEvent.objects.filter(execution_id=body["id"], type="stage.started")
    assert [(e.payload["stage"], e.payload["worker"]) for e in started.order_by("sequence")] == [
        ("plan", "test@here:0:1"),
        ("work", "test@here:0:1"),
        ("verify", "test@here:0:1"),
    ]
    # and in one statement a transition: the first claim, each hand-off (one stage's end
    # with the next one's claim), the last stage's end with the terminal transition, each
    # its own transaction; then the lane's reconcile (an execution without a lane: nothing)
    assert [q["sql"] for q in queries.captured_queries].count("BEGIN") == 0
    assert len(queries.captured_queries) == 1 + 2 + 1


def _written(execution_id: str) -> dict[str, Any]:
    """What a claim wrote for the execution, its ids and times replaced by what they are
    relative to (so two executions claimed two ways compare)."""
    execution = Execution.objects.get(pk=execution_id)
    run = Run.objects.get(pk=execution.current_run_id)
    ids = {execution.id: "EXE", run.id: "RUN", execution.lane_key or execution.id: "LANE"}

    def named(text: str) -> str:
        for real, name in ids.items():
            text = text.replace(real, name)
        return text

    since = run.started_at
    assert since is not None and run.lease_expires_at is not None
    events = OutboxEvent.objects.filter(execution=execution).order_by("sequence")
    return {
        "execution": (execution.status, execution.start_state, execution.start_error),
        "last_sequence": (execution.last_sequence, events.count()),
        "run": (run.status, run.fence, run.lease_owner, run.recoveries, run.wakeups_seen),
        "lease": run.lease_expires_at - since,
        "deadline": run.deadline_at and run.deadline_at - since,
        "stages": list(run.stages.order_by("position").values_list("name", "status")),
        "stage_started": [
            s == since for s in run.stages.order_by("position").values_list("started_at", flat=True)
        ],
        "events": [(e.sequence, e.type, named(e.key), named(str(e.payload))) for e in events],
        "deliveries": sorted(
            WebhookDelivery.objects.filter(event__execution=execution).values_list(
                "event__type", "status"
            )
        ),
    }


@pytest.mark.parametrize(
    ("workflow", "body"),
    [
        ("test-laned", {"lane": "first-{}"}),  # a claim guard: its lane
        ("test-deadline", {}),  # a workflow with a deadline, set by the first claim
    ],
)
def test_a_new_runs_first_claim_is_one_statement_that_writes_what_the_claim_under_locks_writes(
    api, workflow, body
):
    from executions.runtime.runner import _Claim, _claim, _claim_locked

    # given: two new executions alike, and a webhook endpoint that wants every event
    WebhookEndpoint.objects.create(url="https://hooks.example.com/x", secret="whsec_" + "A" * 44)
    twins = [
        submit(api, workflow, {**{k: v.format(n) for k, v in body.items()}, "label": f"t{n}"})
        for n in (1, 2)
    ]
    (one, one_run), (slow, slow_run) = (
        (t.json()["id"], t.json()["current_run"]["id"]) for t in twins
    )

    # when: the one's first stage is claimed, and the other's the slow way
    with CaptureQueriesContext(connection) as queries:
        claimed = _claim(one_run, "plan", "test@here:0:1")
    by_locks = _claim_locked(slow_run, "plan", "test@here:0:1")

    # then: one statement, no transaction around it, and the same claim
    assert len(queries.captured_queries) == 1
    assert isinstance(claimed, _Claim) and isinstance(by_locks, _Claim)
    assert claimed.run.pk == one_run and claimed.stage_id != by_locks.stage_id
    started = Run.objects.get(pk=one_run).started_at
    assert started is not None
    assert started <= claimed.clock.now() < started + timedelta(seconds=5)  # the claim's moment

    def held(claim: _Claim) -> tuple[Any, ...]:
        return (
            claim.stage,
            claim.fence,
            claim.wakeups,
            {k: v for k, v in claim.input.items() if k not in ("label", "lane")},
            claim.workflow,
            sorted(claim.trace_context),
            claim.child,
            claim.run.fence,
            claim.run.status,
        )

    assert held(claimed) == held(by_locks)
    # and the same rows and events, in the same order, with the same webhook deliveries owed
    assert _written(one) == _written(slow)
    assert [e[1] for e in _written(one)["events"]][-3:] == [
        "execution.started",
        "execution.running",
        "stage.started",
    ]


def test_a_first_claim_the_statement_cannot_make_is_made_under_locks(api):
    from executions.runtime.runner import _claim

    # given: a new run whose lane another execution holds (a bug elsewhere, say)
    from lanes.models import Lane

    mine = submit(api, "test-laned", {"label": "refused", "lane": "first-refused"}).json()
    other = submit(api, "test-laned", {"label": "other", "lane": "first-other"}).json()
    Lane.objects.filter(key="first-refused").update(owner_id=other["id"])

    # when
    with CaptureQueriesContext(connection) as queries:
        outcome = _claim(mine["current_run"]["id"], "plan", "test@here:0:1")

    # then: the statement wrote nothing; the claim under locks refused it, as it would have
    assert outcome is Outcome.STOP
    assert [q["sql"] for q in queries.captured_queries].count("BEGIN") == 1
    run = Run.objects.get(pk=mine["current_run"]["id"])
    assert (run.status, run.fence) == ("pending", 0)
    assert Execution.objects.get(pk=mine["id"]).status == "queued"


def _claimed_context(api: APIClient, label: str) -> tuple[Run, object]:
    """A test-counter execution's first stage claimed by this process, and the context its
    code would run with."""
    from executions.runtime.clock import Clock
    from executions.runtime.context import Context
    from executions.runtime.runner import _Claim, _claim

    execution = submit(api, "test-counter", {"label": label}).json()
    claim = _claim(execution["current_run"]["id"], "plan", "test@here:0:1")
    assert isinstance(claim, _Claim)
    context = Context(
        run=claim.run,
        stage=claim.stage,
        fence=claim.fence,
        input=None,
        dry_run=False,
        wake=lambda *_: None,
        clock=Clock(claim.clock.now()),
    )
    return claim.run, context


def test_a_step_records_its_receipt_with_the_lease_renewed_in_one_statement(api):
    from executions.runtime.context import Context

    run, context = _claimed_context(api, "one-statement")
    assert isinstance(context, Context)
    before = Run.objects.get(pk=run.pk).lease_expires_at

    with CaptureQueriesContext(connection) as queries:
        assert context.step("k", lambda: {"done": 1}) == {"done": 1}

    receipt = StepReceipt.objects.get(run_id=run.pk, step_key="k")
    assert (receipt.output, receipt.fence, receipt.status) == ({"done": 1}, run.fence, "succeeded")
    after = Run.objects.get(pk=run.pk).lease_expires_at
    assert before is not None and after is not None and after > before
    # the stage's receipts read, the boundary's renewal, then the receipt with the renewal:
    # three statements, no transaction around them
    statements = [q["sql"] or "" for q in queries.captured_queries]
    assert len(statements) == 3
    assert not {"BEGIN", "COMMIT"} & set(statements)


def test_a_step_whose_run_was_taken_over_while_it_ran_writes_no_receipt(api):
    from executions.runtime.context import Context
    from executions.runtime.errors import LeaseLost

    run, context = _claimed_context(api, "taken-over")
    assert isinstance(context, Context)

    def taken_over() -> int:  # another worker claims the run while the step runs
        Run.objects.filter(pk=run.pk).update(fence=F("fence") + 1)
        return 1

    with pytest.raises(LeaseLost):
        context.step("k", taken_over)

    assert not StepReceipt.objects.filter(run_id=run.pk).exists()


def _first_stage_claimed(api: APIClient, workflow: str, body: dict[str, Any]) -> Any:
    from executions.runtime.runner import _Claim, _claim

    execution = submit(api, workflow, body).json()
    claim = _claim(execution["current_run"]["id"], "plan", "test@here:0:1")
    assert isinstance(claim, _Claim)
    return claim


def test_a_stage_hands_over_to_the_next_in_one_statement(api):
    from executions.runtime.runner import _Claim, _complete

    claim = _first_stage_claimed(api, "test-laned", {"label": "hand-over", "lane": "ho-1"})
    assert isinstance(claim, _Claim)

    with CaptureQueriesContext(connection) as queries:
        claimed = _complete(claim, {"planned": 1}, following="apply", worker="test@here:0:1")

    assert isinstance(claimed, _Claim)
    assert (claimed.stage, claimed.fence) == ("apply", claim.fence + 1)
    assert len(queries.captured_queries) == 1  # no BEGIN, no lock read, no COMMIT
    stages = dict(Stage.objects.filter(run_id=claim.run.id).values_list("name", "status"))
    assert (stages["plan"], stages["apply"]) == ("succeeded", "running")
    run = Run.objects.get(pk=claim.run.id)
    assert (run.fence, run.lease_owner) == (claim.fence + 1, "test@here:0:1")
    assert event_types(claim.run.execution_id)[-2:] == ["stage.succeeded", "stage.started"]


def test_a_cancel_asked_while_a_stage_ran_is_honoured_at_its_hand_over(api):
    from executions.runtime.runner import _Claim, _complete

    claim = _first_stage_claimed(api, "test-laned", {"label": "cancel", "lane": "ho-2"})
    assert isinstance(claim, _Claim)
    Run.objects.filter(pk=claim.run.id).update(cancel_requested_at=timezone.now())

    outcome = _complete(claim, {}, following="apply", worker="test@here:0:1")

    assert outcome is Outcome.STOP
    assert Execution.objects.get(pk=claim.run.execution_id).status == "canceled"
    assert Stage.objects.get(run_id=claim.run.id, name="apply").status == "pending"


def test_a_hand_over_whose_lane_went_to_another_claims_nothing(api):
    from executions.runtime.runner import _Claim, _complete
    from lanes.models import Lane

    claim = _first_stage_claimed(api, "test-laned", {"label": "lane-gone", "lane": "ho-3"})
    other = submit(api, "test-laned", {"label": "other", "lane": "ho-4"}).json()["id"]
    assert isinstance(claim, _Claim)
    Lane.objects.filter(key="ho-3").update(owner_id=other)  # a bug elsewhere, say

    outcome = _complete(claim, {}, following="apply", worker="test@here:0:1")

    # the claim guard refused the next stage: the first stage's end is written, nothing runs
    assert outcome is Outcome.STOP
    stages = dict(Stage.objects.filter(run_id=claim.run.id).values_list("name", "status"))
    assert (stages["plan"], stages["apply"]) == ("succeeded", "pending")
    assert Run.objects.get(pk=claim.run.id).fence == claim.fence


def test_the_last_stage_ends_the_execution_in_one_statement(api):
    from executions.runtime.runner import _Claim, _complete
    from lanes.models import Lane

    claim = _first_stage_claimed(api, "test-laned", {"label": "finish", "lane": "fin-1"})
    assert isinstance(claim, _Claim)
    for following in ("apply", "verify"):
        claim = _complete(claim, {}, following=following, worker="test@here:0:1")
        assert isinstance(claim, _Claim)

    with CaptureQueriesContext(connection) as queries:
        outcome = _complete(claim, {"verified": True}, following=None, worker="test@here:0:1")

    assert outcome is Outcome.STOP
    # the statement, then (once it committed) the lane's reconcile, which releases it
    assert queries.captured_queries[0]["sql"] != "BEGIN"
    execution = Execution.objects.get(pk=claim.run.execution_id)
    assert (execution.status, execution.result) == ("succeeded", {"verified": True})
    assert execution.last_sequence == OutboxEvent.objects.filter(execution=execution).count()
    run = Run.objects.get(pk=claim.run.id)
    assert (run.status, run.fence, run.lease_owner) == ("succeeded", claim.fence + 1, "")
    assert set(Stage.objects.filter(run=run).values_list("status", flat=True)) == {"succeeded"}
    assert event_types(execution.id)[-3:] == [
        "stage.succeeded",
        "execution.succeeded",
        "lane.released",
    ]
    assert Lane.objects.get(key="fin-1").state == "free"


def test_a_last_stage_fenced_out_while_it_ran_ends_nothing(api):
    from executions.runtime.runner import _Claim, _complete

    claim = _first_stage_claimed(api, "test-laned", {"label": "fenced", "lane": "fin-2"})
    assert isinstance(claim, _Claim)
    Run.objects.filter(pk=claim.run.id).update(fence=F("fence") + 1)  # taken over

    assert _complete(claim, {}, following=None, worker="test@here:0:1") is None

    assert Execution.objects.get(pk=claim.run.execution_id).status == "running"
    assert Stage.objects.get(pk=claim.stage_id).status == "running"


def test_a_child_under_its_roots_lane_stops_trying_the_one_statement_hand_off(api, monkeypatch):
    from executions.runtime import runner
    from executions.runtime.children import child_create

    # given: a child with no lane of its own, under a root that holds its lane: its claim
    # guard decides in Python (the root is looked up), so no one-statement claim admits it
    root = submit(api, "test-laned", {"label": "root", "lane": "child-root"}).json()
    child_id, adopted = child_create(root["id"], "test-counter", {"label": "child", "steps": 0})
    assert not adopted
    tried: list[str] = []

    def hand_over(**kwargs: Any) -> Any:  # the real statement, counted
        tried.append(kwargs["following"])
        return stage_hand_over(**kwargs)

    stage_hand_over = runner.stage_hand_over
    monkeypatch.setattr(runner, "stage_hand_over", hand_over)
    run_id = str(Execution.objects.get(pk=child_id).current_run_id)

    # when: a worker runs it from stage to stage
    outcome = stage_execute(run_id, "plan", "test@here:0:1")

    # then: every stage ran and the child succeeded; the hand-off statement was tried once,
    # wrote nothing, and the next hand-off went the slow way at once
    assert outcome is Outcome.STOP
    assert Execution.objects.get(pk=child_id).status == "succeeded"
    assert tried == ["work"]
    started = OutboxEvent.objects.filter(execution_id=child_id, type="stage.started")
    assert sorted(e.payload["stage"] for e in started) == ["plan", "verify", "work"]

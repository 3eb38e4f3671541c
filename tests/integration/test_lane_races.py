"""Regressions: the windows between the lanes and the engine (issue: crash windows and races).

Each test drives the real services and the real engine in this process against real
PostgreSQL: a message is delivered by calling the stage task's service, ``stage_execute``, as
a worker would on any message the broker hands it (a stale one, a duplicate, a scan's guess).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import NotSupportedError, ProgrammingError, connection, connections, transaction
from django.utils import timezone

from alfred.principals import cli_caller
from executions.controls import execution_cancel, execution_retry
from executions.lanes.reconciler import Action, lane_reconcile
from executions.models import Execution, ExecutionStatus, Run, Stage
from executions.runtime.runner import Outcome, stage_execute
from executions.runtime.scans import runs_recover
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.services import lane_claim, lane_recover
from tests.support.helpers import LAMBDA, assert_problem, submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server(
        "row locks between lanes and runs on another major version; lane keys under ICU "
        "collations, which the embedded build lacks"
    ),
]

KEY = "aws-infrastructure"


def _deliver(execution_id: str, stage: str = "plan") -> Outcome:
    """A worker gets this execution's stage message, whoever sent it, and runs that one stage
    (the test decides what happens before the next)."""
    run_id = Execution.objects.values_list("current_run_id", flat=True).get(pk=execution_id)
    return stage_execute(str(run_id), stage, "test@here:0:1", onward=False)


def _started(execution_id: str) -> None:
    """The execution's planning stage had started: it may have changed something."""
    Stage.objects.filter(run__execution_id=execution_id, name="plan").update(
        started_at=timezone.now()
    )


def _fail(execution_id: str) -> None:
    """The owner failed in a later stage (it may have changed something): the lane blocks."""
    execution = Execution.objects.get(pk=execution_id)
    Execution.objects.filter(pk=execution_id).update(status="failed", finished_at=timezone.now())
    Run.objects.filter(pk=execution.current_run_id).update(status="failed")
    Stage.objects.filter(run_id=execution.current_run_id, name="plan").update(
        status="succeeded", started_at=timezone.now()
    )
    Stage.objects.filter(run_id=execution.current_run_id, name="apply").update(
        status="failed", started_at=timezone.now(), error={"code": "unclassified"}
    )


def test_recover_to_another_execution_requeues_a_retried_owner_that_has_not_started(api):
    # given: the owner failed and blocked its lane, was retried (it waits for the recovery),
    # and another execution queues behind it
    owner = submit(api, "test-infra", {"label": "e1"}).json()["id"]
    other = submit(api, "test-infra", {"label": "e2"}).json()["id"]
    _fail(owner)
    assert lane_reconcile(KEY).action is Action.RECOVERY_REQUIRED
    execution_retry(execution_id=owner, caller=cli_caller("ops"))

    # when: an operator hands the lane to the other execution
    recovered = lane_recover(
        key=KEY, expected_owner=owner, actor="ops", reason="e2 first", to=other
    )
    assert recovered.owner == other

    # then: the retried owner waits at the head of the queue, and runs nowhere meanwhile —
    # neither the recovery scan nor any message starts it
    assert Lane.objects.get(key=KEY).owner_id == other
    assert list(LaneWaiter.objects.values_list("execution_id", "priority")) == [(owner, 0)]
    runs_recover()
    assert _deliver(owner) is Outcome.STOP
    assert Execution.objects.get(pk=owner).status == "queued"
    assert _deliver(other) is Outcome.NEXT


def test_recover_to_another_execution_refuses_while_the_owner_runs(api):
    from lanes.services import LaneOwnerActive

    owner = submit(api, "test-infra", {"label": "e1"}).json()["id"]
    other = submit(api, "test-infra", {"label": "e2"}).json()["id"]
    assert _deliver(owner) is Outcome.NEXT  # the owner has started

    with pytest.raises(LaneOwnerActive):
        lane_recover(key=KEY, expected_owner=owner, actor="ops", reason="now", to=other)
    assert Lane.objects.get(key=KEY).owner_id == owner


def test_a_root_queued_behind_its_lane_is_never_claimed(api):
    owner = submit(api, "test-infra", {"label": "e1"}).json()["id"]
    queued = submit(api, "test-infra", {"label": "e2"}).json()["id"]

    assert _deliver(queued) is Outcome.STOP
    assert Execution.objects.get(pk=queued).status == "queued"
    assert _deliver(owner) is Outcome.NEXT


def test_a_child_retried_after_its_root_ended_holds_the_lane_itself(api):
    # given: a root whose child failed; the root was canceled and its lane went to another
    root = submit(api, "test-infra", {"label": "root"}).json()["id"]
    from executions.runtime.children import child_create

    with transaction.atomic():
        child, _ = child_create(root, "test-infra", {"label": "root-cert"})
    Execution.objects.filter(pk=child).update(status="failed")
    _started(root)
    execution_cancel(execution_id=root, caller=cli_caller("ops"))
    assert lane_recover(key=KEY, expected_owner=root, actor="ops", reason="next").owner is None
    other = submit(api, "test-infra", {"label": "other"}).json()["id"]
    assert Lane.objects.get(key=KEY).owner_id == other

    # when: the child is retried
    execution_retry(execution_id=child, caller=cli_caller("ops"))

    # then: it queues for the lane as its own holder, and runs only once it owns it
    retried = Execution.objects.get(pk=child)
    assert retried.lane_key == KEY
    assert LaneWaiter.objects.filter(execution_id=child).exists()
    assert _deliver(child) is Outcome.STOP
    assert Execution.objects.get(pk=child).status == "queued"


def test_a_child_runs_only_while_its_root_owns_the_lane(api):
    root = submit(api, "test-infra", {"label": "root"}).json()["id"]
    from executions.runtime.children import child_create

    with transaction.atomic():
        child, _ = child_create(root, "test-infra", {"label": "root-cert"})
    Lane.objects.filter(key=KEY).update(state=LaneState.RECOVERY_REQUIRED, reason="blocked")

    assert _deliver(child) is Outcome.STOP
    Lane.objects.filter(key=KEY).update(state=LaneState.HELD, reason="")
    assert _deliver(child) is Outcome.NEXT


def test_the_reconciler_decides_on_the_owners_committed_state(api):
    # given: the owner's terminal transition is under way (its row locked, not committed)
    owner = submit(api, "test-infra", {"label": "e1"}).json()["id"]
    queued = submit(api, "test-infra", {"label": "e2"}).json()["id"]
    run_id = Execution.objects.get(pk=owner).current_run_id
    locked, release = threading.Event(), threading.Event()

    def finish_owner() -> None:
        try:
            with transaction.atomic():
                Execution.objects.select_for_update().get(pk=owner)
                Execution.objects.filter(pk=owner).update(status="succeeded")
                locked.set()
                release.wait(10)
                Run.objects.filter(pk=run_id).update(status="succeeded")
        finally:
            connections.close_all()

    finisher = threading.Thread(target=finish_owner)
    finisher.start()
    assert locked.wait(10)
    decisions: list = []

    def reconcile() -> None:
        try:
            decisions.append(lane_reconcile(KEY))
        finally:
            connections.close_all()

    # when: the reconciler looks while the transition commits
    reconciler = threading.Thread(target=reconcile)
    reconciler.start()
    time.sleep(0.3)
    release.set()
    finisher.join(10)
    reconciler.join(10)

    # then: it saw the owner as it committed (succeeded, its run succeeded), not half of it
    assert decisions[0].action is Action.RELEASE
    assert Lane.objects.get(key=KEY).owner_id == queued


def _waiting_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row and row[0] == "Lock")


def test_a_retry_and_the_reconciler_take_their_locks_in_one_order(api):
    # given: an owner that failed in a later stage: the reconciler will block its lane (and
    # write the owner's event) while the owner is being retried (execution, then lane)
    owner = submit(api, "test-infra", {"label": "e1"}).json()["id"]
    _fail(owner)
    errors: list[BaseException] = []
    pids: dict[str, int] = {}  # the reconciler's backend
    retry_holds_execution, go_on = threading.Event(), threading.Event()

    def retry() -> None:
        try:
            with transaction.atomic():
                Execution.objects.select_for_update().get(pk=owner)
                retry_holds_execution.set()
                go_on.wait(10)
                lane_claim(key=KEY, execution_id=owner, urgent=True)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def reconcile() -> None:
        try:
            connection.ensure_connection()
            pids["reconciler"] = connection.connection.info.backend_pid
            lane_reconcile(KEY)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    retrier = threading.Thread(target=retry)
    retrier.start()
    assert retry_holds_execution.wait(10)
    reconciler = threading.Thread(target=reconcile)
    reconciler.start()
    deadline = time.monotonic() + 10
    while "reconciler" not in pids or not _waiting_for_a_lock(pids["reconciler"]):
        assert time.monotonic() < deadline, "the reconciler never waited for the owner's row"
        time.sleep(0.02)

    # when: the retry goes on to the lane while the reconciler waits
    with connection.cursor() as cursor:
        # the reconciler waits for the execution row, holding no lane lock meanwhile
        cursor.execute(
            f"SELECT 1 FROM {Lane._meta.db_table} WHERE key = %s FOR UPDATE NOWAIT",  # noqa: S608
            [KEY],
        )
    go_on.set()
    retrier.join(15)
    reconciler.join(15)

    # then: no deadlock, no error; the lane is decided once
    assert errors == []
    assert Lane.objects.get(key=KEY).state in (LaneState.RECOVERY_REQUIRED, LaneState.HELD)


def test_a_deadline_counts_from_the_first_claim_not_from_acceptance(api):
    # given: an execution with a 1 s deadline that waited longer than that before its claim
    body = submit(api, "test-deadline", {"label": "late"}).json()
    time.sleep(1.2)

    # when: it is claimed at last
    assert _deliver(body["id"]) is Outcome.STOP  # it sleeps (waiting), it did not time out

    execution = Execution.objects.get(pk=body["id"])
    assert execution.status == "waiting", execution.error
    run = Run.objects.get(pk=execution.current_run_id)
    assert run.deadline_at is not None and run.started_at is not None
    assert run.deadline_at - run.started_at == timedelta(seconds=1)


def test_a_retry_into_a_lane_holding_another_version_is_a_conflict(api):
    # given: version 42 failed before it started and let its lane go; 43 holds it now
    first = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    Execution.objects.filter(pk=first).update(status="failed")
    Run.objects.filter(execution_id=first).update(status="failed")
    Stage.objects.filter(run__execution_id=first, name="plan").update(
        status="failed", started_at=timezone.now(), error=NOT_READY
    )
    assert lane_reconcile(LAMBDA_LANE).action is Action.RELEASE
    second = submit(api, "update-lambda-version", {**LAMBDA, "version": "43"}).json()["id"]

    # when: 42 is retried
    response = api.post(f"/api/v1/executions/{first}/retry")

    # then: 409 naming the holder, and nothing changed
    problem = assert_problem(response, 409, "lane_conflict")
    assert problem["execution"] == second
    assert Execution.objects.get(pk=first).status == "failed"
    assert Execution.objects.get(pk=first).runs.count() == 1


LAMBDA_LANE = "lambda:checkout-api:production"
NOT_READY = {
    "code": "readiness_failure",
    "message": "not ready",
    "readiness": {
        "code": "no_fleet",
        "message": "not ready",
        "checks": [{"name": "x", "ok": False}],
    },
}


def test_the_acceptance_answer_shows_a_failed_publish(api):
    from celery import Celery

    from alfred.celery import app

    dead = Celery("alfred-dead-broker", set_as_current=False)
    dead.config_from_object("django.conf:settings", namespace="CELERY")
    dead.conf.update(broker_write_url="redis://127.0.0.1:1/0")
    dead.set_current()
    try:
        response = submit(api, "test-counter", {"label": "unpublished"})
    finally:
        app.set_current()
        dead.close()

    assert response.status_code == 202
    body = response.json()
    assert Execution.objects.get(pk=body["id"]).start_state == "start_failed"
    assert body["start_state"] == "start_failed"
    assert body["start_error"]["code"] == "start_failed"


def test_a_continued_child_shows_and_releases_the_lane_it_takes(api):
    # given: a child that failed after its root had ended
    root = submit(api, "test-infra", {"label": "root"}).json()["id"]
    from executions.runtime.children import child_create

    with transaction.atomic():
        child, _ = child_create(root, "test-infra", {"label": "root-cert"})
    Execution.objects.filter(pk=root).update(status="succeeded")
    Run.objects.filter(execution_id=root).update(status="succeeded")
    Execution.objects.filter(pk=child).update(status="failed")
    assert lane_reconcile(KEY).action is Action.RELEASE

    # when: the same operation is asked for again
    again = submit(api, "test-infra", {"label": "root-cert"}).json()

    # then: the child is continued, holds the lane and says so
    assert again["id"] == child and again["acceptance"]["outcome"] == "continued"
    assert again["lane"]["key"] == KEY and again["lane"]["role"] == "owner"
    assert Lane.objects.get(key=KEY).owner_id == child
    # and: its end releases the lane at once (the terminal transition knows the lane)
    execution_cancel(execution_id=child, caller=cli_caller("ops"))
    assert Lane.objects.get(key=KEY).state == LaneState.FREE


def test_a_canceled_queued_execution_leaves_the_queue_with_the_cancel(api):
    submit(api, "test-infra", {"label": "e1"})
    queued = submit(api, "test-infra", {"label": "e2"}).json()["id"]

    response = api.post(f"/api/v1/executions/{queued}/cancel")

    assert response.status_code == 202
    assert response.json()["status"] == "canceled"
    assert response.json()["lane"] is None or response.json()["lane"]["role"] != "queued"
    assert not LaneWaiter.objects.filter(execution_id=queued).exists()


def test_every_lane_write_moves_updated_at(api):
    owner = submit(api, "test-infra", {"label": "e1"}).json()["id"]
    before = Lane.objects.get(key=KEY).updated_at
    Execution.objects.filter(pk=owner).update(status=ExecutionStatus.SUCCEEDED)
    Run.objects.filter(execution_id=owner).update(status="succeeded")

    assert lane_reconcile(KEY).action is Action.RELEASE

    assert Lane.objects.get(key=KEY).updated_at > before


def test_a_beat_tick_pages_through_every_lane_with_something_to_decide(api):
    # given: seven held lanes; five owners ended without their lane's reconcile (a worker
    # killed after the terminal commit), two are still live
    ended = []
    for i in range(7):
        owner = submit(api, "test-laned", {"label": f"page-{i}", "lane": f"page-{i}"}).json()["id"]
        if i in (1, 3):
            continue
        ended.append(owner)
    Execution.objects.filter(pk__in=ended).update(status=ExecutionStatus.SUCCEEDED)
    Run.objects.filter(execution_id__in=ended).update(status="succeeded")

    # when: the tick visits two lanes a page, each page going on after the last
    from executions.lanes.reconciler import lanes_reconcile

    pages: list[int] = []
    after: str | None = ""
    while after is not None:
        visited, after = lanes_reconcile(batch=2, after=after)
        pages.append(visited)

    # then: every ended owner's lane was reached and released, in pages of at most two; the
    # live owners' lanes were not visited and are still theirs
    assert pages == [2, 2, 1]
    lanes = dict(Lane.objects.filter(key__startswith="page-").values_list("key", "state"))
    assert [lanes.get(f"page-{i}") for i in range(7)] == [
        "free" if i not in (1, 3) else "held" for i in range(7)
    ]
    assert lanes_reconcile() == (0, None)


@pytest.fixture
def lane_keys_collated_as_icu():
    """The lane keys' columns under ICU's root collation, as on a database created en_US or
    ICU (a managed PostgreSQL's default): punctuation before digits before letters, lower
    case before upper, not code-point order. Put back as they were after the test."""
    columns = [(Execution, "lane_key"), (LaneWaiter, "lane"), (Lane, "key")]
    with connection.cursor() as cursor:
        for icu in ("und-x-icu", "unicode"):  # the second, PostgreSQL 16's name for the first
            try:
                with transaction.atomic():
                    cursor.execute(f"SELECT 'a' < 'B' COLLATE \"{icu}\"")
                break
            except (NotSupportedError, ProgrammingError):
                continue
        else:  # the embedded wheel's build: the test runs in .ci/run's services pass
            pytest.skip("this PostgreSQL was built without ICU")

        def collate(collation: str) -> None:
            for model, name in columns:
                field = model._meta.get_field(name)
                cursor.execute(
                    f"ALTER TABLE {model._meta.db_table} ALTER COLUMN {field.column} "
                    f'TYPE {field.db_type(connection)} COLLATE "{collation}"'
                )

        try:
            collate(icu)
            yield
        finally:
            collate("default")


def test_a_tick_reaches_every_lane_whatever_the_databases_collation(api, lane_keys_collated_as_icu):
    # given: two held lanes whose owners ended and two free lanes someone waits on (their
    # release handed to no one), keyed so that ICU's order (_ 0 a B) is not code-point
    # order (0 B _ a): the tick merges the two reads in Python, by code point
    ended = [
        submit(api, "test-laned", {"label": f"held-{lane}", "lane": lane}).json()["id"]
        for lane in ("page-_", "page-B")
    ]
    Execution.objects.filter(pk__in=ended).update(status=ExecutionStatus.SUCCEEDED)
    Run.objects.filter(execution_id__in=ended).update(status="succeeded")
    waiting = {}
    for lane in ("page-0", "page-a"):
        owner = submit(api, "test-laned", {"label": f"owner-{lane}", "lane": lane}).json()["id"]
        waiting[lane] = submit(api, "test-laned", {"label": f"next-{lane}", "lane": lane})
        Execution.objects.filter(pk=owner).update(status=ExecutionStatus.SUCCEEDED)
        Run.objects.filter(execution_id=owner).update(status="succeeded")
        Lane.objects.filter(key=lane).update(state=LaneState.FREE, owner=None)

    # when: one tick, two lanes a page
    from executions.lanes.reconciler import lanes_reconcile

    visited = 0
    after: str | None = ""
    while after is not None:
        page, after = lanes_reconcile(batch=2, after=after)
        visited += page

    # then: it reached all four (a page that went on in one order from a key chosen in the
    # other skipped page-_ and page-a until the next tick): the ended owners' lanes are free,
    # each waiter holds its lane
    assert visited == 4
    lanes = {lane.key: lane for lane in Lane.objects.filter(key__startswith="page-")}
    assert {key: lanes[key].state for key in ("page-_", "page-B") if key in lanes} == {
        key: LaneState.FREE for key in ("page-_", "page-B") if key in lanes
    }
    for lane, answer in waiting.items():
        assert (lanes[lane].state, str(lanes[lane].owner_id)) == (
            LaneState.HELD,
            answer.json()["id"],
        )


def test_a_dead_holder_is_taken_over_at_once_only_in_this_pid_namespace():
    import os
    import socket
    import subprocess
    import sys

    from executions.runtime.holders import holder_process_dead, worker_identity

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    here = worker_identity(f"w@{socket.gethostname()}")
    node, namespace, _ = here.rsplit(":", 2)

    assert holder_process_dead(f"{node}:{namespace}:{gone}")  # this namespace, process gone
    assert not holder_process_dead(here)  # this very process: alive
    assert not holder_process_dead(f"{node}:4026599999:{gone}")  # another namespace: trust it
    assert not holder_process_dead(f"w@elsewhere:{namespace}:{gone}")  # another host: the same
    assert not holder_process_dead(f"{node}:{gone}")  # a holder named the old way: the same
    assert str(os.getpid()) == here.rsplit(":", 1)[1]


def test_recover_to_another_execution_over_the_api_refuses_an_owner_that_started(api, operator_api):
    owner = submit(api, "test-infra", {"label": "e1"}).json()["id"]
    other = submit(api, "test-infra", {"label": "e2"}).json()["id"]
    assert _deliver(owner) is Outcome.NEXT

    response = operator_api.post(
        f"/api/v1/lanes/{KEY}/recover",
        {"expected_owner": owner, "reason": "let e2 go first", "to": other},
        format="json",
    )

    problem = assert_problem(response, 409, "invalid_state")
    assert "cancel it first" in problem["detail"]
    assert Lane.objects.get(key=KEY).owner_id == owner


def test_the_beat_task_releases_a_lane_whose_owner_ended(api):
    from executions.tasks import lanes_reconcile_tick as reconcile

    owner = submit(api, "test-laned", {"label": "task-0", "lane": "task-0"}).json()["id"]
    Execution.objects.filter(pk=owner).update(status=ExecutionStatus.SUCCEEDED)
    Run.objects.filter(execution_id=owner).update(status="succeeded")

    assert reconcile.apply().get() >= 1
    assert Lane.objects.get(key="task-0").state == LaneState.FREE

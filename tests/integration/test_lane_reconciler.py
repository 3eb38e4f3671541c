"""The lane reconciler's decisions (docs/architecture.md, "Lanes"), against real PostgreSQL; a real
worker where the terminal transition itself must hand the lane over."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.db import connections, transaction

from alfred.principals import cli_caller
from executions.lanes.reconciler import Action, lane_reconcile, lanes_release_ready
from executions.models import Execution, OutboxEvent, Run, Stage
from lanes.effects import LaneHandedOver
from lanes.models import Lane, LaneWaiter
from lanes.services import lane_claim, lane_hand_over, lane_lock, lane_recover, try_lane_remove
from tests.conftest import wait_for
from tests.support.factories import ExecutionFactory
from tests.support.helpers import LAMBDA, submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server(
        "the reconciler's pages in code-point order (COLLATE 'C') under a server's default "
        "collation"
    ),
]

KEY = "aws-infrastructure"
READY = {
    "code": "readiness_failure",
    "message": "not ready",
    "readiness": {
        "code": "zone_not_delegated",
        "message": "not ready",
        "checks": [{"name": "ns", "ok": False}],
    },
}


def _owner_and_next(api) -> tuple[str, str]:
    owner = submit(api, "add-domain", {"domain": "one.example"}).json()["id"]
    queued = submit(api, "add-domain", {"domain": "two.example"}).json()["id"]
    return owner, queued


def _finish(
    execution_id: str, status: str, run_status: str, *, started: bool = True, **stages: dict
) -> None:
    """``started``: the owner's planning stage had started (it may have changed something)."""
    from django.utils import timezone

    execution = Execution.objects.get(pk=execution_id)
    Execution.objects.filter(pk=execution_id).update(status=status)
    Run.objects.filter(pk=execution.current_run_id).update(status=run_status)
    if started:
        Stage.objects.filter(run_id=execution.current_run_id, name="plan").update(
            started_at=timezone.now()
        )
    for name, fields in stages.items():
        Stage.objects.filter(run_id=execution.current_run_id, name=name).update(**fields)


def test_a_live_owner_keeps_its_lane(api):
    owner, _ = _owner_and_next(api)

    decision = lane_reconcile(KEY)

    assert decision is not None and decision.action is Action.RETAIN
    assert Lane.objects.get(key=KEY).owner_id == owner


def test_a_succeeded_owner_releases_to_the_next_in_line(api):
    owner, queued = _owner_and_next(api)
    _finish(owner, "succeeded", "succeeded")

    decision = lane_reconcile(KEY)

    assert decision is not None and decision.action is Action.RELEASE
    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id) == ("held", queued)
    assert not LaneWaiter.objects.exists()
    assert OutboxEvent.objects.filter(execution_id=owner, type="lane.released").exists()
    assert OutboxEvent.objects.filter(execution_id=queued, type="lane.acquired").exists()


def test_a_readiness_failure_in_planning_releases(api):
    owner, queued = _owner_and_next(api)
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})

    assert lane_reconcile(KEY).action is Action.RELEASE
    assert Lane.objects.get(key=KEY).owner_id == queued


def test_a_readiness_failure_after_an_earlier_run_went_past_planning_blocks(api):
    # given: the owner's first run failed in its dns stage; its retry was not ready
    from django.utils import timezone

    from executions.controls import execution_retry

    owner, _ = _owner_and_next(api)
    _finish(owner, "failed", "failed", dns={"status": "failed", "started_at": timezone.now()})
    assert lane_reconcile(KEY).action is Action.RECOVERY_REQUIRED
    Lane.objects.filter(key=KEY).update(state="held", reason="")
    execution_retry(execution_id=owner, caller=cli_caller("ops"))
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})

    decision = lane_reconcile(KEY)

    # then: the readiness evidence is about the retry; what the first run changed is not
    # proven undone
    assert decision is not None and decision.action is Action.RECOVERY_REQUIRED
    assert "earlier run" in decision.reason


@pytest.mark.parametrize("status", ["canceled", "failed"])
def test_an_owner_that_ended_before_any_stage_started_releases(api, status):
    # given: an owner canceled (or failed at its claim) before any stage of any run started
    owner, queued = _owner_and_next(api)
    _finish(owner, status, status, started=False)

    decision = lane_reconcile(KEY)

    assert decision is not None and decision.action is Action.RELEASE
    assert Lane.objects.get(key=KEY).owner_id == queued


@pytest.mark.parametrize(
    ("status", "run_status", "stages"),
    [
        ("canceled", "canceled", {}),
        ("failed", "failed", {"plan": {"status": "failed", "error": {"code": "unclassified"}}}),
        (
            "failed",
            "failed",
            {
                "plan": {
                    "status": "failed",
                    "error": {"code": "readiness_failure", "readiness": {"code": "x"}},
                }
            },
        ),  # malformed evidence
        (
            "failed",
            "failed",
            {"plan": {"status": "failed", "error": READY}, "certificate": {"status": "failed"}},
        ),  # a later stage started
        (
            "failed",
            "failed",
            {"plan": {"status": "succeeded"}, "dns": {"status": "failed", "error": READY}},
        ),  # not in planning
        ("succeeded", "failed", {}),  # contradictory
        ("running", "succeeded", {}),  # contradictory
    ],
    ids=[
        "canceled",
        "unclassified",
        "malformed",
        "later-stage",
        "not-planning",
        "succeeded-but-run-failed",
        "running-but-run-done",
    ],
)
def test_anything_else_blocks_the_lane_for_an_operator(api, status, run_status, stages):
    owner, queued = _owner_and_next(api)
    _finish(owner, status, run_status, **stages)

    decision = lane_reconcile(KEY)

    assert decision is not None and decision.action is Action.RECOVERY_REQUIRED
    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id) == ("recovery_required", owner)
    assert LaneWaiter.objects.get().execution_id == queued  # the queue is kept
    assert OutboxEvent.objects.filter(execution_id=owner, type="lane.recovery_required").exists()


def test_a_missing_run_blocks_the_lane(api):
    owner, _ = _owner_and_next(api)
    Execution.objects.filter(pk=owner).update(current_run=None)

    assert lane_reconcile(KEY).action is Action.RECOVERY_REQUIRED


def test_a_lost_handoff_is_completed(api):
    _, queued = _owner_and_next(api)
    Lane.objects.filter(key=KEY).update(state="free", owner=None)

    lane_reconcile(KEY)

    assert Lane.objects.get(key=KEY).owner_id == queued


LAMBDA_KEY = "lambda:checkout-api:production"


def test_a_lane_freed_by_a_readiness_failure_that_never_guarded_anything_is_removed(api):
    # given: the first owner a lane ever had was not ready
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})

    # when
    decision = lane_reconcile(LAMBDA_KEY)

    # then: released, and the lane is gone with the release's events kept
    assert decision is not None and decision.action is Action.RELEASE
    assert decision.changed_nothing
    assert not Lane.objects.filter(key=LAMBDA_KEY).exists()
    assert OutboxEvent.objects.filter(execution_id=owner, type="lane.released").exists()
    assert api.get(f"/api/v1/lanes/{LAMBDA_KEY}").status_code == 404
    # and: the next request for that key takes a new lane
    again = submit(api, "update-lambda-version", {**LAMBDA, "ticket_ids": ["REL-2"]}).json()
    assert again["lane"] == {"key": LAMBDA_KEY, "role": "owner", "state": "held", "position": None}


@pytest.mark.parametrize("status", ["canceled", "failed"])
def test_a_lane_whose_only_owner_ended_before_any_stage_started_is_removed(api, status):
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, status, status, started=False)

    decision = lane_reconcile(LAMBDA_KEY)

    assert decision is not None and decision.action is Action.RELEASE
    assert not Lane.objects.filter(key=LAMBDA_KEY).exists()


def test_a_lane_an_earlier_owner_held_past_planning_stays_when_a_readiness_failure_frees_it(
    api,
):
    # given: the first owner succeeded (the lane guarded real work); the next was not ready
    owner, queued = _owner_and_next(api)
    _finish(owner, "succeeded", "succeeded")
    assert lane_reconcile(KEY).action is Action.RELEASE
    _finish(queued, "failed", "failed", plan={"status": "failed", "error": READY})

    decision = lane_reconcile(KEY)

    # then: free, and still listed
    assert decision is not None and decision.action is Action.RELEASE
    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id, lane.held_past_readiness) == ("free", None, True)


def test_a_readiness_failure_that_hands_the_lane_to_a_queued_execution_keeps_it(api):
    owner, queued = _owner_and_next(api)
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})

    assert lane_reconcile(KEY).action is Action.RELEASE

    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id, lane.held_past_readiness) == ("held", queued, False)


def test_a_lane_an_operator_recovered_stays_listed(api):
    # given: a lane blocked by an unclassified failure, which an operator recovers
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed")
    assert lane_reconcile(LAMBDA_KEY).action is Action.RECOVERY_REQUIRED

    lane_recover(key=LAMBDA_KEY, expected_owner=owner, actor="ops", reason="checked")

    lane = Lane.objects.get(key=LAMBDA_KEY)
    assert (lane.state, lane.held_past_readiness) == ("free", True)


def test_the_api_start_removes_a_lane_it_releases_that_never_guarded_anything(api):
    # given: a lane blocked although its only owner was not ready (a reconciler that saw the
    # failure half-way)
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})
    Lane.objects.filter(key=LAMBDA_KEY).update(state="recovery_required", reason="crash")

    assert lanes_release_ready() == [LAMBDA_KEY]

    assert not Lane.objects.filter(key=LAMBDA_KEY).exists()


def test_removing_a_lane_is_a_compare_and_swap(api):
    # given: a free lane some claim wrote after the hand-over that freed it
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})
    Lane.objects.filter(key=LAMBDA_KEY).update(state="free", owner=None, version=7)

    # when: a remover that saw the lane at version 6 tries
    stale = LaneHandedOver(key=LAMBDA_KEY, version=6, reason="", previous=owner, owner=None)
    with transaction.atomic():
        removed = try_lane_remove(stale)

    # then: nothing goes
    assert removed is False
    assert Lane.objects.filter(key=LAMBDA_KEY, version=7).exists()


def test_a_claim_waiting_on_a_lane_being_removed_takes_a_new_one(api):
    # given: the only owner of a lane was not ready, and another execution of that lane
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})
    claimant: Execution = ExecutionFactory.create(workflow="update-lambda-version", input=LAMBDA)
    locked, claimed = threading.Event(), {}

    def release() -> None:
        try:
            with transaction.atomic(durable=True):
                lane = lane_lock(LAMBDA_KEY)
                assert lane is not None
                change = lane_hand_over(lane, reason="not ready", changed_nothing=True)
                assert try_lane_remove(change)
                locked.set()
                time.sleep(1.0)  # the claim waits on the row meanwhile
        finally:
            connections.close_all()

    def claim() -> None:
        locked.wait(10)
        try:
            with transaction.atomic(durable=True):
                claimed["result"] = lane_claim(
                    key=LAMBDA_KEY, execution_id=claimant.id, token=LAMBDA["version"]
                )
        finally:
            connections.close_all()

    # when: the claim comes while the release removes the lane
    threads = [threading.Thread(target=release), threading.Thread(target=claim)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    # then: once the removal committed, the claim made the lane anew and holds it
    assert claimed["result"].role == "owner"
    lane = Lane.objects.get(key=LAMBDA_KEY)
    assert (lane.state, lane.owner_id, lane.version) == ("held", claimant.id, 1)


def test_the_migration_removes_the_existing_lanes_that_never_guarded_anything(api):
    from django.core.management import call_command
    from django.db.migrations.executor import MigrationExecutor

    # given: lanes as they were before held_past_readiness: one a readiness failure freed in
    # its one tenure, one with a longer history, one held
    held_by = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    try:
        call_command("migrate", "lanes", "0001", verbosity=0)
        old = MigrationExecutor(connections["default"]).loader.project_state(
            ("lanes", "0001_initial")
        )
        OldLane = old.apps.get_model("lanes", "Lane")
        OldLane.objects.create(
            key="lambda:nope-fleet:production",
            state="free",
            version=2,
            reason="exe_01M90TWYZPQA5221M0CMNQSTFM was not ready: fleet_not_found",
        )
        OldLane.objects.create(
            key="lambda:checkout-api:staging",
            state="free",
            version=6,
            reason="exe_01M90TWYZPQA5221M0CMNQSTFM was not ready: version_not_published",
        )
    finally:
        # when
        call_command("migrate", verbosity=0)

    # then
    kept = dict(Lane.objects.values_list("key", "held_past_readiness"))
    assert kept == {"lambda:checkout-api:staging": True, LAMBDA_KEY: True}
    assert Lane.objects.get(key=LAMBDA_KEY).owner_id == held_by


def _concurrently(fn, times: int = 2) -> list:
    barrier = threading.Barrier(times)
    results: list = []

    def call() -> None:
        try:
            barrier.wait(10)
            results.append(fn())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=call) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_two_reconcilers_racing_release_once(api):
    owner, queued = _owner_and_next(api)
    third = submit(api, "add-domain", {"domain": "three.example"}).json()["id"]
    _finish(owner, "succeeded", "succeeded")
    version = Lane.objects.get(key=KEY).version

    _concurrently(lambda: lane_reconcile(KEY))

    lane = Lane.objects.get(key=KEY)
    assert lane.owner_id == queued and lane.version == version + 1
    assert list(LaneWaiter.objects.values_list("execution_id", flat=True)) == [third]
    assert OutboxEvent.objects.filter(type="lane.released").count() == 1


def test_the_api_start_releases_ready_lanes_once_and_leaves_the_others(api):
    owner, queued = _owner_and_next(api)
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})
    Lane.objects.filter(key=KEY).update(state="recovery_required", reason="crash")
    other = submit(
        api, "update-lambda-version", {"target": "t", "environment": "e", "version": "1"}
    ).json()["id"]
    _finish(other, "canceled", "canceled")
    Lane.objects.filter(key="lambda:t:e").update(state="recovery_required", reason="canceled")

    results = _concurrently(lanes_release_ready)

    released = [key for result in results for key in result]
    assert released == [KEY]  # released by exactly one of the two
    assert Lane.objects.get(key=KEY).owner_id == queued
    assert Lane.objects.get(key="lambda:t:e").state == "recovery_required"


@pytest.mark.worker
def test_the_terminal_transition_hands_the_lane_over_at_once(api):
    from tests.conftest import WorkerProcess

    # given: a worker without beat, so no reconciler tick runs: only an owner's own terminal
    # transition can hand the lane over
    worker = WorkerProcess("handover").start(beat=False)
    try:
        first = submit(api, "test-infra", {"label": "i1"}).json()["id"]
        second = submit(api, "test-infra", {"label": "i2"}).json()["id"]

        # when the owner finishes, then the next in line gets the lane and runs
        wait_for(lambda: Execution.objects.filter(pk=second, status="succeeded").exists(), 30)
        # and the last owner's own terminal transition frees the lane, just after its commit
        wait_for(lambda: Lane.objects.get(key=KEY).state == "free", 10)
    finally:
        worker.stop()

    done = OutboxEvent.objects.get(execution_id=first, type="execution.succeeded")
    acquired = OutboxEvent.objects.get(execution_id=second, type="lane.acquired")
    assert acquired.created_at >= done.created_at
    assert acquired.payload["after"] == first


def test_an_operator_recovers_a_blocked_lane_with_an_audit_entry(api, operator_api):
    from executions.models import AuditEntry
    from tests.support.helpers import assert_problem

    owner, queued = _owner_and_next(api)
    _finish(owner, "canceled", "canceled")
    lane_reconcile(KEY)
    url = f"/api/v1/lanes/{KEY}/recover"

    assert_problem(
        api.post(url, {"expected_owner": owner, "reason": "checked"}, format="json"),
        403,
        "permission_denied",
    )
    stale = operator_api.post(
        url, {"expected_owner": "exe_" + "0" * 26, "reason": "checked"}, format="json"
    )
    assert_problem(stale, 409, "invalid_state")
    response = operator_api.post(
        url, {"expected_owner": owner, "reason": "DNS checked by hand"}, format="json"
    )

    assert response.status_code == 202
    assert response.json()["owner"] == queued
    entry = AuditEntry.objects.get(action="lane.recover")
    assert (entry.target_id, entry.reason) == (KEY, "DNS checked by hand")
    assert entry.data == {"owner": owner, "next": queued}


def test_the_lanes_command_lists_shows_and_recovers(api):
    import io

    from django.core.management import call_command

    owner, queued = _owner_and_next(api)
    _finish(owner, "canceled", "canceled")
    lane_reconcile(KEY)
    out = io.StringIO()

    call_command("alfred_lanes", "list", stdout=out)
    call_command("alfred_lanes", "show", KEY, stdout=out)
    call_command(
        "alfred_lanes", "recover", KEY, "--owner", owner, "--reason", "by hand", stdout=out
    )

    text = out.getvalue()
    assert f"{KEY}\trecovery_required\t{owner}\tqueued=1" in text
    assert f"1. {queued}" in text
    assert f"released to {queued}" in text
    assert Lane.objects.get(key=KEY).owner_id == queued


RECONCILER_APP = "alfred-test-reconciler"


def _reconciler_backend() -> tuple[str, str | None] | None:
    """(wait event, transaction id) of the subprocess reconciler's PostgreSQL backend, or
    None once it has gone."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(wait_event, ''), backend_xid::text FROM pg_stat_activity "
            "WHERE application_name = %s",
            [RECONCILER_APP],
        )
        return cursor.fetchone()


def _stalled_in_a_transaction() -> str | None:
    """The reconciler's transaction id while its backend sleeps in the stall."""
    backend = _reconciler_backend()
    return backend[1] if backend and backend[0] == "PgSleep" else None


def test_a_reconciler_killed_mid_transaction_changes_nothing(api):
    import os
    import signal
    import subprocess
    import sys

    from django.db import connection

    from tests.conftest import ROOT, subprocess_database_url

    owner, queued = _owner_and_next(api)
    _finish(owner, "succeeded", "succeeded")
    version = Lane.objects.get(key=KEY).version
    # given: the reconciler's release stalls inside its transaction once it has rewritten the
    # lane and the queue, at its first event (only that process's session stalls)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION alfred_test_stall() RETURNS trigger AS $$ BEGIN "
            f"IF current_setting('application_name') = '{RECONCILER_APP}' THEN "
            "PERFORM pg_sleep(20); END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER alfred_test_stall BEFORE INSERT ON {OutboxEvent._meta.db_table} "
            "FOR EACH ROW EXECUTE FUNCTION alfred_test_stall()"
        )
    try:
        reconciler = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import django; django.setup(); "
                "from executions.lanes.reconciler import lane_reconcile; "
                "lane_reconcile('aws-infrastructure')",
            ],
            cwd=ROOT,
            env={
                **os.environ,
                "DATABASE_URL": subprocess_database_url(),
                "DJANGO_SETTINGS_MODULE": "alfred.settings",
                "PGAPPNAME": RECONCILER_APP,
                # its backend notices at once that its client died, even inside the stall
                "PGOPTIONS": "-c client_connection_check_interval=100",
            },
        )
        try:
            # when: it is SIGKILLed while its backend is inside the transaction: stalled, with a
            # transaction id that has rewritten the lane row (the row's xmax), not committed
            xid = wait_for(_stalled_in_a_transaction, 30)
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT xmax::text FROM {Lane._meta.db_table} WHERE key = %s",  # noqa: S608
                    [KEY],
                )
                assert cursor.fetchone()[0] == xid
        finally:
            reconciler.send_signal(signal.SIGKILL)
            reconciler.wait(10)
        # (its backend ends with it, rolling the transaction back)
        wait_for(lambda: _reconciler_backend() is None, 30)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER alfred_test_stall ON {OutboxEvent._meta.db_table}")
            cursor.execute("DROP FUNCTION alfred_test_stall()")

    # then: the dead reconciler's transaction never committed: owner, version and queue as
    # they were, no event
    lane = Lane.objects.get(key=KEY)
    assert (lane.owner_id, lane.version) == (owner, version)
    assert LaneWaiter.objects.get().execution_id == queued
    assert not OutboxEvent.objects.filter(type="lane.released").exists()
    assert not OutboxEvent.objects.filter(execution_id=queued, type="lane.acquired").exists()

    # and the next reconciler releases the lane once
    assert lane_reconcile(KEY).action is Action.RELEASE
    lane = Lane.objects.get(key=KEY)
    assert (lane.owner_id, lane.version) == (queued, version + 1)
    assert OutboxEvent.objects.filter(type="lane.released").count() == 1


def test_recovering_a_lane_whose_owner_was_retried_gives_it_back(api, operator_api):
    owner, queued = _owner_and_next(api)
    _finish(owner, "canceled", "canceled")
    lane_reconcile(KEY)
    retried = operator_api.post(f"/api/v1/executions/{owner}/retry").json()
    assert retried["lane"]["state"] == "recovery_required"  # recorded, waiting for the lane

    from lanes.services import lane_recover

    recovered = lane_recover(key=KEY, expected_owner=owner, actor="ops", reason="finish it")

    assert (recovered.resumed, recovered.owner) == (owner, owner)
    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id) == ("held", owner)
    assert LaneWaiter.objects.get().execution_id == queued


def test_a_continuation_queues_ahead_of_ordinary_work(api):
    owner, first = _owner_and_next(api)
    second = submit(api, "add-domain", {"domain": "three.example"}).json()["id"]
    earlier = submit(api, "add-domain", {"domain": "earlier.example"}).json()["id"]
    LaneWaiter.objects.filter(execution_id=earlier).delete()  # it ran and failed before
    Execution.objects.filter(pk=earlier).update(status="failed")

    again = submit(api, "add-domain", {"domain": "earlier.example"}).json()

    assert again["acceptance"]["outcome"] == "continued"
    assert again["lane"]["position"] == 1  # ahead: the infrastructure may be half-changed
    order = list(
        LaneWaiter.objects.order_by("priority", "id").values_list("execution_id", flat=True)
    )
    assert order == [earlier, first, second]
    assert Lane.objects.get(key=KEY).owner_id == owner


def test_two_api_processes_starting_together_release_a_ready_lane_once(api):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, subprocess_database_url

    owner, queued = _owner_and_next(api)
    _finish(owner, "failed", "failed", plan={"status": "failed", "error": READY})
    Lane.objects.filter(key=KEY).update(state="recovery_required", reason="crash")
    version = Lane.objects.get(key=KEY).version
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "alfred.settings",
    }

    # when: uvicorn starts two worker processes (each runs the application's start, its
    # lifespan, before it serves)
    import signal
    import tempfile

    from alfred.devstack import free_ports

    log = tempfile.NamedTemporaryFile(prefix="alfred-web-", suffix=".log")  # noqa: SIM115
    web = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "alfred.asgi:application", "--workers", "2"),
            *("--port", str(free_ports()), "--lifespan", "on"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # both processes have started serving: each has run the application's start
        wait_for(
            lambda: Path(log.name).read_text().count("Application startup complete") == 2,
            timeout=60,
            interval=0.2,
        )
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(30)
    output = Path(log.name).read_text()
    assert "releasing ready lanes at start failed" not in output, output

    lane = Lane.objects.get(key=KEY)
    assert (lane.state, lane.owner_id, lane.version) == ("held", queued, version + 1)
    assert OutboxEvent.objects.filter(type="lane.released").count() == 1


def test_an_execution_canceled_while_queued_is_skipped(api):
    owner, first = _owner_and_next(api)
    second = submit(api, "add-domain", {"domain": "three.example"}).json()["id"]
    api.post(f"/api/v1/executions/{first}/cancel")
    _finish(owner, "succeeded", "succeeded")

    lane_reconcile(KEY)

    assert Lane.objects.get(key=KEY).owner_id == second
    assert not LaneWaiter.objects.exists()


def test_a_read_only_instance_does_not_reconcile(api, settings):
    from executions.tasks import lanes_reconcile_tick as reconcile

    owner, queued = _owner_and_next(api)
    _finish(owner, "succeeded", "succeeded")

    settings.ALFRED_READ_ONLY = True
    assert reconcile.apply().get() == 0
    assert Lane.objects.get(key=KEY).owner_id == owner

    settings.ALFRED_READ_ONLY = False
    assert reconcile.apply().get() == 1
    assert Lane.objects.get(key=KEY).owner_id == queued

"""Retention (executions.retention, ``manage.py alfred_prune``): what an ended execution keeps
and loses, what is never touched, the races with a retry and a redelivery (real concurrent
transactions), rollback refused after a prune, and the command end to end with --archive.

Executions are accepted and run in this process (``stage_execute``), then aged by moving
their ``finished_at`` back past the retention period."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections
from django.db.models import F

from alfred.principals import cli_caller
from delivery.receivers import notification_receive
from delivery.relay import deliveries_redeliver
from executions import controls, retention
from executions.acceptance import execution_accept
from executions.controls import HistoryPruned, execution_cancel, execution_retry
from executions.history import history_json
from executions.models import (
    AuditEntry,
    DeliveryKey,
    DeliveryStatus,
    Execution,
    ExecutionStatus,
    InboundNotification,
    OutboxEvent,
    Run,
    Stage,
    StepReceipt,
    Timer,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from executions.retention import (
    HistoryArchive,
    executions_prune,
    notifications_prune,
    prunable_roots,
)
from executions.runtime.runner import stage_execute
from lanes.models import Lane, LaneState, LaneWaiter
from tests.conftest import ROOT, subprocess_database_url
from tests.support.factories import ExecutionFactory, RunFactory
from tests.support.helpers import assert_problem, submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server("retention's batched deletes on another major version"),
]

RETENTION = timedelta(days=90)
WORKER = "test@here:0:1"


def _ran(workflow: str, body: dict[str, Any], key: str | None = None) -> Execution:
    """``body`` accepted for ``workflow`` and run here to its end."""
    execution = execution_accept(
        workflow_name=workflow,
        body=body,
        idempotency_key=key or uuid.uuid4().hex,
        caller=cli_caller("tester"),
    ).execution
    run = Run.objects.get(pk=execution.current_run_id)
    stage_execute(run.id, run.stages.order_by("position").first().name, WORKER)
    execution.refresh_from_db()
    assert execution.terminal, execution.status
    return execution


def _aged(*executions: Execution, days: int = 100) -> None:
    Execution.objects.filter(pk__in=[e.pk for e in executions]).update(
        finished_at=F("finished_at") - timedelta(days=days)
    )


def _history(execution_id: str) -> dict[str, int]:
    runs = Run.objects.filter(execution_id=execution_id)
    return {
        "events": OutboxEvent.objects.filter(execution_id=execution_id).count(),
        "deliveries": WebhookDelivery.objects.filter(event__execution_id=execution_id).count(),
        "attempts": WebhookAttempt.objects.filter(
            delivery__event__execution_id=execution_id
        ).count(),
        "receipts": StepReceipt.objects.filter(run__in=runs).count(),
        "timers": Timer.objects.filter(run__in=runs).count(),
    }


def _prune(**kwargs: Any) -> retention.PruneReport:
    return executions_prune(older_than=RETENTION, actor="cli:tester", **kwargs)


def _pruned(execution_id: str) -> bool:
    return Execution.objects.get(pk=execution_id).pruned_at is not None


def _made(**fields: Any) -> Execution:
    return cast(Execution, ExecutionFactory(**fields))


def _old_terminal(**fields: Any) -> Execution:
    """An execution made by the factory, ended long ago, with a run and an event."""
    fields.setdefault("status", ExecutionStatus.SUCCEEDED)
    execution = _made(**fields)
    run = RunFactory(execution=execution, status="succeeded")
    Execution.objects.filter(pk=execution.pk).update(current_run=run, last_sequence=1)
    OutboxEvent.objects.create(
        execution=execution, sequence=1, key=f"{execution.pk}:x", type="execution.succeeded"
    )
    _ended_long_ago(execution)
    return execution


def _ended_long_ago(execution: Execution) -> None:
    from django.db.models.functions import Now

    Execution.objects.filter(pk=execution.pk).update(finished_at=Now() - timedelta(days=100))


def test_an_old_execution_loses_its_history_and_keeps_its_identity(api):
    # given: an execution through the API, run to success, ended long ago
    body = {"label": f"kept-{uuid.uuid4().hex[:6]}", "steps": 3}
    accepted = submit(api, "test-counter", body, key="prune-me")
    assert accepted.status_code == 202
    execution = Execution.objects.get(pk=accepted.json()["id"])
    run = Run.objects.get(pk=execution.current_run_id)
    stage_execute(run.id, "plan", WORKER)
    before = _history(execution.id)
    assert before["events"] >= 3 and before["receipts"] == 3
    _aged(execution)

    # when
    report = _prune()

    # then: its events and receipts are gone, the execution, its key, runs and stages stay
    assert report.counts["executions"] == 1
    assert report.counts["events"] == before["events"]
    assert report.counts["receipts"] == 3
    assert _history(execution.id) == dict.fromkeys(before, 0)
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.SUCCEEDED and execution.pruned_at is not None
    assert DeliveryKey.objects.filter(execution=execution).count() == 1
    assert Stage.objects.filter(run=run, status="succeeded").count() == 3
    audit = AuditEntry.objects.get(target_id=execution.id, action="execution.pruned")
    assert audit.actor == "cli:tester" and audit.data == {"root": execution.id, "archive": None}
    # and: the resource still answers, says so, and its events are an empty page
    resource = api.get(f"/api/v1/executions/{execution.id}").json()
    assert resource["status"] == "succeeded" and resource["pruned_at"] is not None
    assert resource["stages"][2]["output"] == {"verified": True}
    assert api.get(f"/api/v1/executions/{execution.id}/events").json()["events"] == []
    # and: the same key and body still get the same execution (docs/contract.md, "Asking for an
    # execution")
    replayed = submit(api, "test-counter", body, key="prune-me")
    assert replayed.json()["id"] == execution.id
    assert replayed["Idempotent-Replayed"] == "true"


def test_recent_active_and_pruned_executions_are_not_touched():
    # given: one ended yesterday, one still queued from long ago, one pruned already
    recent = _ran("test-counter", {"label": f"recent-{uuid.uuid4().hex[:6]}"})
    _aged(recent, days=1)
    active = _made(status=ExecutionStatus.QUEUED)
    RunFactory(execution=active)
    Execution.objects.filter(pk=active.pk).update(created_at=F("created_at") - timedelta(days=200))
    done = _ran("test-counter", {"label": f"done-{uuid.uuid4().hex[:6]}"})
    _aged(done)
    assert _prune().counts["executions"] == 1
    recent_history = _history(recent.id)

    # when
    report = _prune()

    # then
    assert report.counts["executions"] == 0 and report.batches == 0
    assert _history(recent.id) == recent_history and not _pruned(recent.id)
    assert not _pruned(active.id)


def test_a_lane_owner_and_a_queued_execution_are_left_alone():
    # given: an old failed execution that owns a lane blocked for an operator
    key = f"lambda:prune-{uuid.uuid4().hex[:6]}:production"
    owner = _old_terminal(status=ExecutionStatus.FAILED)
    Lane.objects.create(key=key, state=LaneState.RECOVERY_REQUIRED, owner=owner)
    # and: an old terminal execution left in that lane's queue
    queued = _old_terminal()
    LaneWaiter.objects.create(lane_id=key, execution=queued)
    # and: one that merely ran on that lane once
    former = _old_terminal(lane_key=key)

    # when
    report = _prune()

    # then
    assert report.counts["executions"] == 1 and _pruned(former.id)
    assert report.skipped == {"lane_owner": 1, "lane_queued": 1}
    for kept in (owner, queued):
        assert OutboxEvent.objects.filter(execution=kept).exists() and not _pruned(kept.id)


def test_children_go_with_their_root_and_only_with_it():
    # given: an old root whose child is still running, and one whose child ended
    busy_root = _old_terminal()
    busy_child = _made(parent=busy_root, status=ExecutionStatus.RUNNING)
    done_root = _old_terminal()
    done_child = _old_terminal(parent=done_root)
    # and: an old ended child of a root that is still active
    active_root = _made(status=ExecutionStatus.WAITING)
    orphan = _old_terminal(parent=active_root)

    # when
    report = _prune()

    # then
    assert report.skipped == {"child_active": 1}
    assert _pruned(done_root.id) and _pruned(done_child.id)
    assert not OutboxEvent.objects.filter(execution__in=[done_root, done_child]).exists()
    assert not _pruned(busy_root.id) and not _pruned(busy_child.id)
    assert OutboxEvent.objects.filter(execution=busy_root).exists()
    assert not _pruned(orphan.id) and OutboxEvent.objects.filter(execution=orphan).exists()
    assert report.counts["executions"] == 2


def _endpoint(active: bool = True) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        url="https://hooks.example.com/alfred", secret="whsec_" + "A" * 44, active=active
    )


def _delivery(event: OutboxEvent, endpoint: WebhookEndpoint, status: str) -> WebhookDelivery:
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event=event, status=status, attempts=1
    )
    WebhookAttempt.objects.create(delivery=delivery, number=1, status_code=500, duration_ms=3)
    return delivery


def test_deliveries_and_attempts_go_but_one_still_owed_holds_its_execution():
    # given: deliveries sent (or given up on), one owed to an active endpoint, one owed to a
    # disabled endpoint
    active, disabled = _endpoint(), _endpoint(active=False)
    sent = _old_terminal()
    _delivery(sent.events.get(), active, DeliveryStatus.DELIVERED)
    _delivery(sent.events.get(), disabled, DeliveryStatus.FAILED)
    owed = _old_terminal()
    _delivery(owed.events.get(), active, DeliveryStatus.PENDING)
    stranded = _old_terminal()
    _delivery(stranded.events.get(), disabled, DeliveryStatus.PENDING)

    # when
    report = _prune()

    # then
    assert report.skipped == {"delivery_owed": 1}
    assert _pruned(sent.id) and _pruned(stranded.id) and not _pruned(owed.id)
    assert report.counts["deliveries"] == 3 and report.counts["attempts"] == 3
    assert _history(owed.id)["deliveries"] == 1
    assert WebhookEndpoint.objects.count() == 2


def test_a_pruned_execution_cannot_be_rolled_back(operator_api):
    # given: a succeeded execution with a mutation receipt, pruned
    execution = _ran("test-mutating", {"label": f"mut-{uuid.uuid4().hex[:6]}"})
    assert StepReceipt.objects.filter(run__execution=execution, mutation__isnull=False).exists()
    _aged(execution)
    _prune()
    runs = Run.objects.filter(execution=execution).count()

    # when
    refused = operator_api.post(
        f"/api/v1/executions/{execution.id}/rollback", {"reason": "undo"}, format="json"
    )

    # then: refused with a code of its own, nothing started
    problem = assert_problem(refused, 409, "history_pruned")
    assert problem["execution"] == execution.id and problem["pruned_at"]
    assert "pruned" in problem["detail"]
    assert Run.objects.filter(execution=execution).count() == runs
    resource = operator_api.get(f"/api/v1/executions/{execution.id}").json()
    assert "rollback" not in resource["links"]
    with pytest.raises(HistoryPruned):
        controls.execution_rollback(
            execution_id=execution.id, caller=cli_caller("ops"), reason="again"
        )


def _canceled_long_ago() -> Execution:
    accepted = execution_accept(
        workflow_name="test-counter",
        body={"label": f"race-{uuid.uuid4().hex[:6]}"},
        idempotency_key=uuid.uuid4().hex,
        caller=cli_caller("tester"),
    ).execution
    assert execution_cancel(execution_id=accepted.id, caller=cli_caller("ops")).immediate
    _ended_long_ago(accepted)
    return Execution.objects.get(pk=accepted.id)


def _on_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

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


def test_an_execution_retried_after_it_was_chosen_is_left_alone():
    # given: a canceled execution chosen for pruning
    execution = _canceled_long_ago()
    chosen = [execution_id for _, execution_id in prunable_roots(RETENTION, limit=10)]
    assert chosen == [execution.id]
    events = _history(execution.id)["events"]

    # when: another transaction retries it and commits, then the batch runs
    thread, outcome = _on_thread(
        lambda: execution_retry(execution_id=execution.id, caller=cli_caller("ops"))
    )
    thread.join(30)
    assert isinstance(outcome[0], Execution)
    report = retention.executions_prune_batch(chosen, older_than=RETENTION, actor="cli:tester")

    # then: the check under the lock saw it queued: nothing of it was touched
    assert report.counts["executions"] == 0 and report.skipped == {"changed_or_busy": 1}
    assert not _pruned(execution.id)
    assert Execution.objects.get(pk=execution.id).status == ExecutionStatus.QUEUED
    assert _history(execution.id)["events"] == events + 1  # execution.retried


def test_an_execution_being_retried_is_skipped_not_waited_for(monkeypatch):
    # given: a retry of an old canceled execution, inside its transaction (row lock held)
    execution = _canceled_long_ago()
    inside, go = threading.Event(), threading.Event()
    audit = controls.audit_record

    def held(*args: Any, **kwargs: Any) -> None:
        audit(*args, **kwargs)
        inside.set()
        assert go.wait(30)

    monkeypatch.setattr(controls, "audit_record", held)
    thread, outcome = _on_thread(
        lambda: execution_retry(execution_id=execution.id, caller=cli_caller("ops"))
    )
    assert inside.wait(30)

    # when: a prune runs meanwhile
    try:
        report = _prune()
    finally:
        go.set()
        thread.join(30)

    # then: it did not wait, changed nothing; the retry committed
    assert report.counts["executions"] == 0 and report.skipped == {"changed_or_busy": 1}
    assert isinstance(outcome[0], Execution)
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.QUEUED and execution.pruned_at is None
    assert OutboxEvent.objects.filter(execution=execution, type="execution.retried").exists()


def test_a_redelivery_between_the_check_and_the_delete_undoes_the_batch(tmp_path):
    # given: an old execution whose one delivery failed for good
    endpoint = _endpoint()
    execution = _old_terminal()
    delivery = _delivery(execution.events.get(), endpoint, DeliveryStatus.FAILED)

    def render(target: Execution) -> str:
        # the archive is written between the checks and the delete: an operator redelivers
        # the failed delivery then, in a transaction of their own that commits
        thread, outcome = _on_thread(
            lambda: deliveries_redeliver(
                actor="cli:ops", actor_name="ops", reason="again", delivery_ids=[delivery.pk]
            )
        )
        thread.join(30)
        assert outcome == [1]
        return history_json(target)

    # when
    report = _prune(archive=HistoryArchive(tmp_path, render))

    # then: the delivery owed again kept its event; the batch was undone whole
    assert report.counts["executions"] == 0 and report.skipped == {"delivery_owed": 1}
    assert not _pruned(execution.id)
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == DeliveryStatus.PENDING
    assert _history(execution.id) == {
        "events": 1,
        "deliveries": 1,
        "attempts": 1,
        "receipts": 0,
        "timers": 0,
    }
    assert (tmp_path / f"{execution.id}.json").exists()  # archives of rows still there


def test_a_pass_with_a_time_budget_says_where_to_go_on(monkeypatch):
    # given: three old executions, batches of one
    executions = [_old_terminal() for _ in range(3)]

    # when: the budget is spent after the first batch
    first = _prune(batch=1, budget_seconds=0)
    rest = _prune(batch=1, after=first.after)

    # then
    assert first.counts["executions"] == 1 and first.after is not None
    assert rest.counts["executions"] == 2 and rest.after is None
    assert all(_pruned(e.id) for e in executions)


def test_beat_prunes_only_when_asked_and_hands_on_what_is_left(monkeypatch):
    from django_celery_beat.models import PeriodicTask
    from django_celery_beat.schedulers import DatabaseScheduler

    from alfred.celery import app
    from executions import tasks

    # given: the schedule as settings make it by default
    entry = settings.CELERY_BEAT_SCHEDULE["executions-prune"]
    assert entry["enabled"] is False and entry["options"]["queue"] == "scanners"
    DatabaseScheduler.Entry.from_entry("executions-prune", app=app, **entry)
    assert PeriodicTask.objects.get(name="executions-prune").enabled is False

    # and: two old executions, a task that stops after one batch of one
    executions = [_old_terminal() for _ in range(2)]
    monkeypatch.setattr(tasks, "PRUNE_BUDGET_SECONDS", 0)
    monkeypatch.setattr(retention, "BATCH", 1)
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(tasks.executions_prune, "apply_async", lambda **kwargs: sent.append(kwargs))

    # when: the first task, then each it sends on
    pruned = [tasks.executions_prune.run()]
    while len(sent) == len(pruned):
        assert sent[-1]["queue"] == "scanners"
        pruned.append(tasks.executions_prune.run(**sent[-1]["kwargs"]))

    # then: each went on from where the one before stopped; the last found nothing left
    assert pruned == [1, 1, 0]
    assert all(_pruned(e.id) for e in executions)
    audit = AuditEntry.objects.filter(action="execution.pruned")
    assert set(audit.values_list("actor", flat=True)) == {"alfred:retention"}


def test_dry_run_counts_and_deletes_nothing():
    execution = _ran("test-counter", {"label": f"dry-{uuid.uuid4().hex[:6]}"})
    _aged(execution)
    events = _history(execution.id)["events"]
    out = io.StringIO()

    call_command("alfred_prune", "--dry-run", stdout=out)

    assert out.getvalue().startswith(f"1 executions ended more than 90d ago hold {events} events")
    assert not _pruned(execution.id) and _history(execution.id)["events"] == events
    with pytest.raises(CommandError, match="--older-than"):
        call_command("alfred_prune", "--older-than", "90 days")

    # and: 0s is a period too (everything that has ended), not the default
    just_ended = _ran("test-counter", {"label": f"dry-{uuid.uuid4().hex[:6]}"})
    out = io.StringIO()
    call_command("alfred_prune", "--dry-run", "--older-than", "0s", stdout=out)
    assert out.getvalue().startswith("2 executions ended more than 0s ago"), out.getvalue()
    assert not _pruned(just_ended.id)


def test_a_bad_period_on_the_command_line_is_a_usage_error_not_a_traceback():
    done = subprocess.run(
        [sys.executable, "manage.py", "alfred_prune", "--dry-run", "--older-than", "90x"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "alfred.settings_test"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    assert "argument --older-than: '90x': a number and a unit" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_command_archives_each_history_then_prunes(tmp_path):
    # given: a root with a child, and another root
    root = _ran("test-counter", {"label": f"arch-{uuid.uuid4().hex[:6]}", "steps": 2})
    other = _ran("test-mutating", {"label": f"arch-{uuid.uuid4().hex[:6]}"})
    child = _old_terminal(parent=root)
    _aged(root, other)
    expected = {
        e.id: json.loads(history_json(Execution.objects.get(pk=e.id))) for e in (root, other, child)
    }
    archive = tmp_path / "archive"

    # when: the command, in a process of its own
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "alfred.settings",
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    }
    done = subprocess.run(
        [
            *(sys.executable, "manage.py", "alfred_prune", "--older-than", "90d"),
            *("--archive", str(archive), "--actor", "alice"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # then: one file per execution, the admin's history document as it was before
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pruned 3 executions"), done.stdout
    files = sorted(p.name for p in archive.iterdir())
    assert files == sorted(f"{e}.json" for e in expected)
    for execution_id, document in expected.items():
        written = json.loads((archive / f"{execution_id}.json").read_text())
        assert written == document
        assert not OutboxEvent.objects.filter(execution_id=execution_id).exists()
    assert len(expected[root.id]["events"]) >= 3 and expected[root.id]["runs"][0]["receipts"]
    assert AuditEntry.objects.get(target_id=other.id, action="execution.pruned").data == {
        "root": other.id,
        "archive": str(archive),
    }

    # when: an execution pruned once is retried, ends and is pruned again
    again = _canceled_long_ago()
    call_command("alfred_prune", "--archive", str(archive), stdout=io.StringIO())
    execution_retry(execution_id=again.id, caller=cli_caller("ops"))
    execution_cancel(execution_id=again.id, caller=cli_caller("ops"))
    _ended_long_ago(again)  # (and pruned longer ago still: it ended again since)
    Execution.objects.filter(pk=again.pk).update(pruned_at=F("pruned_at") - timedelta(days=200))
    out = io.StringIO()
    call_command("alfred_prune", "--archive", str(archive), stdout=out)

    # then: the first archive is kept, the second written beside it
    assert out.getvalue().startswith("pruned 1 executions")
    first = json.loads((archive / f"{again.id}.json").read_text())
    second = json.loads((archive / f"{again.id}.2.json").read_text())
    assert first["events"][0]["type"] == "execution.accepted"
    assert second["events"][0]["type"] == "execution.retried"
    assert not [p for p in archive.iterdir() if p.name.startswith(".")]


def _received(*, days_ago: float) -> InboundNotification:
    record = InboundNotification.objects.create(
        source="github", delivery_id=f"d-{uuid.uuid4()}", topics=["github:platform/x"]
    )
    InboundNotification.objects.filter(pk=record.pk).update(
        received_at=F("received_at") - timedelta(days=days_ago)
    )
    return record


def test_old_inbound_notifications_go_and_one_resent_after_is_recorded_again():
    # given: five notifications received 100 days ago, one yesterday
    old = [_received(days_ago=100) for _ in range(5)]
    recent = _received(days_ago=1)
    dry = io.StringIO()
    call_command("alfred_prune", "--dry-run", stdout=dry)
    assert "and 5 inbound notifications were received before then" in dry.getvalue()
    assert InboundNotification.objects.count() == 6

    # when: a pass with its time spent after the first statement, then one with time to spare
    spent = notifications_prune(RETENTION, batch=2, deadline=0)
    out = io.StringIO()
    call_command("alfred_prune", stdout=out)

    # then: two went in the first, the rest of the old ones in the second; yesterday's stays
    assert spent == 2
    assert out.getvalue().rstrip().endswith("and 3 inbound notifications")
    assert list(InboundNotification.objects.values_list("pk", flat=True)) == [recent.pk]

    # and: the same delivery sent again is recorded again, not taken for a duplicate
    again = notification_receive("github", old[0].delivery_id, ["github:platform/x"])
    assert again.duplicate is False
    assert notification_receive("github", old[0].delivery_id, []).duplicate is True


def test_a_pass_that_runs_out_of_time_on_executions_leaves_the_notifications_for_the_next():
    # given: two old executions and an old notification
    executions = [_old_terminal() for _ in range(2)]
    _received(days_ago=100)

    # when: the budget is spent after the first batch, then the pass goes on
    first = _prune(batch=1, budget_seconds=0)
    rest = _prune(batch=1, after=first.after)

    # then: the notification went with the pass that reached the end
    assert (first.counts["notifications"], rest.counts["notifications"]) == (0, 1)
    assert all(_pruned(e.id) for e in executions)
    assert not InboundNotification.objects.exists()

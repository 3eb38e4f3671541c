"""Durable waits, hooks, children and cancel, with a real worker."""

from __future__ import annotations

import itertools

import pytest

from executions.models import Execution, Hook, HookSignal
from executions.runtime.hooks import hook_signal
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_engine import event_types, finished
from tests.support.engine_workflows import effects
from tests.support.helpers import assert_problem, submit

pytestmark = [
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.server(
        "the timer scan's SKIP LOCKED claims and durable sleeps on another major version"
    ),
]


@pytest.fixture
def worker(shared_worker: WorkerProcess) -> WorkerProcess:
    """One worker for the module: every test here ends idle (its executions terminal, or
    waiting on a timer or a hook)."""
    return shared_worker


def status_becomes(execution_id: str, status: str, timeout: float = 30) -> None:
    wait_for(
        lambda: Execution.objects.filter(pk=execution_id, status=status).exists(),
        timeout=timeout,
    )


def test_a_sleep_holds_no_worker_and_resumes_when_due(api, worker):
    sleeper = submit(api, "test-waits", {"label": "nap", "mode": "sleep", "seconds": 6}).json()
    status_becomes(sleeper["id"], "waiting")

    # the only worker process is free meanwhile
    quick = submit(api, "test-counter", {"label": "meanwhile"}).json()
    assert finished(quick["id"], worker).status == "succeeded"
    assert Execution.objects.get(pk=sleeper["id"]).status == "waiting"

    assert finished(sleeper["id"], worker).status == "succeeded"
    assert effects("nap", "after") == 1


def test_a_hook_resumes_once_and_a_resent_signal_is_a_no_op(api, worker):
    body = submit(api, "test-waits", {"label": "h1", "mode": "operator"}).json()
    status_becomes(body["id"], "paused")

    first = hook_signal(token="go-h1", idempotency_key="sig-1", payload={"ok": 1}, principal="ops")
    again = hook_signal(token="go-h1", idempotency_key="sig-1", payload={"ok": 1}, principal="ops")

    execution = finished(body["id"], worker)
    assert (first.accepted, again.accepted) == (True, False)
    assert execution.status == "succeeded"
    assert execution.result == {"signal": {"ok": 1}, "effect": 1}
    assert HookSignal.objects.filter(hook__token="go-h1").count() == 1
    assert event_types(body["id"]).count("hook.signalled") == 1


def test_cancel_of_a_waiting_run_is_immediate(api, worker):
    body = submit(api, "test-waits", {"label": "c1", "mode": "hook"}).json()
    status_becomes(body["id"], "waiting")

    response = api.post(
        f"/api/v1/executions/{body['id']}/cancel", {"reason": "not needed"}, format="json"
    )

    assert response.status_code == 202
    assert response.json()["status"] == "canceled"
    assert Hook.objects.get(token="go-c1").status == "canceled"
    assert_problem(api.post(f"/api/v1/executions/{body['id']}/cancel"), 409, "invalid_state")


def test_cancel_of_a_running_run_stops_at_the_next_step_boundary(api, worker):
    body = submit(api, "test-slow", {"label": "s1", "steps": 20, "step_seconds": 0.3}).json()
    wait_for(lambda: effects("s1", "slow-1") == 1, timeout=30)

    response = api.post(f"/api/v1/executions/{body['id']}/cancel")
    # (the cancel has committed: steps done by now ran before it, whatever the machine's load)
    done_at_cancel = sum(effects("s1", f"slow-{i}") for i in range(20))

    assert response.status_code == 202
    assert response.json()["status"] == "running"  # the running step finishes first
    execution = finished(body["id"], worker)
    assert execution.status == "canceled"
    # then: at most the step in flight when the cancel committed ran after it, each once,
    # and each with its receipt
    done = sum(effects("s1", f"slow-{i}") for i in range(20))
    assert done_at_cancel <= done <= done_at_cancel + 1
    assert all(effects("s1", f"slow-{i}") <= 1 for i in range(20))
    assert succeeded_receipts(execution.id) == done


def succeeded_receipts(execution_id: str) -> int:
    from executions.models import StepReceipt

    return StepReceipt.objects.filter(run__execution_id=execution_id, status="succeeded").count()


def test_canceling_a_parent_cancels_its_children(api, worker):
    parent = submit(api, "test-parent", {"label": "p1"}).json()
    wait_for(
        lambda: Execution.objects.filter(parent_id=parent["id"], status="waiting").exists(),
        timeout=30,
    )
    child = Execution.objects.get(parent_id=parent["id"])

    api.post(f"/api/v1/executions/{parent['id']}/cancel")

    child.refresh_from_db()
    assert Execution.objects.get(pk=parent["id"]).status == "canceled"
    assert child.status == "canceled"
    assert child.error["code"] == "parent_finished"


def test_a_parent_resumes_when_its_child_finishes(api, worker):
    parent = submit(api, "test-parent", {"label": "p2"}).json()
    wait_for(
        lambda: Execution.objects.filter(parent_id=parent["id"], status="waiting").exists(),
        timeout=30,
    )
    assert Execution.objects.get(pk=parent["id"]).status == "waiting"

    hook_signal(token="go-p2-child", idempotency_key="k", payload={"child": "ok"}, principal="ops")

    execution = finished(parent["id"], worker)
    child = Execution.objects.get(parent_id=parent["id"])
    assert execution.status == "succeeded"
    assert execution.result["id"] == child.id
    assert execution.result["status"] == "succeeded"
    assert child.lane_key is None  # no lane slot of its own


def test_retry_of_a_failed_run_is_a_new_run_and_a_rolled_back_one_is_refused(api, worker):
    body = submit(api, "test-flaky", {"label": "r1", "fatal": True}).json()
    assert finished(body["id"], worker).status == "failed"

    response = api.post(f"/api/v1/executions/{body['id']}/retry")

    assert response.status_code == 202
    assert response.json()["current_run"]["kind"] == "retry"
    assert response.json()["current_run"]["number"] == 2
    assert finished(body["id"], worker).status == "failed"  # still refused, but re-run
    assert effects("r1", "attempts") == 2
    Execution.objects.filter(pk=body["id"]).update(status="rolled_back")
    assert_problem(api.post(f"/api/v1/executions/{body['id']}/retry"), 409, "not_retryable")


def test_a_child_ended_mid_stage_by_its_parent_keeps_the_receipt_of_its_step(api, worker):
    from executions.models import OutboxEvent

    parent = submit(api, "test-parent", {"label": "pk", "slow_child": True}).json()
    wait_for(lambda: effects("pk-child", "slow-1") == 1, timeout=30)
    child = Execution.objects.get(parent_id=parent["id"])

    # when: the parent is canceled while the child's worker is inside a step
    api.post(f"/api/v1/executions/{parent['id']}/cancel")
    # (the cancel has committed: steps done by now ran before it, whatever the machine's load)
    done_at_cancel = sum(effects("pk-child", f"slow-{i}") for i in range(20))

    # then: the child is asked to stop, and stops at its next step boundary, canceled
    assert Execution.objects.get(pk=parent["id"]).status == "canceled"
    status_becomes(child.id, "canceled")
    # (the only worker process runs one task at a time: once work asked for after the cancel
    # has finished, the child's stage task has returned)
    marker = submit(api, "test-counter", {"label": "pk-after"}).json()
    assert finished(marker["id"], worker).status == "succeeded"
    child.refresh_from_db()
    assert child.error["code"] in ("parent_finished", "canceled")
    last = OutboxEvent.objects.filter(execution_id=child.id).order_by("-sequence").first()
    assert last is not None and last.type == "execution.canceled"
    # and: the step in flight finished with its receipt (a mutation it made can be undone);
    # at most that one step ran after the cancel committed
    done = sum(effects("pk-child", f"slow-{i}") for i in range(20))
    assert done <= done_at_cancel + 1
    assert succeeded_receipts(child.id) == done


def test_a_canceled_operator_hook_waits_again_after_a_retry(api, worker):
    body = submit(api, "test-waits", {"label": "rh", "mode": "operator"}).json()
    status_becomes(body["id"], "paused")
    api.post(f"/api/v1/executions/{body['id']}/cancel")

    api.post(f"/api/v1/executions/{body['id']}/retry")
    status_becomes(body["id"], "paused")
    hook_signal(token="go-rh", idempotency_key="after-retry", payload={"ok": 2}, principal="ops")

    execution = finished(body["id"], worker)
    assert execution.status == "succeeded"
    assert execution.result["signal"] == {"ok": 2}


def test_retries_wait_out_their_backoff(api, worker):
    from tests.support.engine_workflows import counters

    body = submit(api, "test-flaky", {"label": "gaps", "failures": 3}).json()
    assert finished(body["id"], worker).status == "succeeded"

    times = [float(t) for t in counters().lrange("alfred-test:times:gaps", 0, -1)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 4
    # base 0.2 s, cap 0.5 s, jitter keeps at least half: ≥ 0.1, 0.2, 0.25 s
    assert [round(g, 2) >= low for g, low in zip(gaps, [0.1, 0.2, 0.25], strict=True)] == [True] * 3

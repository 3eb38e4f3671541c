"""``manage.py alfred_executions`` says what happens after a control and what to do next: an
approval the run finds superseded names the new plan and the command that approves it; a
rollback that cannot start names the blocked lane and the command that recovers it. A real
worker and the AWS stand-in where the approval is taken by the run; the stand-in's journal
of applied change batches counts what changed."""

from __future__ import annotations

import io
import shlex
import uuid
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command

from executions.lanes.reconciler import Action, lane_reconcile
from executions.models import Hook, Run
from lanes.models import Lane
from providers.sandbox.aws import AwsStandIn
from tests.conftest import WorkerProcess, quiesce
from tests.integration.test_add_subdomain import _batches, _create, _paused, _terminal
from tests.integration.test_lane_reconciler import _finish
from tests.support import aws_world
from tests.support.helpers import LAMBDA, paused_on_a_plan, submit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started() as aws:
        yield aws


@pytest.fixture(scope="module")
def module_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    with aws_world.aws_worker(standin, "commands") as worker:
        yield worker


@pytest.fixture
def aws_worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    yield aws_world.alive(module_worker)
    quiesce()


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("alfred_executions", *args, "--actor", "alice", stdout=out)
    return out.getvalue()


def _run_of(suggested: str) -> list[str]:
    """The arguments of the `manage.py …` command a message suggests, "…" as a reason."""
    command = suggested.split("`manage.py ", 1)[1].split("`", 1)[0].replace("…", "checked")
    return shlex.split(command)


def test_an_approval_no_worker_takes_says_so_and_how_to_follow_it(api):
    # given: an execution paused on a plan, and no worker
    execution_id = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": "w"}).json()[
        "id"
    ]
    paused_on_a_plan(execution_id)

    # when
    said = _command(
        "approve", execution_id, "--plan-hash", "a" * 64, "--reason", "ok", "--wait", "1"
    )

    # then
    assert f"approval of plan {'a' * 64} recorded; no worker has resumed the run yet" in said
    assert f"alfred_executions show {execution_id}" in said


def test_a_rollback_of_a_blocked_lanes_owner_names_the_lane_and_how_to_recover_it(api):
    # given: an update-lambda-version that failed without readiness evidence: its lane is
    # blocked for an operator
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed")
    key = "lambda:checkout-api:production"
    decision = lane_reconcile(key)
    assert decision is not None and decision.action is Action.RECOVERY_REQUIRED

    # when: an operator rolls it back from the shell
    said = _command("rollback", owner, "--reason", "undo")

    # then: it says the rollback cannot start yet, why, and the command that starts it
    assert "rollback recorded, but its run cannot start" in said
    assert f"its lane {key} is blocked for an operator (recovery_required:" in said
    assert "now queued" not in said
    args = _run_of(said)
    assert args == ["alfred_lanes", "recover", key, "--owner", owner, "--reason", "checked"]
    rollback = Run.objects.get(execution_id=owner, kind="rollback")
    assert rollback.status == "pending"
    # and: that command gives the lane back to the rollback, which may start
    call_command(*args, "--actor", "alice", stdout=io.StringIO())
    lane = Lane.objects.get(key=key)
    assert (lane.state, lane.owner_id) == ("held", owner)


def test_a_rollback_whose_lane_is_free_says_it_starts_now(api):
    owner = submit(api, "update-lambda-version", LAMBDA).json()["id"]
    _finish(owner, "failed", "failed")  # still holding its lane, which is not blocked

    said = _command("rollback", owner, "--reason", "undo")

    assert said.strip() == f"{owner}: rollback recorded; its run starts now (now queued)"


# Last: the tests above run with no worker; this one starts the module's.
def test_an_approval_the_run_finds_superseded_names_the_new_plan_and_how_to_approve_it(
    api, aws_worker, standin
):
    # given: add-subdomain paused on the plan for a CNAME ...
    route53 = aws_world.client(standin, "route53")
    zone_id = aws_world.zone_id_of(route53)
    name = f"cmd-{uuid.uuid4().hex[:10]}.example.com"
    _create(route53, zone_id, name, "CNAME", "first.example.net")
    execution_id = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()[
        "id"
    ]
    first = _paused(api, execution_id)["pending_approval"]["plan_hash"]
    # ... and the name changed since that plan was made
    _create(route53, zone_id, name, "CNAME", "second.example.net")

    # when: an operator approves the plan they saw, from the shell
    with pytest.raises(CommandError) as refused:
        _command("approve", execution_id, "--plan-hash", first, "--reason", "checked")

    # then: it says the plan was superseded, nothing changed, and names the new plan and the
    # command that approves it
    message = str(refused.value)
    second = Hook.objects.get(execution_id=execution_id, status="pending").payload["plan_hash"]
    assert second != first
    assert f"the plan {first} you approved was superseded" in message
    assert "nothing was changed" in message
    assert f"--plan-hash {second}" in message
    assert _batches(standin, execution_id) == []
    # and: the command it names approves the new plan, which is applied once
    args = _run_of(message.split("then approve it with ", 1)[1])
    assert args[:2] == ["alfred_executions", "approve"]
    out = io.StringIO()
    call_command(*args, stdout=out)
    assert f"plan {second} approved and being applied" in out.getvalue()
    assert _terminal(execution_id).status == "succeeded"
    assert len(_batches(standin, execution_id)) == 1

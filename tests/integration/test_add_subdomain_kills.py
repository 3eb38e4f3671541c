"""add-subdomain with its worker SIGKILLed at every step boundary — plan's read, between the
stages, the change batch, the INSYNC wait, verify's read — and at the boundaries of its
rollback, in turn (issue 11): each execution still completes, with exactly one change batch
per applied plan (and exactly one batch back), and no event twice that happens once.

The kill points sit at the Route53 adapter's network edge in the worker
(:mod:`tests.support.kill_points`): after the real call returned, before Alfred recorded it. Batches
are counted on the stand-in's side twice: its journal of applied batches (each batch's comment names
the execution) and the ChangeResourceRecordSets requests it received, so a second copy refused by
the adapter's compare-and-swap would show as well. Mostly the pool process is killed (the worker's
main process forks another and requeues the message, which is claimed at once: the lease's holder
is provably dead); one case kills the whole worker, whose run is found by the recovery scan
once its lease has run out.
"""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from executions.models import Execution, OutboxEvent
from providers.sandbox.aws import AwsStandIn
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_engine import assert_gapless
from tests.support import aws_world
from tests.support.engine_workflows import KILL_POINTS, counters
from tests.support.helpers import submit
from tests.support.kill_points import ENABLE, KILLED, SETTLE

pytestmark = [
    pytest.mark.worker,
    pytest.mark.standin,
    pytest.mark.django_db(transaction=True),
]

ALIAS = "d111111abcdef8.cloudfront.net."  # what seed_aws's apex aliases
SERVED = {"A": ALIAS, "AAAA": ALIAS}
SEND = "ChangeResourceRecordSets"
FORWARD_STAGES = {"plan": 1, "apply": 1, "verify": 1}


@pytest.fixture(scope="module")
def standin() -> Iterator[AwsStandIn]:
    with aws_world.standin_started() as aws:
        yield aws


@pytest.fixture(scope="module")
def kills_worker(standin: AwsStandIn, django_db_setup: None) -> Iterator[WorkerProcess]:
    """One worker for the module (starting one takes longer than most runs here): the
    stand-in's providers, the kill points installed, and a recovered change settled after
    1 s instead of Route53's 60 s. After the test database exists: the worker is given its
    name. Every test here ends with its executions terminal, so the worker is idle when the
    database is flushed between tests."""
    with aws_world.aws_worker(standin, "kills", **{ENABLE: "1", SETTLE: "1"}) as worker:
        yield worker


@pytest.fixture
def aws_worker(kills_worker: WorkerProcess) -> WorkerProcess:
    """The module's worker, started again if a test killed all of it."""
    return aws_world.alive(kills_worker)


@pytest.fixture
def route53(standin: AwsStandIn) -> Any:
    return aws_world.client(standin, "route53")


@pytest.fixture
def zone_id(route53: Any) -> str:
    return aws_world.zone_id_of(route53)


def _name() -> str:
    return f"kill-{uuid.uuid4().hex[:10]}.example.com"


def _arm(name: str, *points: str) -> None:
    counters().sadd(KILL_POINTS, *[f"{name}:{point}" for point in points])


def _finished(
    execution_id: str, worker: WorkerProcess, *, rollback: bool = False, timeout: float = 45
) -> Execution:
    """The execution once terminal (after its rollback run, with ``rollback``)."""

    def done() -> Execution | None:
        execution = Execution.objects.select_related("current_run").get(pk=execution_id)
        run = execution.current_run
        ended = execution.terminal and run is not None and (run.kind == "rollback") == rollback
        return execution if ended else None

    try:
        return wait_for(done, timeout=timeout, interval=0.1)
    except AssertionError:
        raise AssertionError(worker.output()[-6000:]) from None


def _killed(worker: WorkerProcess) -> None:
    """Every armed kill happened, and every task killed has been delivered again and done
    (an ``after:`` kill of the last stage follows the terminal transition)."""

    def quiet() -> bool:
        tasks = [t.decode() for t in counters().lrange(KILLED, 0, -1)]
        log = worker.output()
        done = all(f"run_stage[{task}] succeeded" in log for task in tasks)
        return bool(tasks) and done and not counters().scard(KILL_POINTS)

    try:
        wait_for(quiet, timeout=30, interval=0.1)
    except AssertionError:
        raise AssertionError(worker.output()[-6000:]) from None


def _add(api: Any, name: str, worker: WorkerProcess) -> tuple[str, Execution]:
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    return body["id"], _finished(body["id"], worker)


def _roll_back(operator_api: Any, execution_id: str, worker: WorkerProcess) -> Execution:
    answer = operator_api.post(
        f"/api/v1/executions/{execution_id}/rollback", {"reason": "kill test"}, format="json"
    )
    assert answer.status_code == 202, answer.content
    return _finished(execution_id, worker, rollback=True)


def _batches(standin: AwsStandIn, comment: str) -> list[Any]:
    return [b for b in standin.route53.change_batches if b.comment == comment]


def _served(route53: Any, zone_id: str, name: str) -> dict[str, str | None]:
    found = route53.list_resource_record_sets(
        HostedZoneId=zone_id, StartRecordName=name, MaxItems="10"
    )["ResourceRecordSets"]
    return {
        r["Type"]: (r.get("AliasTarget") or {}).get("DNSName")
        for r in found
        if r["Name"].rstrip(".") == name
    }


def _assert_once(execution_id: str, stages: dict[str, int], *terminals: str) -> None:
    """Gapless, no key twice, and what happens once happened once: the acceptance, each
    stage's success (``stages``), each terminal event (``terminals``); nothing failed."""
    assert_gapless(execution_id)
    events = list(OutboxEvent.objects.filter(execution_id=execution_id).order_by("sequence"))
    assert len({e.key for e in events}) == len(events)
    types = Counter(e.type for e in events)
    assert types["execution.accepted"] == 1
    assert {t: types[t] for t in terminals} == dict.fromkeys(terminals, 1)
    assert Counter(e.payload["stage"] for e in events if e.type == "stage.succeeded") == stages
    assert types["stage.failed"] == types["execution.failed"] == 0


def _assert_added_once(standin: AwsStandIn, execution_id: str, name: str, sent: int) -> None:
    """ONE batch applied for the plan, and no other request sent since ``sent``."""
    assert len(_batches(standin, f"alfred {execution_id} add-subdomain {name}")) == 1
    assert standin.calls[SEND] - sent == 1


# Each point in a run of its own, in the order add-subdomain reaches them. A point is
# "<what>:<stage>": after the adapter's call returned ("read", "change", "poll") or the
# stage's task ("before": its message delivered, not claimed; "after": the stage committed,
# the next one published, its own message not acknowledged).
FORWARD = [
    "read:plan",  # plan read the zone and the name; the read's receipt is not written
    "after:plan",
    "change:apply",  # the batch landed at Route53; its receipt is not written
    "poll:apply",  # a poll for INSYNC returned; its receipt (and the next poll's timer) not written
    "before:verify",
    "read:verify",  # verify read the name back; the read's receipt is not written
]


@pytest.mark.parametrize("point", FORWARD)
def test_a_pool_process_killed_at_a_boundary_of_add_subdomain_changes_dns_once(
    point, api, aws_worker, standin, route53, zone_id
):
    # given: the pool process running the execution dies once, at this point
    name = _name()
    _arm(name, point)
    sent = standin.calls[SEND]

    # when
    execution_id, execution = _add(api, name, aws_worker)

    # then: it succeeded after the kill, by ONE batch, sent once; the name serves the alias
    assert execution.status == "succeeded", execution.error
    _killed(aws_worker)
    _assert_added_once(standin, execution_id, name, sent)
    assert _served(route53, zone_id, name) == SERVED
    _assert_once(execution_id, FORWARD_STAGES, "execution.succeeded")


ROLLBACK = [
    "change:rollback",  # the batch back landed at Route53; its receipt is not written
    "after:rollback",  # rolled back, the run's message not acknowledged
]


@pytest.mark.parametrize("point", ROLLBACK)
def test_a_pool_process_killed_at_a_boundary_of_the_rollback_sends_one_batch_back(
    point, api, operator_api, aws_worker, standin, route53, zone_id
):
    # given: a name added by one batch, and the pool process to die once, at this point of
    # the rollback
    name = _name()
    sent = standin.calls[SEND]
    execution_id, added = _add(api, name, aws_worker)
    assert added.status == "succeeded", added.error
    _arm(name, point)

    # when
    execution = _roll_back(operator_api, execution_id, aws_worker)

    # then: rolled back after the kill, by ONE batch back, sent once; the name is gone
    assert execution.status == "rolled_back", execution.error
    _killed(aws_worker)
    assert len(_batches(standin, f"alfred {execution_id} add-subdomain {name}")) == 1
    assert len(_batches(standin, f"alfred rollback {execution_id}")) == 1
    assert standin.calls[SEND] - sent == 2
    assert _served(route53, zone_id, name) == {}
    _assert_once(
        execution_id,
        {**FORWARD_STAGES, "rollback": 1},
        "execution.succeeded",
        "execution.rolled_back",
    )


def test_a_pool_process_killed_at_more_boundaries_in_turn_changes_dns_once_each_way(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    # given: more boundaries, each armed once, in one execution and its rollback: after the
    # last stage (the terminal transition made, its message not acknowledged), and inside
    # the rollback after its read of the names and after its poll for INSYNC
    name = _name()
    _arm(name, "after:verify")
    sent = standin.calls[SEND]

    # when: it adds the name
    execution_id, added = _add(api, name, aws_worker)

    # then
    assert added.status == "succeeded", added.error
    _killed(aws_worker)
    _assert_added_once(standin, execution_id, name, sent)
    assert _served(route53, zone_id, name) == SERVED

    # and when: it is rolled back, each kill in turn
    _arm(name, "read:rollback", "poll:rollback")
    execution = _roll_back(operator_api, execution_id, aws_worker)

    # then
    assert execution.status == "rolled_back", execution.error
    _killed(aws_worker)
    assert len(_batches(standin, f"alfred rollback {execution_id}")) == 1
    assert standin.calls[SEND] - sent == 2
    assert _served(route53, zone_id, name) == {}
    _assert_once(
        execution_id,
        {**FORWARD_STAGES, "rollback": 1},
        "execution.succeeded",
        "execution.rolled_back",
    )


def test_a_whole_worker_killed_after_its_batch_landed_is_taken_over_without_a_second(
    api, aws_worker, standin, route53, zone_id
):
    # given: the whole worker (main process, beat, pool) dies once the batch has landed, its
    # receipt unwritten and the stage's message unacknowledged: nothing requeues it
    name = _name()
    _arm(name, "worker:change:apply")
    sent = standin.calls[SEND]
    body = submit(api, "add-subdomain", {"zone": "example.com", "subdomain": name}).json()
    assert aws_worker.proc is not None
    assert aws_worker.proc.wait(45) == -signal.SIGKILL
    assert len(_batches(standin, f"alfred {body['id']} add-subdomain {name}")) == 1

    # when: a worker starts again (its recovery scan finds the run once the lease ran out)
    execution = _finished(body["id"], aws_worker.start())

    # then: it recognized the batch that had landed and sent none
    assert execution.status == "succeeded", execution.error
    _assert_added_once(standin, body["id"], name, sent)
    assert _served(route53, zone_id, name) == SERVED
    _assert_once(body["id"], FORWARD_STAGES, "execution.succeeded")


def test_a_rollback_of_a_batch_recovered_after_a_kill_asks_an_operator_first(
    api, operator_api, aws_worker, standin, route53, zone_id
):
    # given: a name added by a batch whose answer was lost with the pool process (the
    # replay found the records already there: whose they are, nothing can prove)
    name = _name()
    _arm(name, "change:apply")
    sent = standin.calls[SEND]
    execution_id, added = _add(api, name, aws_worker)
    assert added.status == "succeeded", added.error
    _killed(aws_worker)

    # when: an operator rolls it back
    operator_api.post(
        f"/api/v1/executions/{execution_id}/rollback", {"reason": "kill test"}, format="json"
    )

    # then: the rollback pauses on the restoring batch, shown as a plan, and sends nothing
    def paused() -> Any:
        resource = operator_api.get(f"/api/v1/executions/{execution_id}").json()
        return resource["status"] == "paused" and resource["pending_approval"]

    pending = wait_for(paused, timeout=30, interval=0.1)
    assert pending["stage"] == "rollback"
    assert {r["type"] for r in pending["plan"]["before"]} == {"A", "AAAA"}
    assert pending["plan"]["after"] == []
    assert _batches(standin, f"alfred rollback {execution_id}") == []

    # and when: the operator approves that plan, the one batch back goes
    operator_api.post(
        f"/api/v1/executions/{execution_id}/approve",
        {"plan_hash": pending["plan_hash"], "reason": "checked: ours"},
        format="json",
    )
    execution = _finished(execution_id, aws_worker, rollback=True)

    assert execution.status == "rolled_back", execution.error
    assert len(_batches(standin, f"alfred rollback {execution_id}")) == 1
    assert standin.calls[SEND] - sent == 2
    assert _served(route53, zone_id, name) == {}

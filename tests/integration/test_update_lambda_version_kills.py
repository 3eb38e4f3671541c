"""update-lambda-version with its worker SIGKILLed at the step boundaries — after an alias
update landed before its receipt, between the stages, during await_updates, in verify — and
in its rollback: each execution still completes with exactly one alias update per function
each way (counted in the stand-in's journal, :class:`JournalledAws`) and no event twice that
happens once.

The kill points sit at the Lambda adapter's network edge in the worker
(:mod:`tests.support.kill_points_lambda`): after the real call returned, before Alfred recorded it.
The pool process is killed; the worker's main process forks another and the message is
delivered again. One worker serves the module.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator

import pytest

from executions.models import Execution, OutboxEvent
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_engine import assert_gapless
from tests.integration.test_update_lambda_version import (
    WORKFLOW,
    JournalledAws,
    aliases,
    client,  # noqa: F401 - a fixture
    make_fleet,
    roll_back,
    standin,  # noqa: F401 - a fixture
    terminal,
    worker_env,
)
from tests.support.aws_world import ready
from tests.support.engine_workflows import KILL_POINTS, counters
from tests.support.helpers import submit
from tests.support.kill_points_lambda import KILLED

pytestmark = [
    pytest.mark.worker,
    pytest.mark.standin,
    pytest.mark.django_db(transaction=True),
]

FORWARD_STAGES = {"plan": 1, "update_aliases": 1, "await_updates": 1, "verify": 1}


@pytest.fixture(scope="module")
def kills_worker(
    standin: JournalledAws,  # noqa: F811
    django_db_setup: None,
) -> Iterator[WorkerProcess]:
    with pytest.MonkeyPatch.context() as env:
        for name, value in worker_env(standin).items():
            env.setenv(name, value)
        worker = WorkerProcess("lambda-kills")
        try:
            yield ready(worker.start())
        finally:
            worker.stop()


def _arm(target: str, *points: str) -> None:
    counters().sadd(KILL_POINTS, *[f"{target}:{point}" for point in points])


def _killed(worker: WorkerProcess) -> None:
    """Every armed kill happened, and every task killed was delivered again and done."""

    def quiet() -> bool:
        tasks = [t.decode() for t in counters().lrange(KILLED, 0, -1)]
        log = worker.output()
        done = all(f"run_stage[{task}] succeeded" in log for task in tasks)
        return bool(tasks) and done and not counters().scard(KILL_POINTS)

    try:
        wait_for(quiet, timeout=30, interval=0.1)
    except AssertionError:
        raise AssertionError(worker.output()[-6000:]) from None


def _finished(execution_id: str, worker: WorkerProcess, *, rollback: bool = False) -> Execution:
    try:
        return terminal(execution_id, rollback=rollback)
    except AssertionError:
        raise AssertionError(worker.output()[-6000:]) from None


def _assert_once(execution_id: str, stages: dict[str, int], *terminals: str) -> None:
    assert_gapless(execution_id)
    events = list(OutboxEvent.objects.filter(execution_id=execution_id).order_by("sequence"))
    assert len({e.key for e in events}) == len(events)
    types = Counter(e.type for e in events)
    assert types["execution.accepted"] == 1
    assert {t: types[t] for t in terminals} == dict.fromkeys(terminals, 1)
    assert Counter(e.payload["stage"] for e in events if e.type == "stage.succeeded") == stages
    assert types["stage.failed"] == types["execution.failed"] == 0


FORWARD = [
    "read:plan",  # plan read the fleet; the read's receipt is not written
    "update:update_aliases",  # the first alias moved at Lambda; its receipt is not written
    "after:update_aliases",  # the stage committed, its message not acknowledged
    "poll:await_updates",  # a poll of the durable wait returned; its receipt is not written
    "read:verify",  # verify read an alias back; the read's receipt is not written
]


@pytest.mark.parametrize("point", FORWARD)
def test_a_pool_process_killed_at_a_boundary_moves_each_alias_once(
    point,
    api,
    kills_worker,
    standin,  # noqa: F811
    client,  # noqa: F811
):
    # given: the pool process running the execution dies once, at this point
    fleet, names = make_fleet(client)
    _arm(fleet, point)
    since = len(standin.alias_updates)

    # when
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "production", "version": "3"})
    execution = _finished(body.json()["id"], kills_worker)

    # then: it succeeded after the kill, with ONE update per function
    assert execution.status == "succeeded", execution.error
    _killed(kills_worker)
    assert standin.applied(since) == Counter(names)
    assert aliases(client, names, "production") == dict.fromkeys(names, "3")
    _assert_once(execution.id, FORWARD_STAGES, "execution.succeeded")


def test_a_pool_process_killed_at_each_boundary_of_the_rollback_moves_each_alias_back_once(
    api,
    operator_api,
    kills_worker,
    standin,  # noqa: F811
    client,  # noqa: F811
):
    # given: a fleet moved to 3 (each alias once), and the pool process to die at each
    # boundary of the rollback in turn: after its read of an alias, after an alias moved back
    # (its receipt unwritten), and once it is rolled back (its message not acknowledged)
    fleet, names = make_fleet(client)
    since = len(standin.alias_updates)
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "production", "version": "3"})
    execution_id = body.json()["id"]
    assert _finished(execution_id, kills_worker).status == "succeeded"
    _arm(fleet, "read:rollback", "restore:rollback", "after:rollback")

    # when
    roll_back(operator_api, execution_id)
    execution = _finished(execution_id, kills_worker, rollback=True)

    # then: rolled back, with ONE update back per function
    assert execution.status == "rolled_back", execution.error
    _killed(kills_worker)
    assert standin.applied(since) == Counter(names * 2)
    assert aliases(client, names, "production") == dict.fromkeys(names, "1")
    _assert_once(
        execution_id,
        {**FORWARD_STAGES, "rollback": 1},
        "execution.succeeded",
        "execution.rolled_back",
    )


def test_a_whole_worker_killed_after_an_alias_update_landed_is_taken_over_without_a_second(
    api,
    kills_worker,
    standin,  # noqa: F811
    client,  # noqa: F811
):
    # given: the whole worker (main process, beat, pool) dies once the first alias moved, its
    # receipt unwritten and the stage's message unacknowledged: nothing requeues it
    fleet, names = make_fleet(client)
    _arm(fleet, "worker:update:update_aliases")
    since = len(standin.alias_updates)
    body = submit(api, WORKFLOW, {"target": fleet, "environment": "production", "version": "3"})
    assert kills_worker.proc is not None
    assert kills_worker.proc.wait(45) == -signal.SIGKILL
    assert standin.applied(since) == Counter(names[:1])

    # when: a worker starts again (its recovery scan finds the run once the lease ran out)
    execution = _finished(body.json()["id"], ready(kills_worker.start()))

    # then: it found the first update in place and sent it no second one
    assert execution.status == "succeeded", execution.error
    assert standin.applied(since) == Counter(names)
    assert aliases(client, names, "production") == dict.fromkeys(names, "3")
    _assert_once(execution.id, FORWARD_STAGES, "execution.succeeded")

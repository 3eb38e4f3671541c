"""Kill points (and a foreign writer) for update-lambda-version, set at the Lambda adapter's
network edge in the test worker: no hook in production code. Imported by
:mod:`tests.engine_workflows` (so by every worker the tests start); it installs itself only in
a process started with :data:`ENABLE` set, which only the update-lambda-version tests' workers
set.

A point is armed as a member ``<target>:<point>`` of
:data:`~tests.engine_workflows.KILL_POINTS` (``<target>`` the execution's fleet); it SIGKILLs
the pool process running the stage once (a ``worker:`` prefix: the whole worker). The points,
``<stage>`` being the stage the pool process runs (``plan``, ``update_aliases``,
``await_updates``, ``verify``, or a rollback run's ``rollback``):

- ``read:<stage>`` — ``Lambda.alias`` (or ``fleet``) has returned, before the step's receipt;
- ``update:<stage>`` — ``Lambda.update_alias`` has returned: the alias moved at the
  stand-in, its receipt is not written;
- ``restore:<stage>`` — ``Lambda.restore`` has returned: the alias moved back, its receipt
  is not written;
- ``poll:<stage>`` — ``Lambda.inspect`` has returned (a poll of the durable wait), before the
  poll's receipt;
- ``before:<stage>`` / ``after:<stage>`` — the stage's message delivered and not yet
  claimed / the stage committed as succeeded, its message not yet acknowledged.

Only the outermost adapter call counts (the reads ``update_alias`` and ``restore`` make inside
themselves are not points). Each task killed is noted in :data:`KILLED`.

**A foreign writer**: :func:`foreign_change_arm` asks the worker to move an alias as another
writer would, just before it claims the execution's ``update_aliases`` stage: after the plan
froze the alias's RevisionId, before Alfred's update.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any

from celery.signals import task_postrun, task_prerun, task_success

from providers.aws.lambda_ import Lambda
from tests.engine_workflows import KILL_POINTS, counters, kill_point

KILLED = "alfred-test:lambda-killed-tasks"  # the ids of the tasks killed, in order
FOREIGN = "alfred-test:lambda-foreign"  # target -> the alias move a foreign writer makes
ENABLE = "ALFRED_TEST_LAMBDA_KILL_POINTS"
WORKFLOW = "update-lambda-version"
RUN_STAGE = "executions.tasks.run_stage"

# The task this pool process runs now: its id, its stage, the execution's target.
_task: tuple[str, str, str] | None = None
_depth = 0
_installed = False


def foreign_change_arm(target: str, *, function: str, alias: str, version: str) -> None:
    """Before ``target``'s next update_aliases stage is claimed, move ``function:alias`` to
    ``version`` (no RevisionId: another writer's change)."""
    payload = {"function": function, "alias": alias, "version": version}
    counters().hset(FOREIGN, target, json.dumps(payload))


def _foreign(target: str) -> None:
    r = counters()
    raw = r.hget(FOREIGN, target)
    if raw is None or not r.hdel(FOREIGN, target):
        return
    import boto3

    change = json.loads(raw)
    boto3.client("lambda").update_alias(
        FunctionName=change["function"], Name=change["alias"], FunctionVersion=change["version"]
    )


def _kill(label: str, point: str) -> None:
    r = counters()
    if _task is not None and (
        r.sismember(KILL_POINTS, f"{label}:{point}")
        or r.sismember(KILL_POINTS, f"{label}:worker:{point}")
    ):
        r.rpush(KILLED, _task[0])
    kill_point(label, point)


def _edge(original: Callable[..., Any], point: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(self: Lambda, *args: Any, **kwargs: Any) -> Any:
        global _depth
        outermost = _depth == 0
        _depth += 1
        try:
            result = original(self, *args, **kwargs)
        finally:
            _depth -= 1
        if outermost and _task is not None and counters().scard(KILL_POINTS):
            _kill(_task[2], f"{point}:{_task[1]}")
        return result

    return call


def _target_of(run_id: Any) -> str | None:
    from executions.models import Run

    row = Run.objects.filter(pk=run_id).values_list("execution__workflow", "execution__input")
    workflow, data = row.first() or (None, None)
    return str(data["target"]) if workflow == WORKFLOW else None


def _on_prerun(sender: Any = None, task_id: str | None = None, args: Any = None, **_: Any) -> None:
    global _task
    if getattr(sender, "name", None) != RUN_STAGE or not args or len(args) < 2:
        return
    if not counters().scard(KILL_POINTS) and not counters().hlen(FOREIGN):
        return  # nothing armed: no database read for every other stage
    target = _target_of(args[0])
    if target is None:
        return
    _task = (str(task_id), str(args[1]), target)
    if args[1] == "update_aliases":
        _foreign(target)
    _kill(target, f"before:{args[1]}")


def _on_success(sender: Any = None, **_: Any) -> None:
    if getattr(sender, "name", None) != RUN_STAGE or _task is None:
        return
    if not counters().scard(KILL_POINTS):
        return
    from executions.models import Stage, StageStatus

    run_id, stage = sender.request.args[0], sender.request.args[1]
    if Stage.objects.filter(run_id=run_id, name=stage, status=StageStatus.SUCCEEDED).exists():
        _kill(_task[2], f"after:{stage}")


def _on_postrun(sender: Any = None, **_: Any) -> None:
    global _task
    if getattr(sender, "name", None) == RUN_STAGE:
        _task = None


def install() -> None:
    """Wrap the adapter and connect the stage signals, once, where :data:`ENABLE` asks."""
    global _installed
    if _installed or os.environ.get(ENABLE) != "1":
        return
    _installed = True
    Lambda.fleet = _edge(Lambda.fleet, "read")  # type: ignore[method-assign]
    Lambda.alias = _edge(Lambda.alias, "read")  # type: ignore[method-assign]
    Lambda.update_alias = _edge(Lambda.update_alias, "update")  # type: ignore[method-assign]
    Lambda.restore = _edge(Lambda.restore, "restore")  # type: ignore[method-assign]
    Lambda.inspect = _edge(Lambda.inspect, "poll")  # type: ignore[method-assign]
    task_prerun.connect(_on_prerun, weak=False)
    task_success.connect(_on_success, weak=False)
    task_postrun.connect(_on_postrun, weak=False)


install()

"""Kill points (and a foreign writer) for update-lambda-version, set at the Lambda adapter's
network edge in the test worker: no hook in production code. Imported by
:mod:`tests.support.engine_workflows` (so by every worker the tests start); it installs itself only
in a process started with :data:`ENABLE` set, which only the update-lambda-version tests' workers
set.

A point is armed as a member ``<target>:<point>`` of
:data:`~tests.support.engine_workflows.KILL_POINTS` (``<target>`` the execution's fleet); it
SIGKILLs the pool process running the stage once (a ``worker:`` prefix: the whole worker). The
points, ``<stage>`` being the stage the pool process runs (``plan``, ``update_aliases``,
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

import json
import os

from providers.aws.lambda_ import Lambda
from tests.support.engine_workflows import counters
from tests.support.kill_edges import EdgeKills

KILLED = "alfred-test:lambda-killed-tasks"  # the ids of the tasks killed, in order
FOREIGN = "alfred-test:lambda-foreign"  # target -> the alias move a foreign writer makes
ENABLE = "ALFRED_TEST_LAMBDA_KILL_POINTS"
WORKFLOW = "update-lambda-version"

_installed = False


def foreign_change_arm(target: str, *, function: str, alias: str, version: str) -> None:
    """Before ``target``'s next update_aliases stage is claimed, move ``function:alias`` to
    ``version`` (no RevisionId: another writer's change)."""
    payload = {"function": function, "alias": alias, "version": version}
    counters().hset(FOREIGN, target, json.dumps(payload))


def _foreign(target: str, stage: str) -> None:
    if stage != "update_aliases":
        return
    r = counters()
    raw = r.hget(FOREIGN, target)
    if raw is None or not r.hdel(FOREIGN, target):
        return
    import boto3

    change = json.loads(raw)
    boto3.client("lambda").update_alias(
        FunctionName=change["function"], Name=change["alias"], FunctionVersion=change["version"]
    )


KILLS = EdgeKills(
    WORKFLOW,
    lambda data: str(data["target"]),
    KILLED,
    before_claim=_foreign,
    armed=lambda: bool(counters().hlen(FOREIGN)),
)


def install() -> None:
    """Wrap the adapter and connect the stage signals, once, where :data:`ENABLE` asks."""
    global _installed
    if _installed or os.environ.get(ENABLE) != "1":
        return
    _installed = True
    Lambda.fleet = KILLS.edge(Lambda.fleet, "read")  # type: ignore[method-assign]
    Lambda.alias = KILLS.edge(Lambda.alias, "read")  # type: ignore[method-assign]
    Lambda.update_alias = KILLS.edge(Lambda.update_alias, "update")  # type: ignore[method-assign]
    Lambda.restore = KILLS.edge(Lambda.restore, "restore")  # type: ignore[method-assign]
    Lambda.inspect = KILLS.edge(Lambda.inspect, "poll")  # type: ignore[method-assign]
    KILLS.connect()


install()

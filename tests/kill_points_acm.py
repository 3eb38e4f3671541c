"""Kill points for add-certificate, set at the ACM and Route53 adapters' network edge in the
test worker: no hook in production code. Imported by :mod:`tests.engine_workflows` (so by every
worker the tests start); it installs itself only in a process started with :data:`ENABLE`
set, which the add-certificate kill tests' worker fixture sets and no other test does.

A point is armed as a member ``<domain>:<point>`` of
:data:`~tests.engine_workflows.KILL_POINTS`, ``<domain>`` being the execution's canonical
domain; it SIGKILLs the pool process running the stage once (a ``worker:`` prefix: the whole
worker). The points, ``<stage>`` being the stage the pool process runs (``plan``,
``request``, ``validate_dns``, ``await_issued``, ``verify``, or a rollback's ``rollback``):

- ``request:<stage>`` — ``Acm.request`` has returned: the certificate exists at the stand-in,
  and the step's receipt is not written;
- ``change:<stage>`` — ``Route53.change`` has returned: the batch has landed, its receipt is
  not written;
- ``describe:<stage>`` — an outermost ``Acm.describe`` has returned (await_issued's poll,
  verify's read, the undo's read), before its receipt;
- ``delete:<stage>`` — ``Acm.delete`` has returned: the certificate is gone, the step's
  receipt is not written;
- ``before:<stage>`` / ``after:<stage>`` — the stage's message delivered and not yet claimed /
  the stage committed as succeeded, its own message not yet acknowledged.

:data:`tests.kill_points.SETTLE` shortens a recovered change's settle time as there (the
rollback's batch back, its answer lost with a killed worker, is recovered on replay).

Each task killed is noted in :data:`tests.kill_points.KILLED` (the list add-subdomain's kill
points use), so that a test can wait for its message, delivered again, to be done.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from celery.signals import task_postrun, task_prerun, task_success

from providers.aws.acm import Acm
from providers.aws.route53 import Route53
from tests.engine_workflows import KILL_POINTS, counters, kill_point
from tests.kill_points import KILLED, SETTLE, _settling

ENABLE = "ALFRED_TEST_ACM_KILL_POINTS"
WORKFLOW = "add-certificate"
RUN_STAGE = "executions.tasks.run_stage"

# The task this pool process runs now: its id, its stage and its execution's domain.
_task: tuple[str, str, str] | None = None
_depth = 0  # adapter calls in progress: only the outermost one is a kill point
_installed = False


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
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
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


def _nested(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` counted as an adapter call: the reads inside it are not points."""

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _depth
        _depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _depth -= 1

    return call


def _domain(run_id: Any) -> str | None:
    from executions.models import Run

    row = Run.objects.filter(pk=run_id).values_list("execution__workflow", "execution__input")
    workflow, data = row.first() or (None, None)
    return str(data["domain"]) if workflow == WORKFLOW and data else None


def _on_prerun(sender: Any = None, task_id: str | None = None, args: Any = None, **_: Any) -> None:
    global _task
    if getattr(sender, "name", None) != RUN_STAGE:
        return
    _task = None
    if not args or len(args) < 2 or not counters().scard(KILL_POINTS):
        return
    domain = _domain(args[0])
    if domain is None:
        return
    _task = (str(task_id), str(args[1]), domain)
    _kill(domain, f"before:{args[1]}")


def _on_success(sender: Any = None, **_: Any) -> None:
    if getattr(sender, "name", None) != RUN_STAGE or _task is None:
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
    """Wrap the adapters and connect the stage signals, once, where :data:`ENABLE` asks."""
    global _installed
    if _installed or os.environ.get(ENABLE) != "1":
        return
    _installed = True
    Acm.request = _edge(Acm.request, "request")  # type: ignore[method-assign]
    Acm.describe = _edge(Acm.describe, "describe")  # type: ignore[method-assign]
    Acm.delete = _edge(Acm.delete, "delete")  # type: ignore[method-assign]
    Acm.validation_records = _nested(Acm.validation_records)  # type: ignore[method-assign]
    Route53.change = _edge(Route53.change, "change")  # type: ignore[method-assign]
    if os.environ.get(SETTLE):
        Route53.__init__ = _settling(Route53.__init__, float(os.environ[SETTLE]))  # type: ignore[method-assign]
    task_prerun.connect(_on_prerun, weak=False)
    task_success.connect(_on_success, weak=False)
    task_postrun.connect(_on_postrun, weak=False)


install()

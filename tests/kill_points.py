"""Kill points for add-subdomain, set at the Route53 adapter's network edge in the test worker:
no hook in production code. Imported by :mod:`tests.engine_workflows` (so by every worker the
tests start); it installs itself only in a process started with :data:`ENABLE` set, which the
kill tests' worker fixture sets and no other test does.

A point is armed like :mod:`tests.engine_workflows`'s, as a member ``<name>:<point>`` of
:data:`~tests.engine_workflows.KILL_POINTS`, ``<name>`` being the fully-qualified name the
execution adds (its canonical ``subdomain``); it SIGKILLs the pool process running the stage
once (a ``worker:`` prefix: the whole worker). The points, ``<stage>`` being the stage the
pool process runs (``plan``, ``apply``, ``verify``, or a rollback run's ``rollback``):

- ``read:<stage>`` — ``Route53.records`` at the name has returned (the plan's and verify's
  reads, the undo's read before it restores), before the step's receipt is written;
- ``change:<stage>`` — ``Route53.change`` of a batch at the name has returned: the batch has
  landed at the stand-in, and its receipt is not written;
- ``poll:<stage>`` — ``Route53.inspect`` of that batch's handle has returned (an INSYNC poll),
  before the poll's receipt;
- ``before:<stage>`` / ``after:<stage>`` — as for test-kill-points: the stage's message
  delivered and not yet claimed / the stage committed as succeeded (the next one published,
  or the execution terminal), its own message not yet acknowledged.

Only the outermost adapter call counts: the reads ``change`` and ``inspect`` make inside
themselves (the compare-and-swap's pre-state, a recovered handle's evidence) are not points.
Each task killed is noted in :data:`KILLED`, so that a test can wait for its message,
delivered again, to be done.

:data:`SETTLE` shortens a recovered change's settle time (``Route53.settle_seconds``, 60 s in
production: Route53's documented propagation time; the stand-in propagates in well under a
second). A batch whose receipt was lost with its worker is recovered on replay with an
unknowable change id, and its INSYNC is assumed only after that time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from celery.signals import task_postrun, task_prerun, task_success

from providers.aws.route53 import Route53, normalize_name
from tests.engine_workflows import KILL_POINTS, counters, kill_point

KILLED = "alfred-test:killed-tasks"  # the ids of the tasks killed, in order

ENABLE = "ALFRED_TEST_ROUTE53_KILL_POINTS"
SETTLE = "ALFRED_TEST_ROUTE53_SETTLE_SECONDS"
WORKFLOW = "add-subdomain"
RUN_STAGE = "executions.tasks.run_stage"

# The task this pool process runs now (one at a time): its id and the stage it runs.
_task: tuple[str, str] | None = None
_depth = 0  # adapter calls in progress: only the outermost one is a kill point
_installed = False


def _kill(name: str, point: str) -> None:
    """:func:`~tests.engine_workflows.kill_point`, the task it kills noted in :data:`KILLED`
    first: a test waits for that task's message to be delivered again and done."""
    r = counters()
    if _task is not None and (
        r.sismember(KILL_POINTS, f"{name}:{point}")
        or r.sismember(KILL_POINTS, f"{name}:worker:{point}")
    ):
        r.rpush(KILLED, _task[0])
    kill_point(name, point)


def _names_of_changes(changes: Iterable[Mapping[str, Any]]) -> set[str]:
    return {normalize_name(change["record"]["name"]) for change in changes}


def _records_names(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> set[str]:
    name = args[1] if len(args) > 1 else kwargs["name"]
    return {normalize_name(name)}


def _change_names(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> set[str]:
    return _names_of_changes(args[1] if len(args) > 1 else kwargs["changes"])


def _inspect_names(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> set[str]:
    handle = args[0] if args else kwargs["previous"]
    if handle.get("kind") != "change":
        return set()
    return _names_of_changes(handle.get("observations", {}).get("changes") or [])


def _edge(
    original: Callable[..., Any],
    point: str,
    names: Callable[[tuple[Any, ...], dict[str, Any], Any], set[str]],
) -> Callable[..., Any]:
    """``original`` with the kill point ``<point>:<stage>`` after it returns, for each name
    it touched, when it is the outermost adapter call of a stage."""

    @functools.wraps(original)
    def call(self: Route53, *args: Any, **kwargs: Any) -> Any:
        global _depth
        outermost = _depth == 0
        _depth += 1
        try:
            result = original(self, *args, **kwargs)
        finally:
            _depth -= 1
        if outermost and _task is not None and counters().scard(KILL_POINTS):
            for name in sorted(names(args, kwargs, result)):
                _kill(name, f"{point}:{_task[1]}")
        return result

    return call


def _nested(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` counted as an adapter call: the reads inside it are not points."""

    @functools.wraps(original)
    def call(self: Route53, *args: Any, **kwargs: Any) -> Any:
        global _depth
        _depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _depth -= 1

    return call


def _settling(original: Callable[..., None], seconds: float) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Route53, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("settle_seconds", seconds)
        original(self, *args, **kwargs)

    return init


def _stage_point(args: Any, point: str) -> None:
    """``before:``/``after:<stage>`` of an add-subdomain run, labelled by its name. A stage
    task also returns when the stage suspends (apply's and the rollback's INSYNC waits):
    ``after:`` is the return once the stage has succeeded."""
    if not args or len(args) < 2 or not counters().scard(KILL_POINTS):
        return
    from executions.models import Run, Stage, StageStatus

    row = Run.objects.filter(pk=args[0]).values_list("execution__workflow", "execution__input")
    workflow, data = row.first() or (None, None)
    if workflow != WORKFLOW:
        return
    if point == "after":
        done = Stage.objects.filter(run_id=args[0], name=args[1], status=StageStatus.SUCCEEDED)
        if not done.exists():
            return
    _kill(normalize_name(data["subdomain"]), f"{point}:{args[1]}")


def _on_prerun(sender: Any = None, task_id: str | None = None, args: Any = None, **_: Any) -> None:
    global _task
    if getattr(sender, "name", None) != RUN_STAGE:
        return
    _task = (str(task_id), str(args[1])) if args and len(args) > 1 else None
    _stage_point(args, "before")


def _on_success(sender: Any = None, **_: Any) -> None:
    if getattr(sender, "name", None) == RUN_STAGE:
        _stage_point(sender.request.args, "after")


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
    Route53.records = _edge(Route53.records, "read", _records_names)  # type: ignore[method-assign]
    Route53.change = _edge(Route53.change, "change", _change_names)  # type: ignore[method-assign]
    Route53.inspect = _edge(Route53.inspect, "poll", _inspect_names)  # type: ignore[method-assign]
    Route53.apex_alias = _nested(Route53.apex_alias)  # type: ignore[method-assign]
    Route53.batch_state = _nested(Route53.batch_state)  # type: ignore[method-assign]
    if os.environ.get(SETTLE):
        Route53.__init__ = _settling(Route53.__init__, float(os.environ[SETTLE]))  # type: ignore[method-assign]
    task_prerun.connect(_on_prerun, weak=False)
    task_success.connect(_on_success, weak=False)
    task_postrun.connect(_on_postrun, weak=False)


install()

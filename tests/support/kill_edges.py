"""What the workflows' kill points share (:mod:`tests.support.kill_points`, ``_acm``, ``_lambda``):
the stage task a pool process runs, kill points after an adapter's outermost call returns, and
``before:``/``after:<stage>`` points around each stage a task runs, each labelled the way the
tests arm them (a workflow's own label: its subdomain, domain or fleet).

A point is armed as a member ``<label>:<point>`` of
:data:`~tests.support.engine_workflows.KILL_POINTS` (``<label>:worker:<point>`` kills the whole
worker); each task killed is noted in its list first, so that a test can wait for its message,
delivered again, to be done.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery.signals import task_postrun, task_prerun

from executions.runtime.signals import stage_claiming, stage_completed
from tests.support.engine_workflows import KILL_POINTS, counters, kill_point

RUN_STAGE = "executions.tasks.run_stage"
Names = Callable[[tuple[Any, ...], dict[str, Any], Any], set[str]]


@dataclass
class EdgeKills:
    """Kill points of one workflow (or several: a tuple of names). ``label`` maps an
    execution's canonical input to the label its points are armed under; ``killed``: the
    Redis list of the tasks killed; ``armed``: whether anything is armed now besides kill
    points (a foreign writer)."""

    workflow: str | tuple[str, ...]
    label: Callable[[dict[str, Any]], str]
    killed: str
    before_claim: Callable[[str, str], None] | None = None  # (label, stage)
    armed: Callable[[], bool] = lambda: False
    task: tuple[str, str, str] | None = None  # (task id, stage, label) running now
    _task_id: str | None = field(default=None, repr=False)  # the stage task running now
    _depth: int = field(default=0, repr=False)

    def kill(self, label: str, point: str) -> None:
        r = counters()
        if self.task is not None and (
            r.sismember(KILL_POINTS, f"{label}:{point}")
            or r.sismember(KILL_POINTS, f"{label}:worker:{point}")
        ):
            r.rpush(self.killed, self.task[0])
        kill_point(label, point)

    def edge(
        self, original: Callable[..., Any], point: str, names: Names | None = None
    ) -> Callable[..., Any]:
        """``original`` with the kill point ``<point>:<stage>`` after it returns, when it is
        the outermost adapter call of a stage of this workflow; labelled by the execution,
        or by each name ``names`` finds in the call (add-subdomain's names)."""

        @functools.wraps(original)
        def call(adapter: Any, *args: Any, **kwargs: Any) -> Any:
            outermost = self._depth == 0
            self._depth += 1
            try:
                result = original(adapter, *args, **kwargs)
            finally:
                self._depth -= 1
            if outermost and self.task is not None and counters().scard(KILL_POINTS):
                labels = {self.task[2]} if names is None else names(args, kwargs, result)
                for label in sorted(labels):
                    self.kill(label, f"{point}:{self.task[1]}")
            return result

        return call

    def nested(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` counted as an adapter call: the calls inside it are not points."""

        @functools.wraps(original)
        def call(adapter: Any, *args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                return original(adapter, *args, **kwargs)
            finally:
                self._depth -= 1

        return call

    def connect(self) -> None:
        task_prerun.connect(self._on_prerun, weak=False)
        task_postrun.connect(self._on_postrun, weak=False)
        stage_claiming.connect(self._on_claiming, weak=False)
        stage_completed.connect(self._on_completed, weak=False)

    def _label_of(self, run_id: Any) -> str | None:
        from executions.models import Run

        row = Run.objects.filter(pk=run_id).values_list("execution__workflow", "execution__input")
        workflow, data = row.first() or (None, None)
        workflows = self.workflow if isinstance(self.workflow, tuple) else (self.workflow,)
        return self.label(data) if workflow in workflows and data else None

    def _on_prerun(self, sender: Any = None, task_id: str | None = None, **_: Any) -> None:
        if getattr(sender, "name", None) == RUN_STAGE:
            self.task, self._task_id = None, str(task_id)

    def _on_claiming(self, sender: Any = None, run_id: str = "", stage: str = "", **_: Any) -> None:
        """``before:<stage>``: the stage a message or the hand-off names, about to be claimed
        (the one before it committed)."""
        self.task = None
        if self._task_id is None:
            return  # not in a stage task (a test delivering stages itself)
        if not counters().scard(KILL_POINTS) and not self.armed():
            return  # nothing armed: no database read for every other stage
        label = self._label_of(run_id)
        if label is None:
            return
        self.task = (self._task_id, stage, label)
        if self.before_claim is not None:
            self.before_claim(label, stage)
        self.kill(label, f"before:{stage}")

    def _on_completed(self, sender: Any = None, stage: str = "", **_: Any) -> None:
        """``after:<stage>`` once the stage's success committed (the next not yet claimed)."""
        if self.task is not None and counters().scard(KILL_POINTS):
            self.kill(self.task[2], f"after:{stage}")

    def _on_postrun(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "name", None) == RUN_STAGE:
            self.task, self._task_id = None, None

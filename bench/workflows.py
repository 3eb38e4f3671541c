"""Workflows for ``python -m bench engine`` (registered in its worker through
ALFRED_EXTRA_WORKFLOWS): no provider, no work, only the engine's own cost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from executions.runtime.stage import StageContext
from workflows.base import LaneClaim, Workflow, WorkflowInput

STAGES = 4


class BenchInput(WorkflowInput):
    """``n`` tells runs apart; ``steps``: how many steps bench-steps runs."""

    n: int = 0
    steps: int = 0


class _Bench(Workflow):
    title = description = "benchmark"
    lane_description = "none"
    Input: ClassVar[type[WorkflowInput]] = BenchInput

    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None:
        return None


def _noop() -> None:
    return None


class Noop(_Bench):
    """``STAGES`` stages that do nothing: what a stage costs."""

    name = "bench-noop"
    stages = tuple(f"s{i}" for i in range(STAGES))

    def run_stage(self, stage: str, ctx: StageContext) -> Any:
        return {}


class Steps(_Bench):
    """One stage of ``steps`` no-op steps: what a step costs."""

    name = "bench-steps"
    stages = ("s0",)

    def run_stage(self, stage: str, ctx: StageContext) -> Any:
        for i in range(ctx.input.steps):
            ctx.step(f"step-{i}", _noop)
        return {}


WORKFLOWS = [Noop(), Steps()]

"""What a stage is given: the :class:`StageContext` every stage function (and every
compensation) annotates its ``ctx`` with, so that mypy checks each ``ctx.step``,
``ctx.wait_until`` and ``ctx.child`` in the workflows. The engine's ``Context`` is the one
implementation; this module imports nothing of Django's, so a workflow's types cost nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar, overload


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with full jitter: attempt n waits up to base·2ⁿ⁻¹, at most
    ``cap`` seconds; after ``max_attempts`` the step fails."""

    max_attempts: int = 5
    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * 2 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto


DEFAULT_RETRY = RetryPolicy()


InputT = TypeVar("InputT", covariant=True)
OutputT = TypeVar("OutputT")


class StageContext(Protocol[InputT]):
    """The durable primitives of one stage of one run. Each is recorded under its key: a
    replay (after a crash, a wait, a retry of the stage) returns what was recorded instead of
    doing it again. A wait raises out of the stage and the run sleeps without a worker.

    ``StageContext[ItsInput]``: ``ctx.input`` is the workflow's typed input (its
    model, ``workflows.inputs``); a bare ``StageContext`` is a context of any workflow (a
    step or a compensation shared between workflows)."""

    run_id: str
    execution_id: str
    workflow: str
    stage: str
    dry_run: bool

    @property
    def input(self) -> InputT:
        """The execution's canonical input, typed as its workflow declares it."""
        ...

    def step(
        self,
        key: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy = ...,
        mutation: bool | dict[str, Any] = ...,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once per run; ``mutation``: its output is a mutation
        receipt (resource, action, undo), which a rollback undoes."""
        ...

    @overload
    def output_of(self, stage: str) -> Any: ...
    @overload
    def output_of(self, stage: Callable[..., OutputT]) -> OutputT: ...
    def output_of(self, stage: str | Callable[..., Any]) -> Any:
        """An earlier stage's output in this run: by the stage's name, or by its function,
        which types it (``ctx.output_of(plan)`` is what ``plan`` returned, as ``plan``'s
        return annotation says)."""
        ...

    def now(self) -> datetime:
        """The time, recorded: a replay sees the same instant."""
        ...

    def sleep(self, key: str, seconds: float) -> None: ...

    def wait_until(
        self,
        key: str,
        probe: Callable[[], Any],
        *,
        every: float,
        timeout: float,
        wake_on: Sequence[str] = ...,
    ) -> Any:
        """Poll ``probe`` until it returns something truthy (recorded and returned)."""
        ...

    def wait_for_hook(
        self,
        name: str,
        *,
        token: str,
        payload: dict[str, Any] | None = ...,
        operator: bool = ...,
        expires_in: float | None = ...,
        expired_code: str = ...,
    ) -> dict[str, Any]:
        """Wait for a signal on ``token`` (an operator's approval, with ``operator``)."""
        ...

    def child(self, key: str, workflow: str, input: dict[str, Any]) -> dict[str, Any]:
        """Start a child execution and wait for its end."""
        ...

    def rollback_child(self, key: str, child_id: str) -> dict[str, Any]:
        """Roll a child back through its own rollback run and wait for it."""
        ...

    def heartbeat(self) -> AbstractContextManager[None]:
        """Keep the run's lease while a long block runs."""
        ...

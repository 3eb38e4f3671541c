"""What a workflow's drift check is given (docs/workflows.md, "The drift watch").

A workflow declares its check as ``drift`` in its ``stages.py``, beside ``verify``: a function
of a :class:`Recorded` (the succeeded execution's input, typed, and what its stages recorded)
that reads the providers through ``workflows/steps/`` — reads only, never a ``ctx.step``: a
check is no run and records no receipt — and returns the :class:`Finding` s of what is no longer
as the execution left it (none: all in place). The engine's watch (``executions.drift``) calls
it through the catalogue; it knows no workflow and no provider.

A check answers for what its own execution did: what another execution did (a child's
certificate, a later execution's change) is that one's to check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from executions.catalog import Finding

InputT = TypeVar("InputT", covariant=True)
OutputT = TypeVar("OutputT")

__all__ = ["Finding", "Recorded"]


class Recorded(Generic[InputT]):
    """A succeeded execution as its drift check reads it, and the time of the check (the
    database's clock, as every time Alfred compares)."""

    def __init__(
        self, execution_id: str, input: InputT, outputs: Mapping[str, Any], now: datetime
    ) -> None:
        self.execution_id = execution_id
        self.input = input
        self.now = now
        self._outputs = outputs

    @overload
    def output_of(self, stage: str) -> Any: ...
    @overload
    def output_of(self, stage: Callable[..., OutputT]) -> OutputT: ...
    def output_of(self, stage: str | Callable[..., Any]) -> Any:
        """What a stage recorded: by its name, or by its function (typed as it returns)."""
        name = stage if isinstance(stage, str) else stage.__name__
        return self._outputs[name]

    def has(self, stage: str | Callable[..., Any]) -> bool:
        """Whether the stage recorded an output (a skipped one did not)."""
        name = stage if isinstance(stage, str) else stage.__name__
        return self._outputs.get(name) is not None

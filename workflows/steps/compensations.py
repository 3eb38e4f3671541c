"""Each mutation and its compensation, declared together (docs/workflows.md).

A kind of mutation is declared once, ``CHANGE = mutation("aws.route53.zone", "change")``;
``@CHANGE`` marks the step function that performs it and returns its receipt
(``CHANGE.receipt(undo=..., before=..., after=...)``), and ``@CHANGE.undo`` the function beside
it that undoes such a receipt, registered with the engine's registry under
``resource``/``action``. A rollback run looks the undo up there: the engine never imports a
provider, and a mutation cannot exist without its compensation being declared next to it.

An undo checks first that the resource is still in the receipt's ``after`` state, and fails
with :class:`Drifted` (``code=drifted``, naming what differs) otherwise: it never clobbers a
change someone made since. A receipt marked ``ownership: unproven`` (a recovered lost
response) is undone only where the current state proves the change was ours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from executions.runtime.errors import FatalError
from executions.runtime.registry import compensation_register

F = TypeVar("F", bound=Callable[..., Any])
RECEIPT_KEYS = frozenset({"resource", "action", "undo", "before", "after"})


class Drifted(FatalError):
    code = "drifted"

    def __init__(self, resource: str, differences: list[dict[str, Any]]) -> None:
        super().__init__(
            f"{resource} changed since Alfred's change; not undone (an operator decides)",
            code="drifted",
            resource=resource,
            differences=differences,
        )


class Mutation:
    """A declared kind of mutation: ``resource``/``action`` and, once declared, its undo."""

    def __init__(self, resource: str, action: str) -> None:
        self.resource = resource
        self.action = action

    def __call__(self, apply: F) -> F:
        """Marks the step function that performs this kind of mutation (documentation in
        the code: the function and its undo stand side by side)."""
        return apply

    def undo(self, compensate: F) -> F:
        compensation_register(self.resource, self.action, compensate)
        return compensate

    def receipt(
        self, *, undo: Mapping[str, Any], before: Any, after: Any, **extra: Any
    ) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "action": self.action,
            "undo": dict(undo),
            "before": before,
            "after": after,
            **extra,
        }


def mutation(resource: str, action: str) -> Mutation:
    return Mutation(resource, action)

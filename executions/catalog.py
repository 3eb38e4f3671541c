"""The workflows Alfred accepts, as acceptance, the controls, the API and the admin see them.

The workflows app registers each at start (``workflows.apps``); nothing here imports a
workflow, so the dependency points workflows → executions. Registering a workflow also gives
the engine its definitions (``executions.runtime.registry``). A workflow registered under a
name already taken replaces the earlier one: the tests' changed workflows stand in for one
of the five that way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from executions.runtime.registry import Definition, register

if TYPE_CHECKING:
    from executions.models import Execution


@dataclass(frozen=True)
class FieldError:
    """One invalid field: ``field`` is a JSON Pointer into the request body (RFC 6901)."""

    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class InvalidInput(Exception):
    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.field}: {e.message}" for e in errors))
        self.errors = errors


@dataclass(frozen=True)
class LaneClaim:
    """The lane an execution must hold before it runs.

    ``token`` names what the holder will do to the lane's subject (e.g. the version it deploys).
    A claim whose token differs from the owner's or from any queued claim's fails closed
    (409 ``lane_conflict``); claims without a token only queue.
    """

    key: str
    token: str | None = None


@dataclass(frozen=True)
class Cell:
    """One cell of a plan table: its lines, a small note under them, its CSS classes."""

    lines: tuple[str, ...] = ()
    note: str = ""
    css: str = ""


@dataclass(frozen=True)
class PlanRow:
    """One row of a plan table; ``change`` (added, deleted, replaced, unchanged) colours it."""

    cells: tuple[Cell, ...]
    change: str = ""


@dataclass(frozen=True)
class ApprovalView:
    """What a workflow shows of a plan waiting for an operator: facts (label, value), a table
    of what the plan changes (its caption, column heads and rows) and the batch it will send,
    item by item. The engine draws it as it is; an empty view shows only the recorded payload."""

    facts: tuple[tuple[str, str], ...] = ()
    caption: str = ""
    head: tuple[str, ...] = ()
    rows: tuple[PlanRow, ...] = ()
    batch_caption: str = ""
    batch: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The view as plain text, as the commands print it: the facts, the table (a row's
        cells side by side, ``|`` between), the batch."""
        text = [f"{label}: {value}" for label, value in self.facts]
        if self.rows:
            text += [self.caption] if self.caption else []
            text += [" | ".join(self.head)] if self.head else []
            for row in self.rows:
                cells = [" ".join(cell.lines) or "-" for cell in row.cells]
                text.append(" | ".join(cells))
        if self.batch:
            text += [self.batch_caption or "Batch", *(f"  {item}" for item in self.batch)]
        return text


@dataclass(frozen=True)
class Finding:
    """One thing a drift check found not as a succeeded execution left it: ``what`` names it
    as an operator would (in the workflow's words), ``expected`` is what the execution left,
    ``found`` what is there now (None: nothing). JSON values both."""

    what: str
    expected: Any
    found: Any

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "expected": self.expected, "found": self.found}


class Workflow(Protocol):
    """What is read of a workflow outside it (``workflows.base.Workflow`` is the one kind)."""

    @property
    def name(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]:
        """The schema input is validated against (the shape; ``validate`` checks the rest)."""

    @property
    def served_schema(self) -> dict[str, Any]:
        """The input schema as the API serves it (a property may document a narrower form
        than it validates)."""

    @property
    def stages(self) -> tuple[str, ...]: ...
    @property
    def supports_continuation(self) -> bool: ...
    @property
    def queues_on_a_lane(self) -> bool: ...
    @property
    def continuation_skips(self) -> tuple[str, ...] | None: ...
    @property
    def replaced_by_another_token(self) -> bool: ...

    def validate(self, data: Any) -> None:
        """Raise :class:`InvalidInput` with every field error."""

    def canonicalize(self, data: Mapping[str, Any]) -> dict[str, Any]: ...
    def lane(self, canonical: Mapping[str, Any]) -> LaneClaim | None: ...
    def continue_after_success(
        self, canonical: Mapping[str, Any], stage_outputs: Mapping[str, Any]
    ) -> bool: ...
    def describe(self) -> dict[str, Any]: ...
    def subject(self, data: Mapping[str, Any]) -> str:
        """What an execution with input ``data`` acts on, as an operator names it ("" when the
        input does not say)."""

    def approval_view(self, payload: Mapping[str, Any]) -> ApprovalView:
        """How the admin and the commands show the plan of a pending approval's ``payload``."""

    @property
    def searched_fields(self) -> tuple[str, ...]:
        """The input fields the admin's search looks in."""

    def definitions(self) -> tuple[Definition, ...]:
        """The current definition first, then the earlier ones it still serves."""

    @property
    def watched(self) -> bool:
        """Whether it declares a drift check (its succeeded executions are watched)."""

    def drift_check(
        self,
        execution_id: str,
        data: Mapping[str, Any],
        outputs: Mapping[str, Any],
        now: datetime,
    ) -> list[Finding]:
        """With reads only, what of a succeeded execution's post-condition no longer holds
        (empty: all in place), from its stored input ``data`` and its stages' ``outputs``, at
        ``now`` (the database's clock).
        Raises when the providers cannot be read: no answer is not "in place"."""

    def redo_input(
        self, data: Mapping[str, Any], outputs: Mapping[str, Any], findings: list[Any]
    ) -> dict[str, Any]:
        """The input that starts a drifted execution's operation again (the ``redo`` control):
        its own, or one that repairs what it made rather than making it anew."""


_WORKFLOWS: dict[str, Workflow] = {}


def workflow_register(workflow: Workflow) -> None:
    _WORKFLOWS[workflow.name] = workflow
    register(*workflow.definitions())


def workflow_get(name: str) -> Workflow:
    """Raises KeyError for an unknown name."""
    return _WORKFLOWS[name]


def workflow_find(name: str) -> Workflow | None:
    """The workflow of that name, or None (an execution of a workflow since removed)."""
    return _WORKFLOWS.get(name)


def execution_subject(execution: Execution) -> str:
    """What the execution acts on, as its workflow names it (``subject`` of the catalogue)."""
    workflow = workflow_find(execution.workflow)
    data = execution.input if isinstance(execution.input, Mapping) else {}
    return workflow.subject(data) if workflow is not None else ""


def searched_fields() -> tuple[str, ...]:
    """Every input field some workflow has the admin search in, each once."""
    return tuple(dict.fromkeys(f for wf in _WORKFLOWS.values() for f in wf.searched_fields))


def workflows_all() -> list[Workflow]:
    """In the order they were registered: the five as GET /api/v1/workflows lists them, then
    the tests' own."""
    return list(_WORKFLOWS.values())

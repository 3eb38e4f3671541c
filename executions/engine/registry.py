"""What the engine runs, registered by name at start (``executions.apps``): the workflows'
definitions, the compensations of their mutations, and the claim guards. The engine imports
no workflow and no provider: a rollback finds the undo of a mutation receipt here, by the
receipt's ``resource`` and ``action``. This module imports nothing else of the engine's but
its errors, so nothing the engine builds on it can form a circle."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from executions.engine.errors import FatalError


@dataclass(frozen=True)
class Definition:
    name: str
    stages: tuple[str, ...]
    run_stage: Callable[[str, Any], Any]  # (stage, the stage's Context) -> its output
    canonicalize: Callable[[Mapping[str, Any]], dict[str, Any]]
    deadline_seconds: float | None = None


_DEFINITIONS: dict[str, Definition] = {}

# Checks a claim must pass besides the engine's own (the lanes app registers one: a run may
# start only under its lane's ownership). Each gets the execution (its row locked by the
# claim) and returns why it may not run now, or None.
ClaimGuard = Callable[[Any], "str | None"]
_CLAIM_GUARDS: list[ClaimGuard] = []


def claim_guard_register(guard: ClaimGuard) -> None:
    if guard not in _CLAIM_GUARDS:
        _CLAIM_GUARDS.append(guard)


def claim_refusal(execution: Any) -> str | None:
    for guard in _CLAIM_GUARDS:
        reason = guard(execution)
        if reason is not None:
            return reason
    return None


def register(definition: Definition) -> None:
    _DEFINITIONS[definition.name] = definition


def definition_get(name: str) -> Definition:
    try:
        return _DEFINITIONS[name]
    except KeyError:
        raise FatalError(
            f"no workflow named {name!r} is registered", code="unknown_workflow"
        ) from None


# A compensation: (the stage's Context, the mutation receipt) -> what it restored. It undoes
# exactly what the receipt says, and fails with code ``drifted`` when the resource is no
# longer in the receipt's ``after`` state.
Compensation = Callable[[Any, Mapping[str, Any]], Any]
_COMPENSATIONS: dict[tuple[str, str], Compensation] = {}


def compensation_register(resource: str, action: str, undo: Compensation) -> None:
    """Declare how a mutation receipt of ``resource``/``action`` is undone. Registered once:
    two undos for one kind of mutation would make rollback depend on import order."""
    known = _COMPENSATIONS.get((resource, action))
    if known is not None and known is not undo:
        raise ValueError(f"a compensation for {resource}/{action} is registered already")
    _COMPENSATIONS[(resource, action)] = undo


def compensation_get(resource: str, action: str) -> Compensation:
    try:
        return _COMPENSATIONS[(resource, action)]
    except KeyError:
        raise FatalError(
            f"no compensation is registered for {resource}/{action}",
            code="no_compensation",
            resource=resource,
            action=action,
        ) from None

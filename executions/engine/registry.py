"""What the engine runs: definitions registered by name. The engine imports no workflow;
``executions.apps`` registers the workflows (and any ``ALFRED_EXTRA_WORKFLOWS``) at start."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from executions.engine.errors import FatalError

if TYPE_CHECKING:
    from executions.engine.context import Context


@dataclass(frozen=True)
class Definition:
    name: str
    stages: tuple[str, ...]
    run_stage: Callable[[str, Context], Any]
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

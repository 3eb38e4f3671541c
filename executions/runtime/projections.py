"""Projections the engine writes in the transaction of its own change: the execution's
visible state, with the event that announces it."""

from __future__ import annotations

from typing import Any

from executions.events import EventType
from executions.models import Execution
from executions.outbox import Event, event_key, events_emit


def start_state_set(
    execution: Execution,
    state: str,
    *,
    run_id: str,
    error: dict[str, Any] | None = None,
    **payload: Any,
) -> None:
    """Move ``execution`` (locked by the caller) to start ``state`` for ``run_id`` and emit
    ``execution.<state>``, keyed by run so that a re-emission is a no-op."""
    execution.start_state = state
    execution.start_error = error
    execution.save(update_fields=["start_state", "start_error", "updated_at"])
    events_emit(
        execution.id,
        [start_state_event(execution.id, state, run_id=run_id, error=error, **payload)],
    )


def start_state_event(
    execution_id: str | None,
    state: str,
    *,
    run_id: str,
    error: dict[str, Any] | None = None,
    **payload: Any,
) -> Event:
    """The event that announces start ``state`` (for a caller that writes the projection and
    emits its events together; ``execution_id`` None: named, ``outbox.event_key``)."""
    return Event(
        type=EventType(f"execution.{state}"),
        key=event_key(execution_id, f"{run_id}:{state}"),
        payload={"run": run_id, **({"error": error} if error else {}), **payload},
    )

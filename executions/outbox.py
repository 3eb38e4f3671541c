"""The transactional outbox: every transition writes its event in the transition's
transaction, with a stable ``key`` (a retried emission is a no-op) and a gapless
per-execution ``sequence`` allocated under the execution's row lock."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction

from alfred.db import Statement, statements_run
from alfred.metrics import TRANSITIONS
from executions.events import EventType, payload_problem
from executions.models import (
    DeliveryStatus,
    Execution,
    ExecutionStatus,
    OutboxEvent,
    WebhookDelivery,
    WebhookEndpoint,
)

# The channel every emitted event is announced on, at its transaction's commit (PostgreSQL
# delivers a NOTIFY only then, and never for a rolled-back transaction). The payload is
# "<execution id> <sequence>"; listeners read the event itself from the table.
CHANNEL = "alfred_events"

log = logging.getLogger(__name__)


# Events of one execution in one statement, in the order given: lock the execution row, leave
# out the keys already emitted, insert the rest at ``last_sequence + 1, + 2...``, owe each to
# every active webhook endpoint that wants its type, advance ``last_sequence``, announce each
# on ``CHANNEL``. Table names come from model metadata; every value is a bound parameter.
# ``OFFSET 0`` keeps the key check a probe of the key's unique index per event given: made an
# anti-join, it is planned for the hundred rows a set-returning function is guessed to give,
# and hashing the whole outbox beats a hundred probes (a prepared statement's generic plan
# kept that choice while the table grew).
def emit_parts(locked: str, *, advance: bool = True, named: bool = False) -> str:
    """The emission's ``WITH`` parts after the one named ``locked`` (the execution's row,
    locked: its ``id``, ``last_sequence`` and ``workflow``; no row, nothing emitted), for a
    statement that emits with other writes: parameters ``execution`` and ``events``. Its
    answer is ``EMITTED`` over ``inserted``. Without ``advance`` the statement sets the
    execution's ``last_sequence`` itself, to ``(SELECT max(sequence) FROM inserted)``, in
    its own update of that row (one statement cannot update a row twice). ``named``: the
    events' keys are their names under the execution (``event_key(None, name)``), for a
    statement that finds the execution itself; each key is written as ``event_key`` writes
    it, with the locked row's id (the ``execution`` parameter is then not read)."""
    key = f"{locked}.id || ':' || given.key" if named else "given.key"
    execution = f"(SELECT id FROM {locked})" if named else "%(execution)s"  # noqa: S608
    advancing = f"""advanced AS (
        UPDATE {Execution._meta.db_table} AS advancing
        SET last_sequence = (SELECT max(sequence) FROM inserted)
        WHERE advancing.id = {execution} AND EXISTS (SELECT 1 FROM inserted)
        RETURNING advancing.last_sequence
    )"""  # noqa: S608
    return f"""
    fresh AS (
        SELECT {key} AS key, given.type, given.payload,
               row_number() OVER (ORDER BY given.position) AS position
        FROM {locked + " CROSS JOIN " if named else ""}ROWS FROM (
            jsonb_to_recordset(%(events)s::jsonb) AS (key text, type text, payload jsonb)
        ) WITH ORDINALITY AS given (key, type, payload, position)
        WHERE NOT EXISTS (
            SELECT 1 FROM {OutboxEvent._meta.db_table} AS held WHERE held.key = {key}
            OFFSET 0
        )
    ), inserted AS (
        INSERT INTO {OutboxEvent._meta.db_table}
            (execution_id, sequence, key, type, payload, created_at)
        SELECT {locked}.id, {locked}.last_sequence + fresh.position, fresh.key, fresh.type,
               fresh.payload, now()
        FROM {locked}, fresh
        ON CONFLICT (key) DO NOTHING
        RETURNING id, execution_id, sequence, type, payload->'error'->>'code' AS error_code
    ), owed AS (
        INSERT INTO {WebhookDelivery._meta.db_table}
            (endpoint_id, event_id, status, attempts, round_attempts, next_attempt_at,
             last_error, created_at)
        SELECT endpoint.id, inserted.id, '{DeliveryStatus.PENDING.value}', 0, 0, now(), '', now()
        FROM inserted JOIN {WebhookEndpoint._meta.db_table} AS endpoint
            ON endpoint.active
            AND (endpoint.event_types = '[]'::jsonb
                 OR jsonb_exists(endpoint.event_types, inserted.type))
        RETURNING id
    ){", " + advancing if advance else ""}"""  # noqa: S608


# What an emission answers, a row per event emitted (``emission_read`` reads it): its sequence,
# the NOTIFY, the deliveries owed, and what the transition's log line names.
EMITTED = f"""
    inserted.sequence,
    pg_notify('{CHANNEL}', inserted.execution_id || ' ' || inserted.sequence),
    (SELECT count(*) FROM owed),
    inserted.type, inserted.execution_id, (SELECT workflow FROM locked),
    inserted.error_code
"""  # noqa: S608 - a constant channel name

_EMIT_SQL = f"""
    WITH locked AS (
        SELECT id, last_sequence, workflow FROM {Execution._meta.db_table}
        WHERE id = %(execution)s
        FOR UPDATE
    ), {emit_parts("locked")}
    SELECT {EMITTED}
    FROM inserted ORDER BY inserted.sequence
"""  # noqa: S608


@dataclass(frozen=True)
class Event:
    """One event for :func:`events_emit`: of a public type, its payload as the catalogue
    declares it (``executions.events``; anything else is refused, ValueError, before it is
    written)."""

    type: EventType
    key: str
    payload: Mapping[str, Any]

    def __post_init__(self) -> None:
        problem = payload_problem(self.type, self.payload)
        if problem is not None:
            raise ValueError(problem)


def event_emit(
    *, execution_id: str, type: EventType, key: str, payload: Mapping[str, Any]
) -> int | None:
    """Append one event; returns its sequence, or None when ``key`` was already emitted.

    Two emitters for one execution serialize on its row lock, so sequences stay gapless and
    unique, and an execution's events commit in sequence order. Must run inside the caller's
    transaction: the event, its deliveries and its NOTIFY commit with the transition or not
    at all."""
    emitted = events_emit(execution_id, [Event(type, key, payload)])
    return emitted[0] if emitted else None


def events_emit(execution_id: str, events: Sequence[Event]) -> list[int]:
    """Append ``events`` to one execution's log in one statement, in order; returns the
    sequences of those not emitted before (a retried emission is a no-op).

    With more than one, the caller holds the execution's row lock from an earlier statement
    of its transaction (the engine's writers lock it first): this statement's snapshot then
    sees every event committed for the execution, so a key emitted before is left out before
    the rest are numbered, never found only at insert (which would leave a gap)."""
    (emitted,) = statements_run([events_emit_statement(execution_id, events)])
    return emitted or []


def events_emit_statement(execution_id: str, events: Sequence[Event]) -> Statement | None:
    """:func:`events_emit` as a statement for :func:`alfred.db.statements_run` (to travel
    with the transition's other writes); its answer: the sequences given."""
    if not events:
        return None
    return Statement(
        _EMIT_SQL, {"execution": execution_id, "events": events_param(events)}, emission_read
    )


def events_param(events: Sequence[Event]) -> str:
    """``events`` as the emission's ``events`` parameter."""
    payload = [{"key": e.key, "type": e.type, "payload": e.payload} for e in events]
    return json.dumps(payload, cls=DjangoJSONEncoder)


# Called once an emission that owed webhook deliveries commits: the relay's hint that it has
# work (``relay_publish``, connected by ``DeliveryConfig.ready``; the relay's scan is the
# guarantee). The outbox knows no relay.
_ON_OWED: list[Callable[[], None]] = []


def deliveries_owed_connect(callback: Callable[[], None]) -> None:
    if callback not in _ON_OWED:
        _ON_OWED.append(callback)


# An event of type "execution.<status>" is a transition of the execution to that status.
STATUSES = frozenset(ExecutionStatus.values)


def emission_read(rows: Sequence[Sequence[Any]]) -> list[int]:
    """The sequences the emission gave; the deliveries it owed are sent after commit, and
    the execution's transitions told once they are committed."""
    if any(row[2] for row in rows):
        for owed in _ON_OWED:
            transaction.on_commit(owed)
    for _, _, _, type, execution_id, workflow, error_code in rows:
        status = type.removeprefix("execution.")
        if status in STATUSES and status != type:
            transaction.on_commit(
                partial(_transitioned, execution_id, workflow, status, error_code)
            )
    return [int(row[0]) for row in rows]


def _transitioned(
    execution_id: str, workflow: str, status: str, error_code: str | None = None
) -> None:
    """One line per transition (the outbox sees every one, in the transaction that made it),
    and the count of executions that reached each status. A transition with an error (failed,
    canceled) names its code, the API's ``error.code``: what an operator greps and counts by
    (a JSON line carries it as ``error_code`` too)."""
    TRANSITIONS.labels(workflow, status).inc()
    if error_code:
        log.info(
            "%s %s (%s): %s",
            execution_id,
            status,
            workflow,
            error_code,
            extra={"execution": execution_id, "error_code": error_code},
        )
        return
    log.info("%s %s (%s)", execution_id, status, workflow, extra={"execution": execution_id})


def event_key(execution_id: str | None, name: str) -> str:
    """The key of the execution's event ``name`` (its outbox row's, unique: an emission made
    again under the same key is a no-op). Without ``execution_id``, the name alone: for an
    emission that finds the execution itself and writes each key as here
    (``emit_parts(named=True)``)."""
    return name if execution_id is None else f"{execution_id}:{name}"

"""The transactional outbox: every transition writes its event in the transition's
transaction, with a stable ``key`` (a retried emission is a no-op) and a gapless
per-execution ``sequence`` allocated under the execution's row lock."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from executions.models import Execution, OutboxEvent

# Table names come from model metadata; every value is a bound parameter.
_EMIT_SQL = f"""
    WITH locked AS (
        SELECT id, last_sequence FROM {Execution._meta.db_table} WHERE id = %(execution)s
        FOR UPDATE
    ), inserted AS (
        INSERT INTO {OutboxEvent._meta.db_table}
            (execution_id, sequence, key, type, payload, created_at)
        SELECT locked.id, locked.last_sequence + 1, %(key)s, %(type)s, %(payload)s, now()
        FROM locked
        ON CONFLICT (key) DO NOTHING
        RETURNING execution_id, sequence
    )
    UPDATE {Execution._meta.db_table} AS e SET last_sequence = inserted.sequence
    FROM inserted WHERE e.id = inserted.execution_id
    RETURNING inserted.sequence
"""  # noqa: S608


def event_key(execution_id: str, name: str) -> str:
    return f"{execution_id}:{name}"


def event_emit(*, execution_id: str, type: str, key: str, payload: dict[str, Any]) -> int | None:
    """Append one event; returns its sequence, or None when ``key`` was already emitted.

    One statement: lock the execution row, insert at ``last_sequence + 1`` unless the key
    exists, advance ``last_sequence``. Two emitters for one execution serialize on the row
    lock, so sequences stay gapless and unique. Must run inside the caller's transaction.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _EMIT_SQL,
            {
                "execution": execution_id,
                "key": key,
                "type": type,
                "payload": json.dumps(payload, cls=DjangoJSONEncoder),
            },
        )
        row = cursor.fetchone()
    return row[0] if row else None

"""The stage path's rows in few round trips: several rows written in one statement (rows
read by hand-written SQL are made into model instances by :func:`alfred.db.instance`).

``rows_update`` sets fields of rows of different tables, each found by its primary key, as
data-modifying ``WITH`` queries of one statement. Each row must be one the caller's
transaction has locked already (the stage path's rows are, by its locked read), so the
statement waits on nothing and every row is found; a row not found is a bug, and raises.
One statement cannot change one row twice: one entry per row. ``transition_write`` sends
that statement and the transition's event emission together, in one round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from alfred.db import Statement, statements_run
from executions.outbox import Event, events_emit_statement

Change = tuple[type[Model], Any, Mapping[str, Any]]  # (model, primary key, {field: value})


def transition_write(changes: Sequence[Change], execution_id: str, events: Sequence[Event]) -> None:
    """A transition's rows and its events (:func:`events_emit`), in one round trip."""
    statements_run([rows_update_statement(changes), events_emit_statement(execution_id, events)])


def rows_update(changes: Sequence[Change]) -> None:
    statements_run([rows_update_statement(changes)])


def rows_update_statement(changes: Sequence[Change]) -> Statement | None:
    """The statement that writes ``changes`` (None when there is nothing to write), for
    :func:`alfred.db.statements_run`; its answer raises unless every row was found, once."""
    changes = [change for change in changes if change[2]]
    if not changes:
        return None
    quote = connection.ops.quote_name
    queries, params = [], []
    for position, (model, pk, values) in enumerate(changes):
        meta = model._meta
        assignments = []
        for name, value in values.items():
            field = meta.get_field(name)
            if not isinstance(field, Field):
                raise TypeError(f"{model.__name__}.{name} is not a column")
            assignments.append(f"{quote(str(field.column))} = %s")
            params.append(field.get_db_prep_save(value, connection))
        params.append(meta.pk.get_db_prep_value(pk, connection))
        table, key = quote(meta.db_table), quote(str(meta.pk.column))
        sets = ", ".join(assignments)
        update = f"UPDATE {table} SET {sets} WHERE {key} = %s RETURNING 1"  # noqa: S608
        queries.append(f"u{position} AS ({update})")

    def found_each(rows: Sequence[Sequence[Any]]) -> None:
        missing = [changes[i][:2] for i, count in enumerate(rows[0]) if count != 1]
        if missing:
            raise LookupError(f"rows not updated (not found): {missing}")

    # names of our own tables and columns only: every value is a parameter
    counts = ", ".join(f"(SELECT count(*) FROM u{i})" for i in range(len(changes)))  # noqa: S608
    return Statement(f"WITH {', '.join(queries)} SELECT {counts}", params, found_each)


def fields_of(instance: Model, names: Sequence[str]) -> Change:
    """The change that writes ``names`` of ``instance`` as it holds them now."""
    return type(instance), instance.pk, {name: getattr(instance, name) for name in names}

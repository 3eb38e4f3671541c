"""Prepared statements for the hot paths' hand-written SQL.

Django's psycopg backend binds parameters on the client (``ClientCursor``): every statement
reaches PostgreSQL as new text, parsed and planned again. The stage path's statements (the
locked read of an execution and its run, the rows written at a claim or a completion, the
terminal transition, the outbox emission) are few, fixed in shape and run for every stage:
planning them cost more than running them (about 0.5 ms of 0.7 ms each, measured on the
embedded PostgreSQL 18). ``prepared_cursor`` runs them as server-side prepared statements
instead, parsed once per connection; after five executions PostgreSQL keeps a generic plan
when it is no worse than a custom one (``plan_cache_mode = auto``), which for these
primary-key lookups it is.

The cursor is Django's own wrapper around psycopg's server-binding cursor (its raw form:
the statement's placeholders are turned into PostgreSQL's once per text, here, where psycopg
would turn them again at each execution of a statement past its cache's limits), so errors are
Django's (``IntegrityError``, ``OperationalError``...), ``CaptureQueriesContext`` and the
query-count tests see every statement, and a statement joins the connection's transaction as
any other. Only this cursor prepares: the connection's ``prepare_threshold`` is raised from
``None`` (preparing off) to a number no statement reaches, so psycopg prepares exactly what
this cursor asks it to (``prepare=True``), and Django's own queries stay as they were.

``statements_run`` sends several such statements in one round trip (a psycopg pipeline): a
transition's rows and its events travel together, answered together.

``row_fetched`` and ``instances`` read one prepared row and split it into model instances,
``insert_statement`` writes new rows for ``statements_run``: the hot reads and writes (the
engine's locked read, a token, an acceptance) without the ORM's compilation per query.

Prepared statements live in the server session: behind a transaction-mode pooler (PgBouncer
before 1.22: it keeps prepared statements from 1.21, and psycopg sends ``DEALLOCATE ALL`` after
a rollback, which it takes from 1.22) they must be off; set ``ALFRED_DB_PREPARED=0``. A
migration that changes the type of a column these statements return makes each live connection
fail once ("cached plan must not change result type"): that transaction rolls back (a stage's
outcome is written again after its lease, as after any failed write) and psycopg prepares
afresh.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import cache, lru_cache
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.db import Error, connection
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, JSONField, Model

# psycopg prepares a statement by itself after this many executions of it: never, here.
_NEVER = 2**31 - 1


def prepared_cursor() -> CursorWrapper:
    """A cursor of the current connection whose statements are prepared (see the module)."""
    if not settings.ALFRED_DB_PREPARED:
        return connection.cursor()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        raw.prepare_threshold = _NEVER
    # _prepare_cursor: Django's wrapping of a driver cursor (thread check, the debug wrapper
    # that records queries); with it, this cursor is Django's in all but binding.
    with connection.wrap_database_errors:
        return connection._prepare_cursor(_PreparedCursor(raw))  # type: ignore[attr-defined]


class _PreparedCursor(psycopg.RawCursor[Any]):
    """psycopg's own cursor: parameters bound on the server, each statement prepared. Its
    placeholders (Django's ``%s`` and ``%(name)s``) become PostgreSQL's ``$n`` here, once per
    statement text (``_raw``), not in psycopg at every execution: psycopg keeps that work
    only for a statement under 4096 bytes and 50 parameters, and a one-statement transition
    is longer (its text was parsed again for every stage)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if params is None:
            return super().execute(query, None, prepare=True)
        if not isinstance(query, str):
            raise TypeError(f"a prepared statement's text is a str, not {type(query).__name__}")
        raw, names, count = _raw(query)
        if isinstance(params, Mapping) != bool(names) and count:
            raise psycopg.ProgrammingError(
                "named placeholders take a mapping, positional ones a sequence"
            )
        if isinstance(params, Mapping):
            missing = [name for name in names if name not in params]
            if missing:
                raise psycopg.ProgrammingError(f"no value for {', '.join(missing)}")
            params = [params[name] for name in names]
        elif len(params) != count:
            raise psycopg.ProgrammingError(
                f"the statement takes {count} parameters, {len(params)} were given"
            )
        return super().execute(raw, params, prepare=True)


_PLACEHOLDER = re.compile(r"%(?:\((?P<name>[^)]+)\))?(?P<kind>.)")


@lru_cache(maxsize=1024)
def _raw(query: str) -> tuple[bytes, tuple[str, ...], int]:
    """``query`` with PostgreSQL's placeholders (``$1``...) for psycopg's, as psycopg itself
    turns them (``%%`` a ``%``, a name used twice one parameter), the parameters' names in
    their order (none: the parameters are a sequence, in order) and how many it takes."""
    names: list[str] = []
    positional = 0

    def placeholder(match: re.Match[str]) -> str:
        nonlocal positional
        name, kind = match.group("name"), match.group("kind")
        if kind == "%" and name is None:
            return "%"
        if kind != "s":
            raise ValueError(f"unsupported placeholder {match.group(0)!r} in {query[:60]!r}")
        if name is None:
            positional += 1
            return f"${positional}"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    raw = _PLACEHOLDER.sub(placeholder, query)
    if names and positional:
        raise ValueError(f"named and positional placeholders mixed in {query[:60]!r}")
    return raw.encode(), tuple(names), len(names) or positional


Rows = list[tuple[Any, ...]]


def _as_is(rows: Rows) -> Any:
    return rows


@dataclass(frozen=True)
class Statement:
    """One statement for :func:`statements_run`, with how its rows are read (checked, made
    into what its caller wants) once they are in."""

    sql: str
    params: Any = None
    answer: Callable[[Rows], Any] = _as_is


def statements_run(statements: Sequence[Statement | None]) -> list[Any]:
    """Run ``statements`` in order, prepared, and return each one's answer in its place (None
    in place of None); with more than one, in one round trip: sent together in a pipeline,
    answered together at its end. An error in one skips those after it (PostgreSQL ignores
    the rest of a pipeline after an error) and is raised as Django's; the caller's
    transaction is then aborted, as after any failed statement. Outside a transaction the
    statements sent together are one implicit transaction (they end at one Sync): writes
    land together or not at all, and each statement still reads in a snapshot of its own
    (READ COMMITTED). The answers are made in order, after every row is in: one that raises
    stops the rest from being made."""
    given = [statement for statement in statements if statement is not None]
    if len(given) <= 1 or not settings.ALFRED_DB_PREPARED:
        rows = []
        for statement in given:
            with prepared_cursor() as cursor:
                cursor.execute(statement.sql, statement.params)
                rows.append(cursor.fetchall())
    else:
        cursors = [prepared_cursor() for _ in given]
        try:
            with connection.wrap_database_errors:
                _pipelined(cursors, given)
            # the pipeline's end waited for every answer: each cursor holds its own now
            rows = [cursor.fetchall() for cursor in cursors]
        finally:
            for cursor in cursors:
                cursor.close()
    answers = iter(statement.answer(found) for statement, found in zip(given, rows, strict=True))
    return [None if statement is None else next(answers) for statement in statements]


def _pipelined(cursors: Sequence[CursorWrapper], given: Sequence[Statement]) -> None:
    """Sends ``given`` in one pipeline and waits for every answer. A statement's error can
    come back while later ones are still being sent; the pipeline's end then fails as well
    ("pipeline aborted"), which psycopg would log as a warning of its own beside the error
    the caller gets (a lost race on a unique index, which acceptance retries, left a WARNING
    in the web log). The first error is raised, alone: the end's is its echo."""
    failed: Exception | None = None
    try:
        with connection.connection.pipeline():
            for cursor, statement in zip(cursors, given, strict=True):
                try:
                    cursor.execute(statement.sql, statement.params)
                except (Error, psycopg.Error) as exc:  # Django's (its cursor's) or the driver's
                    failed = exc
                    break
    except psycopg.Error:
        if failed is None:
            raise
    if failed is not None:
        raise failed


def columns(model: type[Model], alias: str) -> str:
    """The select list of every column of ``model``, as :func:`instance` reads them."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(str(f.column))}" for f in model._meta.concrete_fields)


@dataclass(frozen=True)
class _Reading:
    """How :func:`instance` reads a model's row, worked out once per model (the hot path)."""

    attnames: list[str]
    converters: list[Callable[[Any, Any, Any], Any] | None]  # ``from_db_value``, if any
    pk: int  # the primary key's place in the row


@cache
def _reading(model: type[Model]) -> _Reading:
    fields = model._meta.concrete_fields
    attnames = [f.attname for f in fields]
    return _Reading(
        attnames,
        [getattr(f, "from_db_value", None) for f in fields],
        attnames.index(model._meta.pk.attname),
    )


_M = TypeVar("_M", bound=Model)


def instance(model: type[_M], values: Sequence[Any]) -> _M:
    """A ``model`` instance from the values of :func:`columns`, each converted as the ORM
    would (``from_db_value``: JSON decoded)."""
    reading = _reading(model)
    converted = [
        v if convert is None else convert(v, None, connection)
        for convert, v in zip(reading.converters, values, strict=True)
    ]
    return model.from_db(connection.alias, reading.attnames, converted)


def row_fetched(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """The one row of a prepared statement, or None."""
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        row: tuple[Any, ...] | None = cursor.fetchone()
    return row


def instances(row: Sequence[Any], *models: type[Model]) -> tuple[list[Any], Sequence[Any]]:
    """``row`` read as the :func:`columns` of each of ``models`` in turn: an instance of each
    (None for one whose primary key is NULL: an outer join found none), and what follows."""
    found: list[Any] = []
    start = 0
    for model in models:
        end = start + len(_reading(model).attnames)
        values = row[start:end]
        found.append(None if values[_reading(model).pk] is None else instance(model, values))
        start = end
    return found, row[start:]


def insert_statement(objs: Sequence[Model]) -> Statement:
    """The INSERT of ``objs`` (new instances, not saved yet) for :func:`statements_run`, each
    value prepared as the ORM's own insert would (``pre_save``: an ``auto_now_add`` time is
    set on the instance; ``get_db_prep_save``). An automatic primary key is left to the
    database; the answer sets each instance's key.

    A model's rows travel as one JSON parameter that PostgreSQL reads into rows of the table
    (``json_populate_recordset``): the statement's text is the same whatever the number of
    rows, and short. psycopg parses a statement's placeholders again for every execution
    once it has more than 50 parameters (its cache stops there), which a row per stage
    reached.

    Rows of several models go in ONE statement, a data-modifying ``WITH`` part per model in
    the order they first appear: a statement's parts see the same snapshot, and foreign keys
    are checked at the statement's end (Django's, DEFERRABLE INITIALLY DEFERRED, at commit),
    so a row may name one inserted beside it. One statement costs a round trip's share of
    parsing, binding and answering once instead of per model."""
    groups: dict[type[Model], list[Model]] = {}
    for obj in objs:
        groups.setdefault(type(obj), []).append(obj)
    parts = [_insert(model, rows) for model, rows in groups.items()]
    params = [rows for _, rows in parts]
    if len(parts) == 1:
        sql = parts[0][0]
    else:
        keys = tuple(str(model._meta.pk.column) for model in groups)
        sql = _with_inserts(tuple(part_sql for part_sql, _ in parts), keys)

    def inserted(rows: Rows) -> None:
        given: dict[int, list[Any]] = {}
        for row in rows:
            part, pk = row if len(parts) > 1 else (0, row[0])
            given.setdefault(part, []).append(pk)
        for part, (model, group) in enumerate(groups.items()):
            for obj, pk in zip(group, given.get(part, []), strict=True):
                obj.pk = model._meta.pk.to_python(pk)
                obj._state.adding = False

    return Statement(sql, params, inserted)


def insert_part(obj: Model, *, when: str) -> tuple[str, str]:
    """The INSERT of the new ``obj`` as :func:`insert_statement` writes it, for a ``WITH``
    part of a statement of the caller's: made only when the part named ``when`` (before it
    in that statement) has a row, it answers the new key. Returns the SQL and its one
    parameter (the row, as JSON); the caller sets the key on ``obj`` from the answer."""
    return _insert(type(obj), [obj], when=when)


def _insert(model: type[Model], objs: Sequence[Model], *, when: str = "") -> tuple[str, str]:
    """One model's INSERT ... RETURNING its key, and its rows as its JSON parameter."""
    sql, fields = _insert_sql(model, all(obj.pk is None for obj in objs), when)
    rows = [{str(f.column): _json_ready(f, obj) for f in fields} for obj in objs]
    return sql, json.dumps(rows)


def _json_ready(field: Field, obj: Model) -> Any:
    """The value the ORM would insert, as JSON can carry it to PostgreSQL: a JSON field's
    value itself (encoded by its own encoder, if it has one; None is SQL NULL, as the ORM
    stores it), a time as ISO 8601 to the microsecond, anything else as prepared. A value of
    another kind (a UUID, a Decimal, a database default) is refused: no model written this
    way has one."""
    value = field.pre_save(obj, True)
    if isinstance(field, JSONField):
        encoder = field.encoder
        return value if encoder is None else json.loads(json.dumps(value, cls=encoder))
    prepared = field.get_db_prep_save(value, connection)
    return prepared.isoformat() if isinstance(prepared, datetime | date | time) else prepared


@cache
def _insert_sql(
    model: type[Model], auto_key: bool, when: str = ""
) -> tuple[str, tuple[Field, ...]]:
    """The INSERT of ``model``'s rows given as JSON, and the fields it reads, in order: every
    concrete field but an automatic key when the database is to give it (``auto_key``);
    with ``when``, only if that part of the statement has a row."""
    meta = model._meta
    auto = meta.auto_field if auto_key else None
    fields = tuple(
        f
        for f in meta.local_concrete_fields
        if f is not auto and not getattr(f, "generated", False)  # PostgreSQL computes those
    )
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    names = ", ".join(quote(str(f.column)) for f in fields)
    guard = f"WHERE EXISTS (SELECT 1 FROM {when}) " if when else ""  # noqa: S608
    return (
        f"INSERT INTO {table} ({names}) "  # noqa: S608 - our own names only
        f"SELECT {names} FROM json_populate_recordset(NULL::{table}, %s::json) {guard}"
        f"RETURNING {quote(str(meta.pk.column))}",
        fields,
    )


@cache
def _with_inserts(inserts: tuple[str, ...], keys: tuple[str, ...]) -> str:
    """``inserts`` (each ``RETURNING`` its key column, named in ``keys``) as one statement;
    it answers (part, key as text: keys differ in type) per row, each part's rows in the
    order given."""
    quote = connection.ops.quote_name
    parts = ", ".join(f"i{part} AS ({sql})" for part, sql in enumerate(inserts))
    answers = " UNION ALL ".join(
        f"SELECT {part}, {quote(key)}::text FROM i{part}"  # noqa: S608 - our own names only
        for part, key in enumerate(keys)
    )
    return f"WITH {parts} {answers}"

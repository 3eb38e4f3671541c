"""The prepared cursor's placeholders (``alfred.db._raw``): Django's ``%s`` and
``%(name)s`` turned into PostgreSQL's ``$n`` once per statement text, as psycopg turns them
(the statement itself runs in tests/integration/test_prepared_statements.py)."""

from __future__ import annotations

import pytest

from alfred.db import _raw


def test_named_placeholders_are_numbered_by_first_use_and_a_repeated_name_is_one_parameter():
    raw, names, count = _raw("SELECT %(b)s, %(a)s WHERE x = %(b)s")

    assert raw == b"SELECT $1, $2 WHERE x = $1"
    assert (names, count) == (("b", "a"), 2)


def test_positional_placeholders_are_numbered_in_order():
    assert _raw("SELECT %s FROM t WHERE id = %s") == (b"SELECT $1 FROM t WHERE id = $2", (), 2)


def test_a_doubled_percent_is_a_percent_sign():
    assert _raw("SELECT 7 %% 3, %s LIKE 'a%%'") == (b"SELECT 7 % 3, $1 LIKE 'a%'", (), 1)


def test_a_statement_longer_than_psycopgs_own_cache_is_converted_as_well():
    columns = ", ".join(f"%(c{n})s" for n in range(80))  # past 4096 bytes and 50 parameters
    query = f"SELECT {columns} /* {'x' * 4096} */"

    raw, names, count = _raw(query)

    assert raw.startswith(b"SELECT $1, $2, $3") and b"$80 /*" in raw
    assert (names, count) == (tuple(f"c{n}" for n in range(80)), 80)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT %(a)s, %s",  # named and positional mixed: psycopg refuses it too
        "SELECT %b",  # psycopg's binary placeholder: not one Django writes
    ],
)
def test_what_psycopg_would_refuse_is_refused(query):
    with pytest.raises(ValueError):
        _raw(query)

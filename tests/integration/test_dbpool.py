"""The web pool's check before a loan (alfred.dbpool): silent connections go out without a
round trip, and one the server has closed is caught before a request uses it."""

from __future__ import annotations

import select
import tempfile
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from alfred.dbpool import connection_check
from tests.conftest import subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def idle() -> Iterator[psycopg.Connection]:
    conn = psycopg.connect(subprocess_database_url(), autocommit=True)
    conn.execute("SELECT 1")
    yield conn
    conn.close()


def _terminated(conn: psycopg.Connection) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
    psycopg.connect(subprocess_database_url()).close()  # the goodbye has been sent by now


def test_a_silent_connection_is_lent_without_a_word_to_the_server(idle):
    with tempfile.TemporaryFile("w+") as trace:
        idle.pgconn.trace(trace.fileno())
        connection_check(idle)
        idle.pgconn.untrace()
        trace.seek(0)

        assert trace.read() == ""


def test_a_connection_the_server_ended_fails_the_check(idle):
    _terminated(idle)

    with pytest.raises(psycopg.OperationalError):
        connection_check(idle)


def test_a_connection_with_a_notice_waiting_is_checked_and_passes(idle):
    # given: something on the socket that is not a goodbye (a notification)
    idle.execute("LISTEN alfred_pool_test")
    with connection.cursor() as cursor:
        cursor.execute("NOTIFY alfred_pool_test")
    select.select([idle.fileno()], [], [], 5)  # it has arrived

    # then: the full check runs (one empty query) and the connection still works
    with tempfile.TemporaryFile("w+") as trace:
        idle.pgconn.trace(trace.fileno())
        connection_check(idle)
        idle.pgconn.untrace()
        trace.seek(0)
        assert "Query" in trace.read()
    assert idle.execute("SELECT 1").fetchone() == (1,)

"""The web pool's check before a loan (alfred.dbpool): a connection lent lately whose socket
is silent goes out without a round trip; one the server has closed, or one idle for long, is
asked first."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from alfred import dbpool
from alfred.dbpool import connection_check
from tests.conftest import subprocess_database_url
from tests.support.helpers import libpq_trace

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server(
        "the web pool's check of a connection over TCP, where a closed socket shows differently"
        " than on a Unix socket"
    ),
]


@pytest.fixture
def idle() -> Iterator[psycopg.Connection]:
    """A connection the pool has checked and lent once already."""
    conn = psycopg.connect(subprocess_database_url(), autocommit=True)
    connection_check(conn)
    yield conn
    conn.close()


def _words_to_the_server(conn: psycopg.Connection) -> str:
    """What the check sent the server."""
    with libpq_trace(conn) as trace:
        connection_check(conn)
    return "\n".join(trace)


def _terminated(conn: psycopg.Connection) -> None:
    """End ``conn``'s backend and wait for its goodbye to reach the socket: the backend
    leaves on its own time after the signal, so the server's return is not enough."""
    with connection.cursor() as cursor:
        # the timeout (ms) makes the server wait until the backend has exited
        cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [conn.info.backend_pid])
        assert cursor.fetchone() == (True,)
    readable, _, _ = select.select([conn.fileno()], [], [], 10)
    assert readable, "the ended backend's goodbye never reached the socket"


def test_a_silent_connection_lent_lately_is_lent_without_a_word_to_the_server(idle):
    assert _words_to_the_server(idle) == ""


def test_a_connection_not_lent_for_long_is_asked_first(idle, monkeypatch):
    # given: the last loan longer ago than a middlebox may keep an idle flow
    later = time.monotonic() + dbpool.RECENT_SECONDS + 1
    monkeypatch.setattr(dbpool.time, "monotonic", lambda: later)

    # then: a round trip, whatever the socket says
    assert "Query" in _words_to_the_server(idle)


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
    assert "Query" in _words_to_the_server(idle)
    assert idle.execute("SELECT 1").fetchone() == (1,)

"""The check the web process's pool of database connections makes before it lends one.

Django's pool check (``CONN_HEALTH_CHECKS``) sends an empty query on every loan: one round
trip more for every request, most of them on a connection returned moments before. Here a
connection is asked only when its socket has something to say. An idle connection hears
nothing from PostgreSQL, unless the server closed it (a restart, a terminated backend: the
socket then reads its goodbye or its end) or sent it a notice; then the full check runs,
and a connection that fails it is thrown away and another one lent. A connection cut off
without a word (the network between them gone) passes, and fails the request that uses it,
as it would fail a moment after any check; the pool then discards it.

Django makes the pool (``ALFRED_DB_POOL_SIZE``) with its own check; ``alfred.asgi`` puts
this one in its place (``pool_check_install``).
"""

from __future__ import annotations

import select
from typing import Any

from psycopg_pool import ConnectionPool


def connection_check(conn: Any) -> None:
    """The pool's ``check``: quiet for a connection whose socket is silent, else the pool's
    own check (raises for a connection that no longer works)."""
    if not conn.closed:
        poll = select.poll()
        poll.register(conn.fileno(), select.POLLIN)
        if not poll.poll(0):
            return
    ConnectionPool.check_connection(conn)


def pool_check_install(pool: ConnectionPool) -> None:
    """Make :func:`connection_check` ``pool``'s check. psycopg_pool takes a check only when
    the pool is made, and Django makes it with its own; the pool keeps it in ``_check``."""
    if not hasattr(pool, "_check"):
        raise RuntimeError("psycopg_pool no longer keeps its check in _check: see alfred.dbpool")
    pool._check = connection_check

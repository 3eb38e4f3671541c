"""The check the web process's pool of database connections makes before it lends one.

Django's pool check (``CONN_HEALTH_CHECKS``) sends an empty query on every loan: one round
trip more for every request, most of them on a connection lent a moment before. Here a
connection lent within the last ``RECENT_SECONDS`` is asked only when its socket has
something to say. An idle connection hears nothing from PostgreSQL unless the server closed
it (a restart, a terminated backend, ``idle_session_timeout``: the socket then reads its
goodbye, its end or an error) or sent it a notice; then the full check runs, and a
connection that fails it is thrown away and another one lent. A connection not lent for
longer gets the full check anyway: a firewall, NAT or load balancer between the web and a
remote PostgreSQL drops an idle flow without a word (AWS's network load balancer after 350
s), and only a round trip finds that out.

What no check before the loan can see is a goodbye not yet sent: a backend the server ends
at the moment of the loan, but which has not run since to write it (``pg_terminate_backend``
returns once it has signalled the backend; on a loaded machine the backend acts later), is
lent, and the request on it fails, as it would on one ended just after the loan. A round
trip would catch that one too, at the cost of one for every request; the quick check is the
choice (docs/reliability.md).

Django makes the pool (``ALFRED_DB_POOL_SIZE``) with its own check; ``alfred.asgi`` puts
this one in its place (``pool_check_install``).
"""

from __future__ import annotations

import select
import time
import weakref
from typing import Any

from psycopg_pool import ConnectionPool

# Well under the idle timeouts of the middleboxes a database connection crosses (60 s and up).
RECENT_SECONDS = 30.0

_lent_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def connection_check(conn: Any) -> None:
    """The pool's ``check``: quiet for a connection lent recently whose socket is silent,
    else the pool's own check (raises for a connection that no longer works)."""
    now = time.monotonic()
    if not conn.closed and now - _lent_at.get(conn, -RECENT_SECONDS) < RECENT_SECONDS:
        poll = select.poll()
        poll.register(conn.fileno(), select.POLLIN)
        if not poll.poll(0):
            _lent_at[conn] = now
            return
    ConnectionPool.check_connection(conn)
    _lent_at[conn] = now


def pool_check_install(pool: ConnectionPool) -> None:
    """Make :func:`connection_check` ``pool``'s check. psycopg_pool takes a check only when
    the pool is made, and Django makes it with its own; the pool keeps it in ``_check``."""
    if not hasattr(pool, "_check"):
        raise RuntimeError("psycopg_pool no longer keeps its check in _check: see alfred.dbpool")
    pool._check = connection_check

"""Which workers consume, and which are gone: the reads and writes of
:class:`alfred.models.WorkerHeartbeat`, on the database's clock.

Two marks, for two questions:

- ``consumed_at``: a pool process ran the heartbeat task the worker sent to its own queue
  (``alfred.worker_http``). It stops moving when the worker stops *consuming*, though it
  lives: the Redis-reconnect stall, a stuck pool. Readiness and
  ``alfred_worker_heartbeat_age_seconds`` read it.
- ``seen_at``: the worker's main process marked itself present, straight into the database,
  broker or not. It stops moving when that process is *gone*: killed outright, its pod
  rescheduled under a new name (or cut off from the database, where whatever it still runs is
  fenced out at its next write anyway).

A worker not seen for ``GONE_PERIODS`` of its own periods is gone: ``/metrics`` no longer
reports it (a name that will never come back must not page). Its period is recorded with it
(``period_seconds``), so the web and other hosts judge it by its own setting, not theirs. A
worker never recorded, or forgotten, is not known to be gone.

Taking a gone worker's runs over (``executions.runtime.holders``) asks one thing more, because
when the database itself was away (a restart, a failover) *every* worker missed its marks,
and the first to come back would otherwise take every live run over from the others. So a
worker is gone for that purpose (:func:`worker_gone`) only while another worker has marked
itself without a gap (none longer than ``GAP_PERIODS``: ``seen_since``) for as long as this
one has not: the database took marks all that while, and this one made none. After an outage
every worker's count starts again, and by the time one has gone on long enough, every live
worker has marked (a failed mark is retried within a second, not a period later).

A gone worker's row stays ``FORGOTTEN_SECONDS`` (at least a lease: until then the runtime may
still need to know it is gone), then the next worker to start deletes it: where pods come and
go, the table stays as small as the fleet.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from alfred.models import WorkerHeartbeat

# Three, as readiness counts unconsumed heartbeats: one late mark (a slow statement, a long
# pause for garbage) is not a death.
GONE_PERIODS = 3
# A gap between two marks longer than this many periods starts ``seen_since`` again: shorter
# than any gap that makes a worker gone, so an outage long enough to make one gone also starts
# every other's count again (none is taken for gone until one has marked GONE_PERIODS again).
GAP_PERIODS = 1.5
FORGOTTEN_SECONDS = 3600.0

TABLE = WorkerHeartbeat._meta.db_table
# SQL conditions on rows of TABLE: ``h`` gone, ``h`` consuming, and ``j`` having marked
# without a gap for longer than ``h`` may go unmarked (and still marking).
GONE = f"h.seen_at < clock_timestamp() - make_interval(secs => {GONE_PERIODS} * h.period_seconds)"
CONSUMING = (
    f"h.consumed_at >= clock_timestamp() - make_interval(secs => {GONE_PERIODS} * h.period_seconds)"
)
WITNESS = (
    f"j.seen_since <= clock_timestamp() - make_interval(secs => {GONE_PERIODS} * h.period_seconds)"
    f" AND j.seen_at >= clock_timestamp() - make_interval(secs => {GAP_PERIODS} * j.period_seconds)"
)
# A mark: ``seen_since`` starts again after a gap (the expressions read the row as it was).
_MARKED = f"""
    seen_at = clock_timestamp(),
    seen_since = CASE
        WHEN {TABLE}.seen_at < clock_timestamp() - make_interval(secs => {GAP_PERIODS} * %(period)s)
        THEN clock_timestamp() ELSE {TABLE}.seen_since END,
    period_seconds = %(period)s
"""

# A worker that consumes is present too (its main process sent the task moments ago).
_RECORD = f"""
INSERT INTO {TABLE} (worker, consumed_at, seen_at, seen_since, period_seconds)
VALUES (%(worker)s, clock_timestamp(), clock_timestamp(), clock_timestamp(), %(period)s)
ON CONFLICT (worker) DO UPDATE SET consumed_at = EXCLUDED.consumed_at, {_MARKED}
"""  # noqa: S608 - the table name comes from model metadata
_SEEN = f"UPDATE {TABLE} SET {_MARKED} WHERE worker = %(worker)s"  # noqa: S608
_AGE = f"SELECT extract(epoch FROM clock_timestamp() - consumed_at) FROM {TABLE} WHERE worker = %s"  # noqa: S608
# ``h`` gone while the database took another worker's marks all along.
GONE_SURELY = f"{GONE} AND EXISTS (SELECT FROM {TABLE} j WHERE j.worker <> h.worker AND {WITNESS})"
_GONE = f"SELECT {GONE_SURELY} FROM {TABLE} h WHERE h.worker = %s"  # noqa: S608
_FORGET = f"""
DELETE FROM {TABLE} WHERE seen_at < clock_timestamp() - make_interval(secs => %s)
"""  # noqa: S608


def worker_heartbeat_record(worker: str) -> None:
    """A pool process of ``worker`` ran its heartbeat task: it consumes."""
    with connection.cursor() as cursor:
        cursor.execute(
            _RECORD, {"worker": worker, "period": settings.ALFRED_WORKER_HEARTBEAT_SECONDS}
        )


def worker_seen(worker: str) -> None:
    """The main process's mark. An update only: a worker appears once it has consumed (one
    that never did is not ready, and has no age to report)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SEEN, {"worker": worker, "period": settings.ALFRED_WORKER_HEARTBEAT_SECONDS}
        )


def worker_heartbeat_age(worker: str) -> float | None:
    """Seconds since ``worker`` last consumed its heartbeat, or None if it never did."""
    with connection.cursor() as cursor:
        cursor.execute(_AGE, [worker])
        row = cursor.fetchone()
    return None if row is None else float(row[0])


def worker_gone(worker: str) -> bool:
    """Whether ``worker``'s main process stopped marking itself present while another
    worker's marks went on without a gap (the module's docstring says why both). False for a
    worker not recorded: nothing is known of it."""
    with connection.cursor() as cursor:
        cursor.execute(_GONE, [worker])
        row = cursor.fetchone()
    return bool(row and row[0])


def workers_forget() -> int:
    """Delete the rows of workers gone for longer than ``FORGOTTEN_SECONDS`` and a lease."""
    keep = max(FORGOTTEN_SECONDS, settings.ALFRED_LEASE_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute(_FORGET, [keep])
        return cursor.rowcount

"""Beat without a single point of failure: run one beat per host; one of them leads.

Each beat tries, every ``ALFRED_BEAT_LEASE_SECONDS / 5``, to take or renew one lease row
(:class:`alfred.models.BeatLease`) in one statement on the database's clock; only the holder
sends the periodic tasks. A leader killed outright is replaced once its lease runs out
(``ALFRED_BEAT_LEASE_SECONDS``, plus one check); one stopped with SIGTERM gives the lease up as
it goes, and the next check of another beat takes it. A leader that was frozen past its lease
finds, at its next tick, that it no longer holds it, and sends nothing.

Two leaders can only overlap by the width of one tick, and that costs nothing: every periodic
task is a scan that is safe to run twice (SKIP LOCKED claims, compare-and-swap writes). The
lease is what keeps the schedule's rate: N beats send each task once per interval, not N times.

Beat serves no port, so its liveness is a file: every tick (every fifth of the lease at most,
leader or not, database up or down) touches ``ALFRED_BEAT_ALIVE_FILE``; the chart's probes and
compose's health check fail once it is older than a minute, i.e. once the scheduler's loop
stopped turning (a hung statement, a deadlock), which no lease can show from the outside: a
stuck follower holds no lease, and a stuck leader's lease just runs out.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    close_old_connections,
    connection,
    connections,
)
from django_celery_beat.schedulers import DatabaseScheduler

log = logging.getLogger(__name__)

LEASE = "beat"

# Take the lease if it is free or ran out, keep it if it is ours; the epoch counts takeovers.
_TAKE_OR_RENEW = """
INSERT INTO alfred_beatlease AS lease (name, holder, epoch, expires_at, renewed_at)
VALUES (%(name)s, %(holder)s, 1, clock_timestamp() + %(seconds)s * interval '1 second',
        clock_timestamp())
ON CONFLICT (name) DO UPDATE
   SET holder = EXCLUDED.holder,
       epoch = lease.epoch + CASE WHEN lease.holder = EXCLUDED.holder THEN 0 ELSE 1 END,
       expires_at = EXCLUDED.expires_at,
       renewed_at = EXCLUDED.renewed_at
 WHERE lease.holder = EXCLUDED.holder OR lease.expires_at < clock_timestamp()
RETURNING epoch
"""

_RELEASE = """
UPDATE alfred_beatlease SET expires_at = clock_timestamp() - interval '1 second'
 WHERE name = %(name)s AND holder = %(holder)s
"""


def beat_holder_name() -> str:
    """This process, as the lease names it: host, pid and a per-start nonce (a pid reused
    after a restart is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def beat_lease_try(holder: str, seconds: float) -> int | None:
    """Take or renew the lease for ``seconds``: its epoch if ``holder`` holds it now, None if
    another does. Autocommit: the row is written the moment the statement ends."""
    with connection.cursor() as cursor:
        cursor.execute(_TAKE_OR_RENEW, {"name": LEASE, "holder": holder, "seconds": seconds})
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def beat_lease_release(holder: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_RELEASE, {"name": LEASE, "holder": holder})


def beat_alive_touch() -> None:
    """Say this beat's loop still turns (its liveness probe reads the file's age)."""
    path = settings.ALFRED_BEAT_ALIVE_FILE
    if not path:
        return
    try:
        Path(path).touch()
    except OSError as exc:
        log.warning("beat: %s not touched (%s): its liveness probe will fail", path, exc)


class LeaderScheduler(DatabaseScheduler):
    """django-celery-beat's database scheduler, ticking only while it holds the lease."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.holder = beat_holder_name()
        self.lease_seconds = float(settings.ALFRED_BEAT_LEASE_SECONDS)
        self.check_every = self.lease_seconds / 5
        self.epoch: int | None = None
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        beat_alive_touch()
        epoch = self._lease()
        if epoch is None:
            if self.epoch is not None:
                log.warning("beat %s: lost the lease; another beat leads now", self.holder)
            self.epoch = None
            return self.check_every
        if epoch != self.epoch:
            # What the last leader ran since this beat read the schedule comes in by
            # django-celery-beat's own check (its saves mark the schedule changed): a scan
            # due meanwhile goes out once now, which any scan may.
            log.info("beat %s: leads (lease epoch %d)", self.holder, epoch)
            self.epoch = epoch
        # Back before the lease runs out, however long the schedule would sleep.
        return min(super().tick(*args, **kwargs), self.check_every)

    def _lease(self) -> int | None:
        try:
            close_old_connections()
            return beat_lease_try(self.holder, self.lease_seconds)
        except (DatabaseError, InterfaceError) as exc:
            # Cannot prove we hold it, so we do not: the other beats see the same database.
            log.warning("beat %s: lease not renewed (%s); not sending", self.holder, exc)
            connection.close()
            return None

    def close(self) -> None:
        """Save the schedule's state and give the lease up. celery beat calls this from its
        SIGTERM handler, which may have interrupted a statement on this thread's connection
        (holding psycopg's lock on it): so on a connection of its own.

        That statement's transaction may also hold the rows the save writes, and a broker
        call it interrupted may never return (seen under load, after the process was frozen
        and thawed: the save waited on the interrupted transaction's lock and the beat
        outlived its pod's grace). So the stop is bounded first: past
        ``ALFRED_BEAT_STOP_SECONDS`` the process exits however far it got; the lease it held
        runs out within ``ALFRED_BEAT_LEASE_SECONDS`` and another beat leads."""
        _exit_after(settings.ALFRED_BEAT_STOP_SECONDS)
        with _connection_of_its_own():
            super().close()
            if self.epoch is None:
                return
            try:
                beat_lease_release(self.holder)
                log.info("beat %s: gave up the lease", self.holder)
            except (DatabaseError, InterfaceError):
                pass  # it runs out on its own
            self.epoch = None


_exiting = threading.Event()


def _exit_after(seconds: float) -> None:
    """End the process ``seconds`` from now unless it ends sooner (a daemon timer, once)."""
    if _exiting.is_set():
        return
    _exiting.set()

    def stop() -> None:
        log.error("beat: still stopping after %.0f s (ALFRED_BEAT_STOP_SECONDS): exiting", seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()


@contextmanager
def _connection_of_its_own() -> Iterator[None]:
    kept = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        yield
    finally:
        connections[DEFAULT_DB_ALIAS].close()
        connections[DEFAULT_DB_ALIAS] = kept

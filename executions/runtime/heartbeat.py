"""The lease heartbeat: one thread per worker process keeps the leases of the stages running
in it, so that no other worker takes a run over (and runs a step again) behind a slow
provider call or slow stage code (``Context.heartbeat``, docs/reliability.md)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.db import DatabaseError, InterfaceError, connection, connections

from executions.runtime.errors import LeaseLost

log = logging.getLogger(__name__)

HEARTBEAT_APPLICATION_NAME = "alfred-lease"


class Leaseholder(Protocol):
    """What the heartbeat renews for (a stage's ``Context``): its run, one fenced renewal,
    and the flag it sets once renewals have failed for half a lease."""

    run_id: str
    _renewals_failing: threading.Event

    def _renew(self) -> tuple[datetime | None, datetime | None]: ...


@dataclass
class _Beating:
    """A stage whose lease the heartbeat keeps: when to renew next, since when renewals fail."""

    ctx: Leaseholder
    every: float
    patience: float
    due: float
    failing_since: float | None = None


class _Heartbeat:
    """One thread per process renews the leases of the stages running in it (a prefork worker
    runs one at a time), on its own database connection (named ``alfred-lease`` in
    ``pg_stat_activity``), opened when it first renews and closed whenever no stage runs, as
    a thread per stage would (one thread for the process's life spares starting and joining
    one for every stage).

    It renews through connection errors on a fresh connection, and stops renewing a stage's
    lease only when the lease is provably lost (the fence moved). Should renewals fail for
    half a lease, the stage stops at its next boundary (``_renewals_failing``). A renewal in
    flight when its stage ends is waited for: none lands after the stage has left."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._renewing = threading.Lock()  # held by the thread while it renews
        self._beating: dict[int, _Beating] = {}
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked process has none of its parent's threads, nor their stages."""
        self._changed = threading.Condition()
        self._renewing = threading.Lock()
        self._beating = {}
        self._thread = None

    @contextmanager
    def holding(self, ctx: Leaseholder) -> Iterator[None]:
        every = settings.ALFRED_LEASE_SECONDS / 3
        beating = _Beating(ctx, every, settings.ALFRED_LEASE_SECONDS / 2, time.monotonic() + every)
        with self._changed:
            self._started()
            self._beating[id(ctx)] = beating
            self._changed.notify()
        try:
            yield
        finally:
            with self._renewing, self._changed:
                self._beating.pop(id(ctx), None)
                self._changed.notify()

    def _started(self) -> None:
        """The thread of this process, started again should it ever have died."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while True:
            try:
                self._round()
            except Exception:  # never end: every stage of the process counts on this thread
                log.exception("lease heartbeat")
                time.sleep(0.5)

    def _round(self) -> None:
        """Wait until a renewal is owed (or a stage comes or goes), then make those owed."""
        with self._changed:
            while not self._beating:
                connections.close_all()  # no stage runs: hold no connection either
                self._changed.wait()
            due = min(b.due for b in self._beating.values())
            if due > time.monotonic():
                self._changed.wait(due - time.monotonic())
                return
        with self._renewing:
            with self._changed:
                now = time.monotonic()
                owed = [b for b in self._beating.values() if b.due <= now]
            for beating in owed:
                self._renew(beating)

    def _renew(self, beating: _Beating) -> None:
        ctx = beating.ctx
        try:
            if connection.connection is None:
                connection.ensure_connection()
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT set_config('application_name', %s, false)",
                        [HEARTBEAT_APPLICATION_NAME],
                    )
            ctx._renew()
            beating.failing_since = None
            beating.due = time.monotonic() + beating.every
        except LeaseLost:
            log.warning("run %s: lease lost during a step", ctx.run_id)
            with self._changed:
                self._beating.pop(id(ctx), None)
        except (DatabaseError, InterfaceError) as exc:
            log.warning("run %s: lease renewal failed: %s", ctx.run_id, exc)
            connection.close()
            now = time.monotonic()
            beating.failing_since = beating.failing_since or now
            beating.due = now + min(beating.every, 0.5)
            if now - beating.failing_since >= beating.patience:
                ctx._renewals_failing.set()


HEARTBEAT = _Heartbeat()

"""One clock (docs/architecture.md, "Invariants"): due times, leases and deadlines are
compared against the database's time, never a process's. A worker whose clock runs behind the
scanner's would otherwise see a fired timer as "not yet due", suspend again and strand the run.

``Clock`` reads the database's time once and carries it forward with this process's
monotonic clock, so a stage can ask for the time as often as it likes without a query, and
two hosts never disagree by more than the drift of a monotonic clock over one stage round.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.db import connection


def db_now() -> datetime:
    """The database's time now (``clock_timestamp()``, not the transaction's start)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (value,) = cursor.fetchone()
    return value


class Clock:
    def __init__(self, anchor: datetime) -> None:
        self._reading = (anchor, time.monotonic())

    def now(self) -> datetime:
        anchor, at = self._reading
        return anchor + timedelta(seconds=time.monotonic() - at)

    def reset(self, anchor: datetime) -> None:
        """A fresh reading of the database's time (one assignment: safe across threads)."""
        self._reading = (anchor, time.monotonic())

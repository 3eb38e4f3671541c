"""Reading the outbox in order: one execution's events by its gapless sequence, and every
execution's events by a global cursor.

One execution's events commit in sequence order (each is allocated under the execution's row
lock, held to commit), so ``sequence > N`` never skips one that commits later.

Across executions no such order exists: ids are taken before commit, so an event with a
lower id can become visible after one with a higher id. The global feed therefore orders by
``(txid, id)`` — the writing transaction's id, then the row's — and reads only events whose
transaction is older than the oldest one still running (``pg_snapshot_xmin``). Every such
transaction has ended, and any event still to come belongs to a newer transaction, so it
sorts after everything read: a cursor ``(txid, id)`` misses nothing and repeats nothing. The
price is latency: an event waits while an older transaction is open (stage transactions are
milliseconds). The cursor is written ``<txid>-<id>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from executions.events import TERMINAL_EVENT_TYPES
from executions.models import DeliveryKey, Execution, OutboxEvent

PAGE = 500

# Each part fits a bigint (18 digits); the whole is the API's pattern too (no strip()). A bare
# "0" is the origin ("0-0"): the start of what is retained, as 0 is for an execution's stream
# (and the Last-Event-ID a client that has seen nothing may send).
FEED_CURSOR_RE = re.compile(r"0|([0-9]{1,18})-([0-9]{1,18})")


@dataclass(frozen=True, order=True)
class Cursor:
    txid: int
    id: int

    def __str__(self) -> str:
        return f"{self.txid}-{self.id}"

    @classmethod
    def parse(cls, text: str) -> Cursor | None:
        match = FEED_CURSOR_RE.fullmatch(text)
        if match is None:
            return None
        return cls(int(match[1]), int(match[2])) if match[1] is not None else cls(0, 0)


ORIGIN = Cursor(0, 0)


def event_document(event: OutboxEvent) -> dict[str, Any]:
    """An event as every consumer sees it (the polling API, SSE, webhooks)."""
    return {
        "execution": event.execution_id,
        "sequence": event.sequence,
        "key": event.key,
        "type": event.type,
        "payload": event.payload,
        "created_at": event.created_at,
    }


_T = OutboxEvent._meta.db_table
_E = Execution._meta.db_table
_K = DeliveryKey._meta.db_table

# Every execution's events after a cursor, below the horizon, with who may read each (the
# owner and the principals holding a delivery key), and how many are withheld above it.
FEED_SQL = f"""
    WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin)
    SELECT o.txid::text::bigint, o.id, o.execution_id, o.sequence, o.key, o.type,
           o.payload::text, o.created_at, e.principal,
           ARRAY(SELECT k.principal FROM {_K} k WHERE k.execution_id = o.execution_id)
    FROM {_T} o JOIN {_E} e ON e.id = o.execution_id, horizon
    WHERE (o.txid, o.id) > (%(txid)s::text::xid8, %(id)s) AND o.txid < horizon.xmin
    ORDER BY o.txid, o.id
    LIMIT %(limit)s
"""  # noqa: S608

WITHHELD_SQL = f"""
    SELECT EXISTS (
        SELECT 1 FROM {_T} o
        WHERE (o.txid, o.id) > (%(txid)s::text::xid8, %(id)s)
          AND o.txid >= pg_snapshot_xmin(pg_current_snapshot())
    )
"""  # noqa: S608

# Where "now" is in the global feed: the last event below the horizon.
HEAD_SQL = f"""
    SELECT o.txid::text::bigint, o.id FROM {_T} o
    WHERE o.txid < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY o.txid DESC, o.id DESC LIMIT 1
"""  # noqa: S608

EXECUTION_SQL = f"""
    SELECT o.txid::text::bigint, o.id, o.execution_id, o.sequence, o.key, o.type,
           o.payload::text, o.created_at, NULL, NULL
    FROM {_T} o
    WHERE o.execution_id = %(execution)s AND o.sequence > %(after)s
    ORDER BY o.sequence
    LIMIT %(limit)s
"""  # noqa: S608


@dataclass(frozen=True)
class FeedRow:
    """One event as the streams read it, with what they need to route and filter it."""

    cursor: Cursor
    execution: str
    sequence: int
    key: str
    type: str
    payload_json: str
    created_at: Any
    owner: str | None
    key_holders: tuple[str, ...]

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> FeedRow:
        return cls(
            Cursor(int(row[0]), int(row[1])),
            row[2],
            int(row[3]),
            row[4],
            row[5],
            row[6],
            row[7],
            row[8],
            tuple(row[9] or ()),
        )

    def readable_by(self, principal: str, reads_all: bool) -> bool:
        return reads_all or self.owner == principal or principal in self.key_holders

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES

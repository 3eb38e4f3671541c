"""Server-Sent Events: one web process's live view of the outbox, fanned out to its clients.

One ``EventHub`` per process (per event loop): ONE connection LISTENs on the outbox channel,
however many clients are connected; a small pool reads. A NOTIFY (sent by ``event_emit`` in
the emitting transaction, so it arrives only once that transaction committed) names an
execution; the hub reads that execution's new events once and hands them to every client
following it, and reads the global feed once for every client of the all-executions stream.
Nothing sleeps in a loop waiting for events; the only timed waits are the keep-alive and,
while the global feed holds back events behind an older open transaction, a short re-read.

A client first replays what it missed (``Last-Event-ID`` or ``?after=``) straight from the
table, then takes the hub's batches; each batch says where it starts, so a client that finds
a gap between what it has sent and the batch reads the gap itself. Replay and live therefore
overlap safely: every event is sent once, in order (per execution: by sequence). A client
that falls more than ``ALFRED_SSE_CLIENT_BUFFER`` events behind is dropped with a log line
(it reconnects with its Last-Event-ID and misses nothing): no buffer grows without bound.

If the listening connection breaks, the hub reconnects and every client re-reads from where
it is, so a NOTIFY lost meanwhile costs a moment, never an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections
from psycopg_pool import AsyncConnectionPool

from delivery.feed import (
    EXECUTION_SQL,
    FEED_SQL,
    HEAD_SQL,
    ORIGIN,
    PAGE,
    WITHHELD_SQL,
    Cursor,
    FeedRow,
)
from executions.outbox import CHANNEL
from executions.selectors import EXECUTION_SETTLED_SQL, execution_settled_params

log = logging.getLogger(__name__)

RETRY_HINT_MS = 2000
WITHHELD_RETRY = (0.005, 0.5)  # first and longest re-read delay while events are held back
RECONNECT_DELAY = (0.2, 5.0)


def connection_params() -> dict[str, Any]:
    """psycopg's connection arguments for the default database, without Django's own."""
    params = dict(connections["default"].get_connection_params())
    for name in ("cursor_factory", "context", "prepare_threshold", "pool"):
        params.pop(name, None)
    return params


def sse_frame(row: FeedRow, event_id: str) -> bytes:
    # The payload is spliced in as PostgreSQL wrote it: no parse and re-dump per event.
    data = (
        f'{{"execution":{json.dumps(row.execution)},"sequence":{row.sequence},'
        f'"key":{json.dumps(row.key)},"type":{json.dumps(row.type)},'
        f'"payload":{row.payload_json},"created_at":{json.dumps(row.created_at.isoformat())}}}'
    )
    return f"id: {event_id}\nevent: {row.type}\ndata: {data}\n\n".encode()


def retry_frame() -> bytes:
    return f"retry: {RETRY_HINT_MS}\n\n".encode()


KEEPALIVE = b": keep-alive\n\n"


@dataclass
class Batch:
    """Events read by the hub: everything after ``since`` up to the last row, in order."""

    since: int | Cursor
    rows: list[FeedRow]


@dataclass(eq=False)
class Subscriber:
    execution: str | None  # None: every execution the caller may read
    client: str = ""
    principal: str = ""
    reads_all: bool = False
    pending: deque[Batch] = field(default_factory=deque)
    pending_rows: int = 0
    dropped: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, batch: Batch, limit: int) -> None:
        if self.dropped:
            return
        if self.pending_rows + len(batch.rows) > limit:
            # It stops reading here; its stream ends when the client reads again (or its
            # connection dies), and a reconnect with its Last-Event-ID misses nothing.
            self.dropped = True
            self.pending.clear()
            self.pending_rows = 0
            log.warning(
                "SSE client %s fell behind by more than %d events on %s: dropped",
                self.client,
                limit,
                self.execution or "the event feed",
            )
        else:
            self.pending.append(batch)
            self.pending_rows += len(batch.rows)
        self.wake.set()

    def take(self) -> list[Batch]:
        batches = list(self.pending)
        self.pending.clear()
        self.pending_rows = 0
        self.wake.clear()
        return batches


class EventHub:
    def __init__(self) -> None:
        self.pool: AsyncConnectionPool | None = None
        self.by_execution: dict[str, set[Subscriber]] = {}
        self.everyone: set[Subscriber] = set()
        self.seen: dict[str, int] = {}  # per execution: the last sequence handed out
        self.cursor: Cursor | None = None  # the global feed: the last event handed out
        self._listener: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._dirty: dict[str, int] = {}  # execution: the first sequence announced
        self._feed_dirty = False
        self._kick = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None

    # -- subscribing ----------------------------------------------------------------------

    async def start(self) -> None:
        if self._listener is not None:
            await self._ready.wait()
            return
        self.pool = AsyncConnectionPool(
            kwargs={**connection_params(), "autocommit": True},
            min_size=1,
            max_size=4,
            open=False,
        )
        await self.pool.open()
        self._listener = asyncio.create_task(self._listen(), name="alfred-sse-listen")
        self._worker = asyncio.create_task(self._work(), name="alfred-sse-read")
        await self._ready.wait()

    async def subscribe(self, subscriber: Subscriber) -> None:
        await self.start()
        if subscriber.execution is None:
            if not self.everyone and self.cursor is None:
                self.cursor = await self._head()
            self.everyone.add(subscriber)
        else:
            followers = self.by_execution.setdefault(subscriber.execution, set())
            followers.add(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber.execution is None:
            self.everyone.discard(subscriber)
            if not self.everyone:
                self.cursor = None
            return
        followers = self.by_execution.get(subscriber.execution)
        if followers is not None:
            followers.discard(subscriber)
            if not followers:
                del self.by_execution[subscriber.execution]
                self.seen.pop(subscriber.execution, None)

    @property
    def clients(self) -> int:
        return len(self.everyone) + sum(len(s) for s in self.by_execution.values())

    # -- reading --------------------------------------------------------------------------

    async def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if self.pool is None:
            raise RuntimeError("the event hub has not started")
        async with self.pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(sql, params)
            return list(await cursor.fetchall())

    async def execution_after(self, execution: str, after: int) -> list[FeedRow]:
        rows = await self.query(
            EXECUTION_SQL, {"execution": execution, "after": after, "limit": PAGE}
        )
        return [FeedRow.of(row) for row in rows]

    async def feed_after(self, cursor: Cursor) -> list[FeedRow]:
        rows = await self.query(FEED_SQL, {"txid": cursor.txid, "id": cursor.id, "limit": PAGE})
        return [FeedRow.of(row) for row in rows]

    async def _head(self) -> Cursor:
        rows = await self.query(HEAD_SQL, {})
        return Cursor(int(rows[0][0]), int(rows[0][1])) if rows else ORIGIN

    async def head(self) -> Cursor:
        await self.start()
        return await self._head()

    # -- the listener and the reader -------------------------------------------------------

    async def _listen(self) -> None:
        delay = RECONNECT_DELAY[0]
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    delay = RECONNECT_DELAY[0]
                    # Anything emitted while no one listened is read now.
                    for execution in self.by_execution:
                        self._dirty[execution] = 1
                    self._feed_dirty = True
                    self._kick.set()
                    self._ready.set()
                    async for notify in conn.notifies():
                        execution, _, sequence = notify.payload.partition(" ")
                        if execution in self.by_execution:
                            first = int(sequence) if sequence.isdigit() else 1
                            self._dirty[execution] = min(first, self._dirty.get(execution, first))
                        if self.everyone:
                            self._feed_dirty = True
                        self._kick.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("event listener lost its connection; reconnecting", exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_DELAY[1])

    async def _work(self) -> None:
        """Read what the notifications announced, once, for every client."""
        withheld_delay = WITHHELD_RETRY[0]
        while True:
            await self._kick.wait()
            self._kick.clear()
            try:
                dirty, self._dirty = self._dirty, {}
                for execution, first in dirty.items():
                    await self._read_execution(execution, first)
                if self._feed_dirty and self.everyone:
                    self._feed_dirty = False
                    if await self._read_feed():
                        # An older transaction still runs: what it holds back is read again
                        # shortly (and at once if its own NOTIFY arrives first).
                        self._feed_dirty = True
                        asyncio.get_running_loop().call_later(withheld_delay, self._kick.set)
                        withheld_delay = min(withheld_delay * 2, WITHHELD_RETRY[1])
                    else:
                        withheld_delay = WITHHELD_RETRY[0]
            except Exception:
                log.warning("reading events failed; trying again", exc_info=True)
                for execution, first in dirty.items():
                    self._dirty[execution] = min(first, self._dirty.get(execution, first))
                self._feed_dirty = True
                await asyncio.sleep(RECONNECT_DELAY[0])
                self._kick.set()

    async def _read_execution(self, execution: str, first: int) -> None:
        followers = self.by_execution.get(execution)
        if not followers:
            return
        # The first news since someone followed it reads from the announced event; a
        # follower whose replay ended earlier sees the gap and reads it itself.
        since = self.seen.get(execution, first - 1)
        while True:
            rows = await self.execution_after(execution, since)
            if not rows:
                return
            batch = Batch(since, rows)
            since = rows[-1].sequence
            self.seen[execution] = since
            for subscriber in list(self.by_execution.get(execution, ())):
                subscriber.offer(batch, settings.ALFRED_SSE_CLIENT_BUFFER)
            if len(rows) < PAGE:
                return

    async def _read_feed(self) -> bool:
        """Hand out the global feed's new events; returns whether some are held back."""
        while self.cursor is not None:
            rows = await self.feed_after(self.cursor)
            if rows:
                batch = Batch(self.cursor, rows)
                self.cursor = rows[-1].cursor
                for subscriber in list(self.everyone):
                    subscriber.offer(batch, settings.ALFRED_SSE_CLIENT_BUFFER)
            if len(rows) < PAGE:
                break
        if self.cursor is None:
            return False
        held = await self.query(WITHHELD_SQL, {"txid": self.cursor.txid, "id": self.cursor.id})
        return bool(held[0][0])


_hubs: dict[asyncio.AbstractEventLoop, EventHub] = {}


def hub() -> EventHub:
    """This process's hub (one per event loop: uvicorn runs one)."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = EventHub()
    return found


async def _live(subscriber: Subscriber, keepalive: float) -> AsyncIterator[list[Batch] | None]:
    """The batches the hub hands ``subscriber``, as they come; None after ``keepalive``
    seconds without any (time for a keep-alive); ends when the subscriber was dropped."""
    while True:
        if not subscriber.pending and not subscriber.dropped:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(subscriber.wake.wait(), keepalive)
        if subscriber.dropped:
            return
        yield subscriber.take() if subscriber.pending else None


async def execution_stream(
    execution: str, after: int, *, terminal: bool, client: str
) -> AsyncIterator[bytes]:
    """One execution's events after ``after``, then live; ends once the execution is settled
    (``executions.selectors``: ended, and no lane event still to come — a lane workflow's
    ``lane.released`` commits some milliseconds after its terminal event), with every event
    it has then sent. ``terminal``: whether the execution had ended when the client
    connected."""
    events = hub()
    subscriber = Subscriber(execution, client=client)
    await events.subscribe(subscriber)
    keepalive = settings.ALFRED_SSE_KEEPALIVE_SECONDS
    sent = after
    # Once a terminal event is sent (or the execution had ended at connect), the stream asks
    # after each round whether the execution is settled; a retry brings it back to "not".
    ending = terminal
    try:
        yield retry_frame()

        async def catch_up() -> AsyncIterator[bytes]:
            nonlocal sent, ending
            while True:
                rows = await events.execution_after(execution, sent)
                for row in rows:
                    yield sse_frame(row, str(row.sequence))
                    sent = row.sequence
                    ending = ending or row.terminal
                if len(rows) < PAGE:
                    return

        async def settled() -> bool:
            """Whether the stream may end: settled, and what came before that is sent."""
            nonlocal ending
            ended, done = await _settled(events, execution)
            ending = ended
            return done

        async for frame in catch_up():
            yield frame
        if ending and await settled():
            # Read once more: what committed before it settled (its lane's event) is sent.
            async for frame in catch_up():
                yield frame
            return
        async for batches in _live(subscriber, keepalive):
            if batches is None:
                if ending and await settled():  # settled without a word to this process
                    async for frame in catch_up():
                        yield frame
                    return
                yield KEEPALIVE
                continue
            for batch in batches:
                if isinstance(batch.since, int) and batch.since > sent:
                    async for frame in catch_up():
                        yield frame
                for row in batch.rows:
                    if row.sequence == sent + 1:
                        yield sse_frame(row, str(row.sequence))
                        sent = row.sequence
                        ending = ending or row.terminal
                    elif row.sequence > sent + 1:
                        async for frame in catch_up():
                            yield frame
            if ending and await settled():
                async for frame in catch_up():
                    yield frame
                return
    finally:
        events.unsubscribe(subscriber)


async def _settled(events: EventHub, execution: str) -> tuple[bool, bool]:
    """Whether ``execution`` is terminal now (a retry may have brought it back), and whether
    it is settled (``executions.selectors.EXECUTION_SETTLED_SQL``)."""
    rows = await events.query(EXECUTION_SETTLED_SQL, execution_settled_params(execution))
    return (bool(rows[0][0]), bool(rows[0][1])) if rows else (True, True)


async def feed_stream(
    after: Cursor | None, *, principal: str, reads_all: bool, client: str
) -> AsyncIterator[bytes]:
    """Every event the caller may read after ``after`` (None: from now), then live."""
    events = hub()
    subscriber = Subscriber(None, client=client, principal=principal, reads_all=reads_all)
    await events.subscribe(subscriber)
    keepalive = settings.ALFRED_SSE_KEEPALIVE_SECONDS
    try:
        position = after if after is not None else await events.head()
        yield retry_frame()

        async def catch_up() -> AsyncIterator[bytes]:
            nonlocal position
            while True:
                rows = await events.feed_after(position)
                for row in rows:
                    position = row.cursor
                    if row.readable_by(principal, reads_all):
                        yield sse_frame(row, str(row.cursor))
                if len(rows) < PAGE:
                    return

        async for frame in catch_up():
            yield frame
        async for batches in _live(subscriber, keepalive):
            if batches is None:
                yield KEEPALIVE
                continue
            for batch in batches:
                if isinstance(batch.since, Cursor) and batch.since > position:
                    async for frame in catch_up():
                        yield frame
                for row in batch.rows:
                    if row.cursor > position:
                        position = row.cursor
                        if row.readable_by(principal, reads_all):
                            yield sse_frame(row, str(row.cursor))
    finally:
        events.unsubscribe(subscriber)

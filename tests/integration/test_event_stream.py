"""Server-Sent Events through uvicorn: replay, live, reconnect with Last-Event-ID, a restart of
the web process, the all-executions stream and its visibility, slow clients, and one
listening connection per process however many clients."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection, transaction
from httpx_sse import aconnect_sse, connect_sse

from alfred.tokens import token_create
from executions.events import EventType
from executions.lanes.reconciler import Action, lane_reconcile
from executions.models import Execution, ExecutionStatus, OutboxEvent, Run
from executions.outbox import event_emit
from tests.conftest import wait_for
from tests.support.factories import ExecutionFactory
from tests.support.helpers import submit
from tests.support.live import WebServer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server("LISTEN/NOTIFY to the event stream over TCP"),
]


@pytest.fixture
def web() -> Iterator[WebServer]:
    server = WebServer("sse", ALFRED_SSE_KEEPALIVE_SECONDS="1").start()
    try:
        yield server
    finally:
        server.stop()


def bearer(role: str = "integration") -> tuple[str, dict[str, str]]:
    token, raw = token_create(name=f"sse-{uuid.uuid4().hex[:8]}", role=role)
    return token.principal_id, {"Authorization": f"Bearer {raw}"}


def running(principal: str) -> Execution:
    from executions.catalog import workflow_get
    from executions.identity import logical_identity

    canonical = workflow_get("add-subdomain").canonicalize(
        {"zone": "example.com", "subdomain": f"s{uuid.uuid4().hex[:10]}"}
    )
    return ExecutionFactory.create(
        principal=principal,
        status=ExecutionStatus.RUNNING,
        input=canonical,
        logical_identity=logical_identity("add-subdomain", canonical),
    )


def emit(execution: Execution, count: int) -> list[int]:
    """``count`` events for ``execution``, each committed on its own."""
    sequences = []
    for _ in range(count):
        with transaction.atomic():
            sequence = event_emit(
                execution_id=execution.id,
                type=EventType.ASSISTANCE,
                key=f"{execution.id}:{uuid.uuid4().hex}",
                payload={"kind": "test", "n": uuid.uuid4().hex[:6]},
            )
        assert sequence is not None
        sequences.append(sequence)
    return sequences


def finish(execution: Execution) -> None:
    with transaction.atomic():
        Execution.objects.filter(pk=execution.pk).update(status=ExecutionStatus.SUCCEEDED)
        event_emit(
            execution_id=execution.id,
            type=EventType.SUCCEEDED,
            key=f"{execution.id}:done",
            payload={"run": execution.current_run_id, "result": {}, "error": None},
        )


class Reader(threading.Thread):
    """``collect`` on a thread (which never touches the database): the test's own thread
    emits while it reads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(daemon=True)
        self.args, self.kwargs = args, kwargs
        self.connected = threading.Event()
        self.seen: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            collect(*self.args, into=self.seen, connected=self.connected, **self.kwargs)
        except BaseException as exc:
            self.error = exc
            self.connected.set()

    def started(self) -> Reader:
        self.start()
        assert self.connected.wait(30)
        return self

    def result(self, timeout: float = 30) -> list[Any]:
        self.join(timeout)
        assert not self.is_alive(), "the stream did not end"
        if self.error is not None:
            raise self.error
        return self.seen


def collect(
    base: str,
    path: str,
    headers: dict[str, str],
    *,
    stop_after: int | None = None,
    into: list[Any] | None = None,
    connected: threading.Event | None = None,
) -> list[Any]:
    """Read the stream until it ends (or ``stop_after`` events): each event's (id, type,
    data). A block without data (the ``retry:`` hint) is no event (as EventSource has it)."""
    seen: list[Any] = [] if into is None else into
    with (
        httpx.Client(base_url=base, headers=headers, timeout=30) as client,
        connect_sse(client, "GET", path) as source,
    ):
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for sse in source.iter_sse():
            if connected is not None:
                connected.set()  # the retry hint comes once the stream has its position
            if not sse.data:
                continue
            seen.append((sse.id, sse.event, json.loads(sse.data)))
            if stop_after is not None and len(seen) >= stop_after:
                break
    return seen


def test_an_execution_stream_replays_goes_live_and_ends_after_the_terminal_event(web):
    # given an execution with three events already, followed by its owner
    principal, headers = bearer()
    execution = running(principal)
    emit(execution, 3)
    # when four more and the terminal event are emitted while the client reads
    reader = Reader(web.base, f"/api/v1/executions/{execution.id}/events/stream", headers)
    reader.started()
    emit(execution, 4)
    finish(execution)
    seen = reader.result()
    # then every event arrived once, in order, with its sequence as id, and the stream ended
    assert [int(i) for i, _, _ in seen] == list(range(1, 9))
    assert [d["sequence"] for _, _, d in seen] == list(range(1, 9))
    assert seen[-1][1] == "execution.succeeded"
    stored = list(OutboxEvent.objects.filter(execution=execution).order_by("sequence"))
    assert [d["key"] for _, _, d in seen] == [e.key for e in stored]
    assert all(d["execution"] == execution.id for _, _, d in seen)


def test_a_reconnect_with_last_event_id_replays_only_what_was_missed(web):
    principal, headers = bearer()
    execution = running(principal)
    emit(execution, 5)
    path = f"/api/v1/executions/{execution.id}/events/stream"
    first = collect(web.base, path, headers, stop_after=3)
    emit(execution, 2)  # while the client is away
    reader = Reader(web.base, path, {**headers, "Last-Event-ID": first[-1][0]}).started()
    emit(execution, 2)
    finish(execution)
    rest = reader.result()
    sequences = [d["sequence"] for _, _, d in first + rest]
    assert sequences == list(range(1, 11))
    # ?after= does the same for clients that cannot set headers
    tail = collect(web.base, f"{path}?after=8", headers)
    assert [d["sequence"] for _, _, d in tail] == [9, 10]


def test_the_stream_survives_a_restart_of_the_web_process(web):
    # given a client reading live
    principal, headers = bearer()
    execution = running(principal)
    emit(execution, 2)
    path = f"/api/v1/executions/{execution.id}/events/stream"
    seen: list[Any] = []
    with (
        pytest.raises(httpx.HTTPError),  # the read fails when the server dies
        httpx.Client(base_url=web.base, headers=headers, timeout=30) as client,
        connect_sse(client, "GET", path) as source,
    ):
        for sse in source.iter_sse():
            if not sse.data:
                continue
            seen.append(sse)
            if len(seen) == 2:
                # when the web process is killed mid-stream, events go on meanwhile
                web.kill()
                emit(execution, 3)
    # then a new web process, asked with the last id, sends exactly the rest
    web.start()
    reader = Reader(web.base, path, {**headers, "Last-Event-ID": seen[-1].id}).started()
    emit(execution, 1)
    finish(execution)
    rest = reader.result()
    assert [int(s.id) for s in seen] + [d["sequence"] for _, _, d in rest] == list(range(1, 8))


def test_an_ended_execution_with_nothing_new_answers_204(web):
    principal, headers = bearer()
    execution = running(principal)
    emit(execution, 1)
    finish(execution)
    path = f"/api/v1/executions/{execution.id}/events/stream"
    assert [d["sequence"] for _, _, d in collect(web.base, path, headers)] == [1, 2]
    response = httpx.get(f"{web.base}{path}", headers={**headers, "Last-Event-ID": "2"})
    assert response.status_code == 204


def test_an_ended_lane_owner_streams_until_its_lane_lets_it_go(web, api, integration_token):
    # given an add-domain that took the aws-infrastructure lane and has just succeeded: its
    # terminal event committed, the lane reconciler (which acts after that commit, in a
    # transaction of its own) not yet
    execution_id = submit(api, "add-domain", {"domain": f"s{uuid.uuid4().hex[:8]}.example"}).json()[
        "id"
    ]
    execution = Execution.objects.get(pk=execution_id)
    with transaction.atomic():
        Execution.objects.filter(pk=execution_id).update(status=ExecutionStatus.SUCCEEDED)
        Run.objects.filter(pk=execution.current_run_id).update(status="succeeded")
        ended = event_emit(
            execution_id=execution_id,
            type=EventType.SUCCEEDED,
            key=f"{execution_id}:done",
            payload={"run": execution.current_run_id, "result": {}, "error": None},
        )
    assert ended is not None
    headers = {"Authorization": f"Bearer {integration_token}"}
    path = f"/api/v1/executions/{execution_id}/events/stream"

    # when a client that read up to the terminal event reconnects, as the recipe does
    reader = Reader(web.base, path, {**headers, "Last-Event-ID": str(ended)}).started()
    # and the reconciler then lets the lane go
    decision = lane_reconcile("aws-infrastructure")
    assert decision is not None and decision.action is Action.RELEASE

    # then the stream was open (not 204) and sent the lane's event, then ended
    rest = reader.result()
    assert [(d["sequence"], t) for _, t, d in rest] == [(ended + 1, "lane.released")]
    assert Execution.objects.get(pk=execution_id).last_sequence == ended + 1
    # and now that it settled, nothing more will come: 204
    again = httpx.get(f"{web.base}{path}", headers={**headers, "Last-Event-ID": str(ended + 1)})
    assert again.status_code == 204


def test_streams_refuse_strangers_and_bad_cursors(web):
    owner, headers = bearer()
    _, other = bearer()
    execution = running(owner)
    path = f"{web.base}/api/v1/executions/{execution.id}/events/stream"
    unauthenticated = httpx.get(path)
    assert unauthenticated.status_code == 401
    assert unauthenticated.json()["code"] == "not_authenticated"
    assert httpx.get(path, headers=other).status_code == 404
    bad = httpx.get(path, headers={**headers, "Last-Event-ID": "x1"})
    assert bad.status_code == 400
    assert bad.json()["code"] == "malformed_request"
    for cursor in ("7", "00", "0-", "-0", " 0"):
        bad_feed = httpx.get(
            f"{web.base}/api/v1/events/stream", params={"after": cursor}, headers=headers
        )
        assert bad_feed.status_code == 400, cursor
    assert httpx.get(f"{web.base}/api/v1/events/stream").status_code == 401


def test_the_all_executions_stream_shows_each_caller_what_it_may_read(web):
    # given two integrations' executions and an operator
    mine, my_headers = bearer()
    theirs, _ = bearer()
    _, operator = bearer("operator")
    own = running(mine)
    foreign = running(theirs)
    emit(own, 1)  # before anyone connected: not in a stream that starts now

    reader = Reader(web.base, "/api/v1/events/stream", my_headers, stop_after=3).started()
    for _ in range(3):
        emit(own, 1)
        emit(foreign, 1)
    mine_seen = reader.result()
    assert [(d["execution"], d["sequence"]) for _, _, d in mine_seen] == [
        (own.id, 2),
        (own.id, 3),
        (own.id, 4),
    ]
    # the operator replays every execution's events from a cursor, and resumes after one
    everything = collect(web.base, "/api/v1/events/stream?after=0-0", operator, stop_after=7)
    assert sorted((d["execution"], d["sequence"]) for _, _, d in everything) == sorted(
        [(own.id, n) for n in range(1, 5)] + [(foreign.id, n) for n in range(1, 4)]
    )
    # "0", the Last-Event-ID of a client that has seen nothing, is the same origin
    from_zero = collect(
        web.base, "/api/v1/events/stream", {**operator, "Last-Event-ID": "0"}, stop_after=7
    )
    assert [d for _, _, d in from_zero] == [d for _, _, d in everything]
    for execution in (own, foreign):  # each execution's events in its own order
        mine_in_feed = [d["sequence"] for _, _, d in everything if d["execution"] == execution.id]
        assert mine_in_feed == sorted(mine_in_feed)
    resumed = collect(
        web.base,
        "/api/v1/events/stream",
        {**my_headers, "Last-Event-ID": mine_seen[0][0]},
        stop_after=2,
    )
    assert [d["sequence"] for _, _, d in resumed] == [3, 4]


def test_keep_alive_comments_flow_while_nothing_happens(web):
    principal, headers = bearer()
    execution = running(principal)
    with (
        httpx.Client(base_url=web.base, headers=headers, timeout=10) as client,
        client.stream("GET", f"/api/v1/executions/{execution.id}/events/stream") as response,
    ):
        lines: list[str] = []
        for line in response.iter_lines():
            lines.append(line)
            if line == ": keep-alive":
                break
    assert lines[0].startswith("retry: ")


def test_a_client_too_slow_to_keep_up_is_dropped_and_loses_nothing():
    server = WebServer("sse-slow", ALFRED_SSE_CLIENT_BUFFER="20").start()
    try:
        principal, headers = bearer()
        execution = running(principal)
        # a client that sends its request and then does not read
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before the handshake
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(
            (
                f"GET /api/v1/executions/{execution.id}/events/stream HTTP/1.1\r\n"
                f"Host: 127.0.0.1\r\nAuthorization: {headers['Authorization']}\r\n\r\n"
            ).encode()
        )
        time.sleep(0.5)
        big = "x" * 20_000
        for _ in range(400):  # far more than the socket buffers hold
            with transaction.atomic():
                event_emit(
                    execution_id=execution.id,
                    type=EventType.ASSISTANCE,
                    key=f"{execution.id}:{uuid.uuid4().hex}",
                    payload={"kind": "test", "big": big},
                )
        wait_for(lambda: "fell behind" in server.output(), timeout=20)
        sock.close()
        # and a reconnect from the start gets every event
        finish(execution)
        seen = collect(server.base, f"/api/v1/executions/{execution.id}/events/stream", headers)
        assert [d["sequence"] for _, _, d in seen] == list(range(1, 402))
    finally:
        server.stop()


def test_200_clients_share_one_listening_connection_and_each_sees_its_events(web):
    # given 200 clients on one web process, on 20 executions
    principal, headers = bearer()
    executions = [running(principal) for _ in range(20)]
    got: dict[int, list[int]] = {}
    ready = threading.Event()

    async def client(index: int, http: httpx.AsyncClient, connected: list[int]) -> None:
        execution = executions[index % len(executions)]
        async with aconnect_sse(
            http, "GET", f"/api/v1/executions/{execution.id}/events/stream"
        ) as source:
            connected.append(index)
            seen = got.setdefault(index, [])
            async for sse in source.aiter_sse():
                if sse.data:
                    seen.append(int(sse.id))

    async def main() -> None:
        connected: list[int] = []
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=web.base, headers=headers, timeout=60, limits=limits
        ) as http:
            tasks = [asyncio.create_task(client(i, http, connected)) for i in range(200)]
            while len(connected) < 200:
                await asyncio.sleep(0.05)
            ready.set()
            await asyncio.gather(*tasks)

    reader = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    reader.start()
    assert ready.wait(60)
    time.sleep(0.5)  # the hub has seen every subscription
    # then the web process holds one LISTEN connection
    with connection.cursor() as cursor:
        # (this database's: another test process may listen in its own on the same server)
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE query = 'LISTEN alfred_events' AND datname = current_database()"
        )
        assert cursor.fetchone()[0] == 1
    # and when each execution gets three events and ends, every client saw its four
    for execution in executions:
        emit(execution, 3)
        finish(execution)
    reader.join(60)
    assert not reader.is_alive()
    assert len(got) == 200
    assert all(seen == [1, 2, 3, 4] for seen in got.values())

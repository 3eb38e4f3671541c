"""A duplicate-delivery storm: 1,000 POSTs over 20 Idempotency-Keys from 50 concurrent
connections to a real web process (uvicorn, its connection pool, real PostgreSQL). Every key
gets one execution, every answer names its key's execution, exactly one answer per key is
the original (the rest are replays), and the database holds 20 executions with one
``execution.accepted`` event each.

The keys' requests are interleaved at random, so most keys are raced by several connections
at once: what is proved is the acceptance's serialization on the key's unique constraint
under real concurrency, not the replay of a finished request.

An answer lost in transit (the connection reset, or closed with no answer sent) is asked for
again with the same key and body, as the contract tells integrators to. So a lost answer is
one more duplicate, not a failure, while anything the server did wrong still fails the test:
its process must still run, and its log must hold no error and no refused request but one
aborted in transit per lost answer (every request here deserves a 202, so a 409, 422 or 429
whose answer was then lost is still caught). A request that cannot be sent at all (the
server gone) or is not answered in time is not retried. Lost answers are few (at most
``LOST_AT_MOST``), and each is reported as a warning."""

from __future__ import annotations

import asyncio
import random
import re
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator

import httpx
import pytest

from alfred.tokens import token_create
from executions.models import Execution, OutboxEvent
from tests.support.live import WebServer

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = 20
POSTS = 1_000
CONNECTIONS = 50
LOST_AT_MOST = 5
SERVER_ERRORS = re.compile(r"Traceback|ERROR|Fatal Python error|Invalid HTTP request")
# Django logs a refused request (4xx) as a WARNING of django.request, with the status's phrase.
REFUSED = re.compile(r"WARNING django\.request (.+?):")


def lost_in_transit(exc: httpx.TransportError) -> bool:
    """The connection ended after the request may have reached the server, with no answer.
    Not a failure to connect (the server is not listening, which no retry mends), a timeout,
    or a malformed answer."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "without sending a response" in str(exc)
    return isinstance(exc, httpx.ReadError | httpx.WriteError)


@pytest.fixture
def web() -> Iterator[WebServer]:
    # One principal sends everything: its trigger throttle would answer 429 long before 1,000.
    server = WebServer("storm", ALFRED_THROTTLE_TRIGGER="off").start()
    try:
        yield server
    finally:
        server.stop()


async def storm(
    base: str, token: str, run: str
) -> tuple[list[tuple[int, httpx.Response]], list[tuple[int, str]]]:
    """POSTs ``POSTS`` requests, each key's body the same every time, from ``CONNECTIONS``
    connections at once, in a random order; returns the (key index, answer) pairs and the
    (key index, error) of each answer lost in transit (its request was sent again)."""
    order = [index % KEYS for index in range(POSTS)]
    random.Random(7).shuffle(order)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in order:
        queue.put_nowait(index)
    answers: list[tuple[int, httpx.Response]] = []
    lost: list[tuple[int, str]] = []
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, limits=limits, headers=headers) as client:

        async def connection() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                body = {"zone": "example.com", "subdomain": f"storm{index}-{run}"}
                while True:
                    try:
                        response = await client.post(
                            "/api/v1/workflows/add-subdomain/executions",
                            json=body,
                            headers={"Idempotency-Key": f"storm-{run}-{index}"},
                            timeout=60,
                        )
                    except httpx.TransportError as exc:
                        if not lost_in_transit(exc):
                            raise
                        lost.append((index, f"{type(exc).__name__}: {exc}"))
                        if len(lost) > LOST_AT_MOST:
                            raise AssertionError(f"too many answers lost: {lost}") from exc
                        continue
                    answers.append((index, response))
                    break

        await asyncio.gather(*(connection() for _ in range(CONNECTIONS)))
    return answers, lost


def test_a_thousand_duplicates_over_twenty_keys_give_twenty_executions(web):
    run = uuid.uuid4().hex[:8]
    _, token = token_create(name=f"storm-{run}", role="integration")

    try:
        answers, lost = asyncio.run(storm(web.base, token, run))
    except (httpx.TransportError, AssertionError) as exc:
        raise AssertionError(f"{type(exc).__name__}: {exc}\n{web.state()}") from exc

    assert web.proc is not None and web.proc.poll() is None, web.state()
    log = web.output()
    assert not SERVER_ERRORS.search(log), web.state()
    # Every request here deserves a 202. The one refusal a client may not see is a request
    # whose connection ended while its body was read (400, aborted), and only for a lost answer.
    refused = REFUSED.findall(log)
    assert set(refused) <= {"Bad Request"} and len(refused) <= len(lost), web.state()
    if lost:
        warnings.warn(f"{len(lost)} answers lost in transit, asked again: {lost}", stacklevel=1)
    assert len(answers) == POSTS
    assert Counter(response.status_code for _, response in answers) == {202: POSTS}
    named: dict[int, set[str]] = defaultdict(set)
    originals: Counter[int] = Counter()
    for index, response in answers:
        named[index].add(response.json()["id"])
        assert response.headers["Location"].endswith(response.json()["id"])
        if response.headers.get("Idempotent-Replayed") != "true":
            originals[index] += 1
    # every answer for a key names that key's one execution, and no two keys share one
    assert all(len(ids) == 1 for ids in named.values()), named
    executions = {next(iter(ids)) for ids in named.values()}
    assert len(executions) == KEYS
    # one original answer per key, the other 980 replays; a key whose original answer may be
    # among the lost ones shows at most one
    lost_keys = {index for index, _ in lost}
    assert all(originals[index] <= 1 for index in lost_keys), originals
    assert {index: count for index, count in originals.items() if index not in lost_keys} == (
        dict.fromkeys(set(range(KEYS)) - lost_keys, 1)
    )
    # and the database agrees: 20 executions, each accepted once
    assert set(Execution.objects.filter(pk__in=executions).values_list("pk", flat=True)) == (
        executions
    )
    accepted = OutboxEvent.objects.filter(execution_id__in=executions, type="execution.accepted")
    assert Counter(accepted.values_list("execution_id", flat=True)) == dict.fromkeys(executions, 1)

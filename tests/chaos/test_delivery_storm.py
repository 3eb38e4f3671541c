"""A duplicate-delivery storm: 1,000 POSTs over 20 Idempotency-Keys from 50 concurrent
connections to a real web process (uvicorn, its connection pool, real PostgreSQL). Every key
gets one execution, every answer names its key's execution, exactly one answer per key is
the original (the rest are replays), and the database holds 20 executions with one
``execution.accepted`` event each.

The keys' requests are interleaved at random, so most keys are raced by several connections
at once: what is proved is the acceptance's serialization on the key's unique constraint
under real concurrency, not the replay of a finished request."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator

import httpx
import pytest

from alfred.tokens import token_create
from executions.models import Execution, OutboxEvent
from tests.live import WebServer

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = 20
POSTS = 1_000
CONNECTIONS = 50


@pytest.fixture
def web() -> Iterator[WebServer]:
    # One principal sends everything: its trigger throttle would answer 429 long before 1,000.
    server = WebServer("storm", ALFRED_THROTTLE_TRIGGER="off").start()
    try:
        yield server
    finally:
        server.stop()


async def storm(base: str, token: str, run: str) -> list[tuple[int, httpx.Response]]:
    """POSTs ``POSTS`` requests, each key's body the same every time, from ``CONNECTIONS``
    connections at once, in a random order; returns (key index, answer) pairs."""
    order = [index % KEYS for index in range(POSTS)]
    random.Random(7).shuffle(order)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in order:
        queue.put_nowait(index)
    answers: list[tuple[int, httpx.Response]] = []
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, limits=limits, headers=headers) as client:

        async def connection() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                body = {"zone": "example.com", "subdomain": f"storm{index}-{run}"}
                response = await client.post(
                    "/api/v1/workflows/add-subdomain/executions",
                    json=body,
                    headers={"Idempotency-Key": f"storm-{run}-{index}"},
                    timeout=60,
                )
                answers.append((index, response))

        await asyncio.gather(*(connection() for _ in range(CONNECTIONS)))
    return answers


def test_a_thousand_duplicates_over_twenty_keys_give_twenty_executions(web):
    run = uuid.uuid4().hex[:8]
    _, token = token_create(name=f"storm-{run}", role="integration")

    answers = asyncio.run(storm(web.base, token, run))

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
    # one original answer per key; the other 980 are replays
    assert originals == dict.fromkeys(range(KEYS), 1)
    # and the database agrees: 20 executions, each accepted once
    assert set(Execution.objects.filter(pk__in=executions).values_list("pk", flat=True)) == (
        executions
    )
    accepted = OutboxEvent.objects.filter(execution_id__in=executions, type="execution.accepted")
    assert Counter(accepted.values_list("execution_id", flat=True)) == dict.fromkeys(executions, 1)

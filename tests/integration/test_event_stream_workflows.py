"""Each lane workflow end to end, followed by Server-Sent Events exactly as docs/contract.md's
Python recipe does it, and compared with polling: the stream gives every event the execution
has, the lane's last word included (``lane.released`` commits some milliseconds after the
terminal event, in the lane reconciler's own transaction), and only types of the public
catalogue (``executions.events``).

A real Celery worker on the whole sandbox (tests/support/platform_world.py), a real uvicorn
web process for the stream, real PostgreSQL and Redis."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from executions.events import PUBLIC_EVENT_TYPES
from executions.models import Execution
from lanes.models import Lane
from providers.sandbox.stack import Sandbox
from tests.conftest import WorkerProcess, quiesce, wait_for
from tests.support import platform_world as world
from tests.support.helpers import submit
from tests.support.live import WebServer

pytestmark = [pytest.mark.worker, pytest.mark.standin, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with world.sandbox_started() as started:
        yield started


@pytest.fixture(scope="module")
def module_worker(sandbox: Sandbox, django_db_setup: None) -> Iterator[WorkerProcess]:
    with world.platform_worker(sandbox, "stream") as worker:
        yield worker


@pytest.fixture(scope="module")
def web(django_db_setup: None) -> Iterator[WebServer]:
    server = WebServer("sse-workflows").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def platform(module_worker: WorkerProcess, sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    sandbox.clear_faults()
    quiesce(60)


def _label() -> str:
    return uuid.uuid4().hex[:8]


# The four workflows that hold a lane, each with an input of its own.
LANE_WORKFLOWS: dict[str, Callable[[], dict[str, Any]]] = {
    "add-certificate": lambda: {"domain": f"c{_label()}.example.com"},
    "update-lambda-version": lambda: {
        "target": "search-api",
        "environment": "production",
        "version": "3",
    },
    "add-domain": lambda: {"domain": f"d{_label()}.example.com", "kirby_mode": "enabled"},
    "onboard-domain": lambda: {"domain": f"o{_label()}.org"},
}


def follow_as_the_recipe(base: str, token: str, execution_id: str, seen: list[Any]) -> None:
    """docs/contract.md's Python recipe, as written (``print`` is ``seen.append``)."""
    last: str | None = None  # the last event id seen: a reconnect resumes after it
    # (timeout=None is the recipe's: a stream lasts as long as the execution runs)
    with httpx.Client(
        base_url=base,
        timeout=None,  # noqa: S113
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        while True:
            headers: dict[str, str] = {"Last-Event-ID": last} if last else {}
            try:
                with connect_sse(
                    client,
                    "GET",
                    f"/api/v1/executions/{execution_id}/events/stream",
                    headers=headers,
                ) as source:
                    if source.response.status_code == 204:
                        break  # the execution settled and everything was read
                    for sse in source.iter_sse():
                        if sse.data:  # (a block without data is the retry hint)
                            event = json.loads(sse.data)
                            last = sse.id
                            seen.append((event["sequence"], event["type"], event["key"]))
            except httpx.TransportError:
                time.sleep(2)


def polled(api: Any, execution_id: str) -> list[tuple[int, str, str]]:
    """Every event of the execution, page after page of ``GET …/events?after=``."""
    found: list[tuple[int, str, str]] = []
    after = 0
    while True:
        page = api.get(f"/api/v1/executions/{execution_id}/events?after={after}&limit=500")
        assert page.status_code == 200, page.content
        body = page.json()
        found += [(e["sequence"], e["type"], e["key"]) for e in body["events"]]
        after = body["next_after"]
        if not body["has_more"]:
            return found


@pytest.mark.parametrize("workflow", list(LANE_WORKFLOWS))
def test_the_recipe_receives_every_event_polling_shows(
    workflow, api, integration_token, platform, web
):
    # given a lane workflow just accepted, followed as the recipe follows it
    body = submit(api, workflow, LANE_WORKFLOWS[workflow]()).json()
    execution_id = body["id"]
    assert body["lane"] is not None, body
    seen: list[Any] = []
    follower = threading.Thread(
        target=follow_as_the_recipe,
        args=(web.base, integration_token, execution_id, seen),
        daemon=True,
    )
    follower.start()

    # when it runs to its end, and its lane goes on to the next in line
    follower.join(240)
    assert not follower.is_alive(), f"the recipe did not end; it saw {seen[-3:]}"
    execution = Execution.objects.get(pk=execution_id)
    assert execution.status == "succeeded", execution.error
    wait_for(lambda: not Lane.objects.filter(owner_id=execution_id).exists(), timeout=30)

    # then the stream gave exactly what polling gives, the lane's release last
    assert seen == polled(api, execution_id)
    assert [s for s, _, _ in seen] == list(range(1, len(seen) + 1))
    assert seen[-1][1] == "lane.released"
    # and only types of the public catalogue
    assert {t for _, t, _ in seen} <= PUBLIC_EVENT_TYPES

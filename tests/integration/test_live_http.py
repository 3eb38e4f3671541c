"""Over real HTTP: uvicorn serving the ASGI app (with its connection pool) against the test
database, for what the in-process client cannot show."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from django.conf import settings

from alfred.devstack import free_ports
from alfred.tokens import token_create
from executions.models import Execution
from tests.conftest import ROOT, subprocess_database_url, wait_for
from tests.support.helpers import SUBDOMAIN

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.server("pooled connections over TCP that the server ended"),
]


@pytest.fixture
def live() -> Iterator[httpx.Client]:
    port = free_ports()
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "DJANGO_SETTINGS_MODULE": "alfred.settings",
        "ALFRED_ENV": "test",
        "ALFRED_DEBUG": "1",
        "ALFRED_MAX_BODY_BYTES": "2048",
    }
    web = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "alfred.asgi:application",
            "--port",
            str(port),
            "--lifespan",
            "on",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout=30, interval=0.2)
        _, raw = token_create(name="live", role="integration")
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {raw}"}) as client:
            yield client
    finally:
        web.terminate()
        web.wait(20)


def _chunks(data: bytes, size: int = 7) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_a_chunked_body_is_read_whole(live):
    import json

    response = live.post(
        "/api/v1/workflows/add-subdomain/executions",
        content=_chunks(json.dumps(SUBDOMAIN).encode()),
        headers={"Content-Type": "application/json", "Idempotency-Key": "chunked"},
    )

    assert response.status_code == 202, response.text
    assert response.json()["input"]["subdomain"] == "api.example.com"
    assert Execution.objects.count() == 1


def test_a_chunked_body_over_the_limit_is_413(live):
    response = live.post(
        "/api/v1/workflows/add-subdomain/executions",
        content=_chunks(b"{" + b" " * 4096 + b"}", size=512),
        headers={"Content-Type": "application/json", "Idempotency-Key": "big"},
    )

    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert not Execution.objects.exists()


def test_debug_pages_never_replace_api_problems(live):
    response = live.get("/api/v1/definitely/not/here")

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "not_found"


def _sessions_started() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_requests_reuse_pooled_connections(live):
    # Each request runs on a fresh thread under ASGI; without the pool each would open its own
    # PostgreSQL session. Count the sessions the database saw start.
    assert live.get("/api/v1/executions").status_code == 200  # the pool is up
    before = _sessions_started()

    for i in range(30):
        assert live.get("/api/v1/executions").status_code == 200, i

    assert _sessions_started() - before <= 3


def _client_backends() -> list[int]:
    """The other client backends of the test database: the web process's pooled ones."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return [row[0] for row in cursor.fetchall()]


@contextmanager
def _slow_to_leave(pids: list[int], seconds: float = 0.5) -> Iterator[None]:
    """The backends ``pids`` get no CPU for ``seconds`` (stopped, then continued), as on a
    loaded machine where a terminated backend waits its turn to act on the signal: until it
    runs, its socket says nothing, which is what the pool's quick check reads."""
    resume = threading.Timer(seconds, _continue, [pids])
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        resume.start()
        yield
    finally:
        resume.cancel()  # (a no-op once it has run: then it continues them again, harmlessly)
        _continue(pids)


def _continue(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _terminate(pids: list[int]) -> None:
    """End the backends ``pids`` and wait until each has exited (its goodbye is then on its
    socket). Without the timeout the server only signals them and returns: a backend not yet
    scheduled has said nothing, and the pool's quick check (``alfred.dbpool``) rightly lends
    a silent connection, as it would one the server ends a moment after the loan."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT bool_and(pg_terminate_backend(pid, 10000)) FROM unnest(%s::int[]) AS pid",
            [pids],
        )
        assert cursor.fetchone()[0] is True


def test_pooled_connections_the_server_ended_are_replaced_before_a_request_uses_them(live):
    # given: the web's pooled connections, each lent a moment ago (the pool lends them in
    # turn), all terminated by the server while idle, on a machine too busy to let the
    # backends act on it at once
    for _ in range(4):
        assert live.get("/api/v1/executions").status_code == 200
    pids = _client_backends()
    assert pids
    with _slow_to_leave(pids):
        _terminate(pids)

        # then: no request fails for it: the pool's check finds each one closed and lends
        # another
        for i in range(12):
            assert live.get("/api/v1/executions").status_code == 200, i


def test_the_web_process_keeps_what_it_starts_with_out_of_the_collectors_sight():
    """``alfred.asgi`` freezes the objects it starts with, so that a full collection scans
    only what came after (bench/reports/acceptance.md: a pause of 40-75 ms otherwise)."""
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "DJANGO_SETTINGS_MODULE": "alfred.settings",
        "ALFRED_ENV": "test",
    }
    frozen = subprocess.run(
        [sys.executable, "-c", "import gc, alfred.asgi; print(gc.get_freeze_count())"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert int(frozen) > 50_000  # Django, DRF and Alfred's apps as imported (150,000 here)

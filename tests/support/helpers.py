from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection
from rest_framework.test import APIClient

from executions.models import Execution, ExecutionStatus, Hook

SUBDOMAIN = {"zone": "example.com", "subdomain": "api", "ticket_ids": ["OPS-1"]}
CERTIFICATE = {"domain": "example.com", "ticket_ids": ["OPS-2"]}
LAMBDA = {"target": "checkout-api", "environment": "production", "version": "42"}


def submit(api: APIClient, workflow: str, body: Any, key: str | None = None, **headers: str) -> Any:
    """POST an execution request; ``key=None`` sends a fresh Idempotency-Key."""
    extra: dict[str, Any] = {"HTTP_IDEMPOTENCY_KEY": key or f"key-{uuid.uuid4()}"}
    extra.update({f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()})
    return api.post(f"/api/v1/workflows/{workflow}/executions", body, format="json", **extra)


def paused_on_a_plan(execution_id: str, plan_hash: str = "a" * 64) -> None:
    """An accepted execution paused on an operator's checkpoint for the plan of ``plan_hash``,
    as its apply stage leaves it (no worker needed)."""
    execution = Execution.objects.get(pk=execution_id)
    Execution.objects.filter(pk=execution_id).update(status=ExecutionStatus.PAUSED)
    Hook.objects.create(
        execution=execution,
        run_id=str(execution.current_run_id),
        stage="apply",
        name="approve",
        token=f"approve-{execution_id}",
        operator=True,
        payload={"plan_hash": plan_hash, "plan": {}},
    )


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"].startswith("https://")
    assert body["title"] and body["detail"]
    return body


class Trace(list[str]):
    """The messages libpq sent and received on a connection, a line each (its trace)."""

    @property
    def round_trips(self) -> int:
        """Each ends with the client's Sync (the extended protocol; a pipeline's statements
        sent together) or is a lone Query."""
        return sum(line.split("\t")[1:4:2] in (["F", "Sync"], ["F", "Query"]) for line in self)


@contextmanager
def libpq_trace(conn: psycopg.Connection[Any] | None = None) -> Iterator[Trace]:
    """What ``conn`` (this thread's Django connection by default) says to PostgreSQL inside
    the block, and hears: the trace is filled when the block ends."""
    if conn is None:
        connection.ensure_connection()
        conn = connection.connection
    traced = Trace()
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            yield traced
        finally:
            conn.pgconn.untrace()
            trace.seek(0)
            traced.extend(trace.read().splitlines())

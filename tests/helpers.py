from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection
from rest_framework.test import APIClient

SUBDOMAIN = {"zone": "example.com", "subdomain": "api", "ticket_ids": ["OPS-1"]}
CERTIFICATE = {"domain": "example.com", "ticket_ids": ["OPS-2"]}
LAMBDA = {"target": "checkout-api", "environment": "production", "version": "42"}


def submit(api: APIClient, workflow: str, body: Any, key: str | None = None, **headers: str) -> Any:
    """POST an execution request; ``key=None`` sends a fresh Idempotency-Key."""
    extra: dict[str, Any] = {"HTTP_IDEMPOTENCY_KEY": key or f"key-{uuid.uuid4()}"}
    extra.update({f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()})
    return api.post(f"/api/v1/workflows/{workflow}/executions", body, format="json", **extra)


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"].startswith("https://")
    assert body["title"] and body["detail"]
    return body


@dataclass
class RoundTrips:
    count: int = 0


@contextmanager
def round_trips() -> Iterator[RoundTrips]:
    """The round trips this thread's connection makes to PostgreSQL inside the block, as
    libpq's trace shows what it sends: each ends with a Sync (the extended protocol, a
    pipeline's statements sent together) or is a lone Query."""
    counted = RoundTrips()
    connection.ensure_connection()
    with tempfile.TemporaryFile("w+") as trace:
        connection.connection.pgconn.trace(trace.fileno())
        try:
            yield counted
        finally:
            connection.connection.pgconn.untrace()
            trace.seek(0)
            counted.count = sum(
                line.rstrip().split("\t")[1:4:2] in (["F", "Sync"], ["F", "Query"])
                for line in trace
            )

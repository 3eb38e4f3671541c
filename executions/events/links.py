"""Absolute links that go into events (read where a person is not in Alfred: a chat bot's
message, a ticket), built on ``ALFRED_PUBLIC_URL``."""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.urls import NoReverseMatch, reverse


def absolute(path: str) -> str:
    return f"{settings.ALFRED_PUBLIC_URL}{path}"


def approval_links(execution_id: str) -> dict[str, str]:
    """Where a person approves the plan (the admin's approval page, with the DNS diff) and
    where a program does (the API)."""
    links = {"api": absolute(reverse("execution-approve", kwargs={"execution_id": execution_id}))}
    with contextlib.suppress(NoReverseMatch):  # an instance without the admin
        links["admin"] = absolute(
            reverse("admin:executions_execution_approve", args=[execution_id])
        )
    return links

"""Absolute links that go into events (read where a person is not in Alfred: a chat bot's
message, a ticket), built on ``ALFRED_PUBLIC_URL``."""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.urls import NoReverseMatch, reverse
from django.utils.http import urlencode


def absolute(path: str) -> str:
    return f"{settings.ALFRED_PUBLIC_URL}{path}"


def approval_links(execution_id: str, plan_hash: str = "") -> dict[str, str]:
    """Where a person approves the plan (the admin's approval page, with the plan before →
    after; named by its hash, so that a link followed after what the plan read changed says
    this plan was superseded and which one waits now) and where a program does (the API)."""
    links = {"api": absolute(reverse("execution-approve", kwargs={"execution_id": execution_id}))}
    with contextlib.suppress(NoReverseMatch):  # an instance without the admin
        page = reverse("admin:executions_execution_approve", args=[execution_id])
        query = f"?{urlencode({'plan_hash': plan_hash})}" if plan_hash else ""
        links["admin"] = absolute(page + query)
    return links

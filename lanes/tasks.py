"""Beat's reconciler tick: thin, idempotent (compare-and-swap writes, SKIP LOCKED)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from lanes.reconciler import lanes_reconcile


@shared_task(name="lanes.tasks.reconcile", bind=True, ignore_result=True)
def reconcile(self: Any, after: str = "") -> int:
    if settings.ALFRED_READ_ONLY:
        return 0
    visited, more_after = lanes_reconcile(after=after)
    if more_after is not None:
        self.apply_async(kwargs={"after": more_after}, queue="scanners")  # the next page
    return visited

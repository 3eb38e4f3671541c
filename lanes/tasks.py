"""Beat's reconciler tick: thin, idempotent (compare-and-swap writes, SKIP LOCKED)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from lanes.reconciler import lanes_reconcile


@shared_task(name="lanes.tasks.reconcile", ignore_result=True)
def reconcile() -> int:
    if settings.ALFRED_READ_ONLY:
        return 0
    return lanes_reconcile()

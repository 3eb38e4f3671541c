"""The relay's task: thin, as the executions' are."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from delivery.relay import BATCH, deliveries_relay


# Named as when it lived in the executions app: a name is the wire contract (beat's rows,
# routes, messages in flight).
@shared_task(name="executions.tasks.webhook_relay", bind=True, ignore_result=True)
def webhook_relay(self: Any) -> int:
    """Send what is due (after an emit, and from beat as the scan). acks early: a relay that
    dies mid-attempt leaves claims that run out, and the next scan sends those again."""
    if settings.ALFRED_READ_ONLY:
        return 0
    tried = deliveries_relay()
    if tried >= BATCH:
        self.apply_async(queue="webhooks")  # more are due: go on at once, in a new task
    return tried

"""The operators' admin for executions (DESIGN §8): each module registers its models.

- :mod:`.executions` — the execution's page, its controls and list;
- :mod:`.pages` — what those pages compute (reads only);
- :mod:`.records` — runs, stages, receipts, events, the audit log;
- :mod:`.webhooks` — endpoints, deliveries, inbound notifications.
"""

from executions.admin import executions, records, webhooks

__all__ = ["executions", "records", "webhooks"]

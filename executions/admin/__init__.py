"""The operators' admin for executions (docs/contract.md, "Authentication, roles and ownership"):
each module registers its models.

- :mod:`.executions` — the execution's page, its controls and list;
- :mod:`.pages` — what those pages compute (reads only);
- :mod:`.records` — runs, stages, receipts, events, the audit log.

Webhook endpoints, deliveries and inbound notifications are ``delivery.admin``'s.
"""

from executions.admin import executions, records

__all__ = ["executions", "records"]

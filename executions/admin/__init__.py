"""The operators' admin for executions (docs/contract.md, "Authentication, roles and ownership"):
each module registers its models.

- :mod:`.executions` — the execution's page, its controls and list;
- :mod:`.pages` — what those pages compute (reads only);
- :mod:`.records` — runs, stages, receipts, events, the audit log;
- :mod:`.freezes` — change freezes: declare, end, let one execution through.

Webhook endpoints, deliveries and inbound notifications are ``delivery.admin``'s.
"""

from executions.admin import executions, freezes, records

__all__ = ["executions", "freezes", "records"]

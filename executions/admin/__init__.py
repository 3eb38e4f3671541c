"""The operators' admin for executions (docs/contract.md, "Authentication, roles and ownership"):
each module registers its models.

- :mod:`.executions` — the execution's page, its controls and list;
- :mod:`.pages` — what those pages compute (reads only);
- :mod:`.records` — runs, stages, receipts, events, the audit log;
- :mod:`.freezes` — change freezes: declare, end, let one execution through;
- :mod:`.drifts` — what the drift watch found (accept or start again: the execution's controls).

Webhook endpoints, deliveries and inbound notifications are ``delivery.admin``'s.
"""

from executions.admin import drifts, executions, freezes, records

__all__ = ["drifts", "executions", "freezes", "records"]

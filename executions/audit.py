"""The audit log's one writer: what an operator or an integration did, recorded in the
caller's transaction."""

from __future__ import annotations

from alfred.principals import Caller
from executions.models import AuditEntry


def audit_record(
    caller: Caller, action: str, execution_id: str, reason: str, **data: object
) -> None:
    """One audit entry, in the caller's transaction: actor is the stable principal id, the
    name (a token's, a user's) rides along in ``data`` for people reading the log."""
    AuditEntry.objects.create(
        actor=caller.principal,
        action=action,
        target_type="execution",
        target_id=execution_id,
        reason=reason,
        data={"actor_name": caller.name, "role": caller.role, **data},
    )

"""Plan hashing (docs/workflows.md): ``plan_hash`` = sha256 over the RFC 8785 canonical JSON of what
the plan proposes and of the existing state it was drawn from. Two plans have one hash
exactly when they would do the same thing to the same state: an approval names the hash, so
consent given for one state is never applied to another."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings

from executions.identity import canonical_json
from executions.runtime.stage import StageContext


def plan_hash(*, proposed: Any, existing: Any) -> str:
    document = {"proposed": proposed, "existing": existing}
    return hashlib.sha256(canonical_json(document)).hexdigest()


def approval_token(execution_id: str, hash_: str) -> str:
    """The hook token of an approval: bound to the execution and to one plan hash."""
    return hashlib.sha256(f"{execution_id}\n{hash_}".encode()).hexdigest()


def operator_consent(
    ctx: StageContext, name: str, *, plan_hash: str, payload: Mapping[str, Any]
) -> dict[str, Any]:
    """Wait, holding no worker, for an operator to consent to the plan whose hash is
    ``plan_hash`` (hook ``name``: "approve" for a plan, "confirm" for a rollback's doubt): the
    hook's token is bound to this execution and that hash, so consent given for one plan is
    never applied to another. ``payload`` is what the operator is shown (``plan``,
    ``summary``, and whatever else: ``force_required``, ``why``); the hash is added. Unanswered
    for ``ALFRED_APPROVAL_TTL_SECONDS``, the run fails ``approval_expired``. Returns the
    consent's signal (``force``, when the plan asked for it)."""
    return ctx.wait_for_hook(
        name,
        token=approval_token(ctx.execution_id, plan_hash),
        payload={**payload, "plan_hash": plan_hash},
        operator=True,
        expires_in=settings.ALFRED_APPROVAL_TTL_SECONDS,
        expired_code="approval_expired",
    )


def change_summary(zone: str, name: str, changes: Sequence[Mapping[str, Any]], before: Any) -> str:
    """One line a person asked to approve reads first (a chat message, a ticket title)."""
    moves = ", ".join(
        f"{change.get('action')} {(change.get('record') or {}).get('type')}" for change in changes
    )
    overwrites = " — overwrites DNS that is there now" if before else ""
    return f"{name} in {zone}: {moves or 'no change'}{overwrites}"

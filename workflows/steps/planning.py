"""Plan hashing (docs/workflows.md): ``plan_hash`` = sha256 over the RFC 8785 canonical JSON of what
the plan proposes and of the existing state it was drawn from. Two plans have one hash
exactly when they would do the same thing to the same state: an approval names the hash, so
consent given for one state is never applied to another."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from executions.identity import canonical_json


def plan_hash(*, proposed: Any, existing: Any) -> str:
    document = {"proposed": proposed, "existing": existing}
    return hashlib.sha256(canonical_json(document)).hexdigest()


def approval_token(execution_id: str, hash_: str) -> str:
    """The hook token of an approval: bound to the execution and to one plan hash."""
    return hashlib.sha256(f"{execution_id}\n{hash_}".encode()).hexdigest()


def change_summary(zone: str, name: str, changes: Sequence[Mapping[str, Any]], before: Any) -> str:
    """One line a person asked to approve reads first (a chat message, a ticket title)."""
    moves = ", ".join(
        f"{change.get('action')} {(change.get('record') or {}).get('type')}" for change in changes
    )
    overwrites = " — overwrites DNS that is there now" if before else ""
    return f"{name} in {zone}: {moves or 'no change'}{overwrites}"

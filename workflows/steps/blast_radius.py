"""The blast-radius guard every Route53 batch goes through (docs/workflows.md).

It refuses, with ``FatalError`` ``code=blast_radius``:

- any change to the zone apex's NS or SOA record set (the delegation and the zone itself:
  never Alfred's to touch; no approval lifts this);
- a batch that would update more than 30% of a zone holding at least 10 record sets, or
  delete more than 30% of it (octoDNS's defaults: ``MIN_EXISTING_RECORDS``,
  ``update_pcent_threshold``, ``delete_pcent_threshold``) — unless an operator approved that
  batch with ``force`` (the refusal says ``forceable``; the workflow pauses for it like for a
  plan).

An update replaces a record set that exists (an UPSERT of an existing set, or a DELETE and a
CREATE of the same set in the batch); a delete removes one for good; a CREATE of a new set is
neither. ``existing`` is what the batch's names held when read, so the guard judges the batch
against the state it will be sent against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from executions.runtime.errors import FatalError

MIN_EXISTING_RECORDS = 10
UPDATE_THRESHOLD = 0.3
DELETE_THRESHOLD = 0.3
PROTECTED_APEX_TYPES = frozenset({"NS", "SOA"})


class BlastRadius(FatalError):
    code = "blast_radius"

    def __init__(self, message: str, *, forceable: bool, **details: Any) -> None:
        super().__init__(message, code="blast_radius", forceable=forceable, **details)
        self.forceable = forceable


def _key(record: Mapping[str, Any]) -> tuple[str, str, str | None]:
    return (record["name"], record["type"], record.get("set_identifier"))


def blast_radius_check(
    *,
    zone: str,
    record_set_count: int,
    changes: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
    force: bool = False,
) -> dict[str, int]:
    """Raise :class:`BlastRadius`, or return the batch's counts (for the plan and receipt)."""
    counts, refusal = blast_radius_assess(
        zone=zone, record_set_count=record_set_count, changes=changes, existing=existing
    )
    if refusal is not None and not (force and refusal.forceable):
        raise refusal
    return counts


def blast_radius_assess(
    *,
    zone: str,
    record_set_count: int,
    changes: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, int], BlastRadius | None]:
    """The batch's counts and the guard's refusal without force, if any (what a plan shows
    before anything is sent: a forceable refusal is asked of an operator at the approval)."""
    present = {_key(record) for record in existing}
    created = {_key(c["record"]) for c in changes if c["action"] == "CREATE"}
    updated: set[tuple[str, str, str | None]] = set()
    deleted: set[tuple[str, str, str | None]] = set()
    for change in changes:
        key = _key(change["record"])
        if change["action"] == "UPSERT" and key in present:
            updated.add(key)
        elif change["action"] == "DELETE":
            (updated if key in created else deleted).add(key)
    counts = {"existing": record_set_count, "updates": len(updated), "deletes": len(deleted)}
    for change in changes:
        record = change["record"]
        if record["name"] == zone and record["type"] in PROTECTED_APEX_TYPES:
            return counts, BlastRadius(
                f"the batch changes the apex {record['type']} of {zone}: never done by Alfred",
                forceable=False,
                record={"name": record["name"], "type": record["type"]},
            )
    if record_set_count < MIN_EXISTING_RECORDS:
        return counts, None
    for kind, threshold in (("updates", UPDATE_THRESHOLD), ("deletes", DELETE_THRESHOLD)):
        if counts[kind] > threshold * record_set_count:
            return counts, BlastRadius(
                f"the batch {kind[:-1]}s {counts[kind]} of the {record_set_count} record sets "
                f"of {zone} (more than {threshold:.0%}): an operator must approve it with force",
                forceable=True,
                **counts,
            )
    return counts, None

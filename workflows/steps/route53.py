"""Route53 moves for the workflows: read a zone's state at a name, send ONE change batch
(through the blast-radius guard) with its receipt, wait for INSYNC, and undo a batch exactly.

Each function here is a step function (``ctx.step(key, fn, ...)``) or, for the undo, stage
code given ``ctx``. A dry run gets :class:`ReadOnlyRoute53` (no mutating call is reachable)
and :func:`simulate_batch` instead of the batch.

A batch's receipt: ``resource = aws.route53.record_sets``, ``action = change``, ``before`` the
record sets at the batch's names as read before it, ``after`` those sets as the batch leaves
them, ``undo`` what restoring needs (the zone and the names), and the provider's ``handle``.
Its compensation reads the names again: if they hold exactly ``after`` it sends one batch
back to ``before``; otherwise it fails with ``drifted``, naming each set that differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from django.conf import settings

from executions.runtime.stage import StageContext
from providers.aws.route53 import Change, Route53
from providers.factory import Providers
from workflows.steps.blast_radius import blast_radius_check
from workflows.steps.compensations import Drifted, mutation
from workflows.steps.errors import provider_errors
from workflows.steps.planning import change_summary, operator_consent, plan_hash

RESOURCE = "aws.route53.record_sets"
CHANGE = mutation(RESOURCE, "change")
_READS = frozenset({"zone", "zone_by_id", "records", "apex_alias", "batch_state", "inspect"})

Key = tuple[str, str, str | None]


class ReadOnlyRoute53:
    """The Route53 adapter with its reads only: what a dry run's steps are given."""

    def __init__(self, adapter: Route53) -> None:
        self._adapter = adapter

    def __getattr__(self, name: str) -> Any:
        if name not in _READS:
            raise AttributeError(f"a dry run reaches no mutating Route53 call ({name})")
        return getattr(self._adapter, name)


def route53(*, dry_run: bool) -> Any:
    adapter = Providers(settings.ALFRED_PROVIDERS).route53()
    return ReadOnlyRoute53(adapter) if dry_run else adapter


def _key(record: Mapping[str, Any]) -> Key:
    return (record["name"], record["type"], record.get("set_identifier"))


def post_state(
    existing: Sequence[Mapping[str, Any]], changes: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The record sets at the batch's names once ``changes`` apply to ``existing``."""
    sets = {_key(r): dict(r) for r in existing}
    for change in changes:
        record = change["record"]
        if change["action"] == "DELETE":
            sets.pop(_key(record), None)
        else:
            sets[_key(record)] = dict(record)
    return sorted(
        sets.values(), key=lambda r: (r["name"], r["type"], r.get("set_identifier") or "")
    )


def read_state(zone_name: str, name: str, *, dry_run: bool) -> dict[str, Any]:
    """The hosted zone, its apex alias and the record sets at ``name`` (plan's read). A zone
    that does not exist is a readiness failure (``zone_missing``)."""
    adapter = route53(dry_run=dry_run)
    with provider_errors(readiness="zone_missing", check=f"hosted zone {zone_name}"):
        zone = adapter.zone(zone_name)
    with provider_errors():
        return {
            "zone": {
                "id": zone["id"],
                "name": zone["name"],
                "record_set_count": zone["record_set_count"],
            },
            "apex_alias": adapter.apex_alias(zone),
            "records": adapter.records(zone["id"], name),
        }


def read_records(zone_id: str, names: Sequence[str], *, dry_run: bool) -> list[dict[str, Any]]:
    adapter = route53(dry_run=dry_run)
    with provider_errors():
        found = [record for name in sorted(set(names)) for record in adapter.records(zone_id, name)]
    return sorted(found, key=lambda r: (r["name"], r["type"], r.get("set_identifier") or ""))


@CHANGE
def apply_batch(
    *,
    zone: Mapping[str, Any],
    changes: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
    operation: str,
    force: bool = False,
) -> dict[str, Any]:
    """Send ``changes`` as ONE batch against ``existing`` (the sets at its names as read);
    the blast-radius guard first. Safe to run again after any failure (the adapter sends a
    compare-and-swap and recognizes a batch that already landed)."""
    counts = blast_radius_check(
        zone=zone["name"],
        record_set_count=zone["record_set_count"],
        changes=changes,
        existing=existing,
        force=force,
    )
    batch = cast("list[Change]", [dict(change) for change in changes])
    with provider_errors():
        adapter = Providers(settings.ALFRED_PROVIDERS).route53()
        handle = adapter.change(zone["id"], batch, operation=operation)
    return _receipt(zone, changes, existing, handle=dict(handle), counts=counts)


def simulate_batch(
    *,
    zone: Mapping[str, Any],
    changes: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
    operation: str,
    force: bool = False,
) -> dict[str, Any]:
    """What :func:`apply_batch` would record, without a call: the dry run's batch."""
    counts = blast_radius_check(
        zone=zone["name"],
        record_set_count=zone["record_set_count"],
        changes=changes,
        existing=existing,
        force=force,
    )
    handle = {
        "provider": "aws.route53",
        "kind": "change",
        "id": None,
        "status": "INSYNC",
        "done": True,
        "ok": True,
        "observations": {"simulated": True},
    }
    return _receipt(zone, changes, existing, handle=handle, counts=counts, simulated=True)


def _receipt(
    zone: Mapping[str, Any],
    changes: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    names = sorted({c["record"]["name"] for c in changes})
    return CHANGE.receipt(
        undo={"zone": dict(zone), "names": names},
        before=[dict(r) for r in existing],
        after=post_state(existing, changes),
        **extra,
    )


def change_insync(handle: Mapping[str, Any]) -> dict[str, Any] | None:
    """A probe for ``ctx.wait_until``: the handle once Route53 reports the change INSYNC."""
    if handle.get("observations", {}).get("simulated"):
        return dict(handle)
    with provider_errors():
        current = Providers(settings.ALFRED_PROVIDERS).route53().inspect(handle)  # type: ignore[arg-type]
    return dict(current) if current["done"] else None


INSYNC_POLL_SECONDS = 2.0
INSYNC_TIMEOUT_SECONDS = 900.0


def send_and_wait(
    ctx: StageContext,
    *,
    zone: Mapping[str, Any],
    changes: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
    operation: str,
    force: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stage code: ONE batch (``batch``: simulated in a dry run) and the durable wait for
    its INSYNC (``insync``, a poll every 2 s, holding no worker). Returns the batch's receipt
    and the change's final handle."""
    batch = simulate_batch if ctx.dry_run else apply_batch
    receipt = ctx.step(
        "batch",
        batch,
        zone=zone,
        changes=changes,
        existing=existing,
        operation=operation,
        force=force,
        mutation=True,
    )
    handle = ctx.wait_until(
        "insync",
        lambda: change_insync(receipt["handle"]),
        every=INSYNC_POLL_SECONDS,
        timeout=INSYNC_TIMEOUT_SECONDS,
    )
    return receipt, handle


def drift(
    expected: Sequence[Mapping[str, Any]], found: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each record set that is not as ``expected``: whole sets compared, by name/type/id."""
    want = {_key(r): dict(r) for r in expected}
    have = {_key(r): dict(r) for r in found}
    return [
        {
            "name": key[0],
            "type": key[1],
            "set_identifier": key[2],
            "expected": want.get(key),
            "found": have.get(key),
        }
        for key in sorted(want.keys() | have.keys(), key=lambda k: (k[0], k[1], k[2] or ""))
        if want.get(key) != have.get(key)
    ]


def restore_changes(receipt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The batch that takes the receipt's names from ``after`` back to ``before``: the sets
    Alfred added go first (Route53 applies a batch in order, and a CNAME coming back cannot
    share its name with the alias records still there), then the sets as they were."""
    before = {_key(r): r for r in receipt["before"]}
    after = {_key(r): r for r in receipt["after"]}
    changes = [{"action": "DELETE", "record": dict(r)} for k, r in after.items() if k not in before]
    changes += [
        {"action": "UPSERT", "record": dict(r)} for k, r in before.items() if after.get(k) != r
    ]
    return changes


@CHANGE.undo
def undo_batch(ctx: StageContext, receipt: Mapping[str, Any]) -> dict[str, Any]:
    """Compensate a batch: the names must hold exactly the receipt's ``after``; then ONE batch
    back to ``before``, and the wait for INSYNC. A simulated batch has nothing to undo.

    A batch whose landing was recovered after a lost answer (``ownership: unproven``: the
    names held its result, but no read can tell who put it there) is not reversed on the
    receipt's word: the rollback pauses for an operator to approve the restoring batch, shown
    as a plan (records before → after, its hash), and reads the names again once approved."""
    if receipt.get("simulated"):
        return {"restored": [], "simulated": True}
    zone = receipt["undo"]["zone"]
    names = receipt["undo"]["names"]
    current = ctx.step("read", read_records, zone["id"], names, dry_run=False)
    differences = drift(receipt["after"], current)
    if differences:
        raise Drifted(RESOURCE, differences)
    changes = restore_changes(receipt)
    if not changes:
        return {"restored": []}
    if (receipt.get("handle") or {}).get("observations", {}).get("ownership") == "unproven":
        digest = plan_hash(
            proposed={"zone": zone["id"], "records": receipt["before"]},
            existing={"records": current},
        )
        operator_consent(
            ctx,
            "confirm",
            plan_hash=digest,
            payload={
                "plan": {
                    "zone": zone["name"],
                    "name": ", ".join(names),
                    "before": current,
                    "after": receipt["before"],
                    "changes": changes,
                },
                "summary": "roll back: "
                + change_summary(zone["name"], ", ".join(names), changes, current),
                "why": "the batch's landing was recovered after a lost answer: nothing proves "
                "the records it left are Alfred's",
            },
        )
        current = ctx.step("reread", read_records, zone["id"], names, dry_run=False)
        differences = drift(receipt["after"], current)
        if differences:
            raise Drifted(RESOURCE, differences)
    restored = ctx.step(
        "restore",
        apply_batch,
        zone=zone,
        changes=changes,
        existing=current,
        operation=f"rollback {ctx.execution_id}",
        force=True,  # restoring what Alfred changed: the original batch passed the guard
        mutation=True,
    )
    ctx.wait_until(
        "insync",
        lambda: change_insync(restored["handle"]),
        every=INSYNC_POLL_SECONDS,
        timeout=INSYNC_TIMEOUT_SECONDS,
    )
    return {"restored": changes}

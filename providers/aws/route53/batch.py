"""Change batches as pure functions of the records read: what a batch expects before and
after, whether observed records hold it, and the compare-and-swap batch actually sent.

A batch of CREATE / DELETE / UPSERT changes says its own **post-state** (every CREATEd or
UPSERTed set present exactly, every DELETEd set absent) but only part of its pre-state (a
DELETE names the set it removes, a CREATE needs the set absent; an UPSERT says nothing of the
set it replaces). :func:`compare_and_swap` closes that gap with the records read just before
sending: each UPSERT becomes DELETE of the set exactly as read (if there was one) + CREATE, so
every change of the sent batch names the state it was based on, and Route53 refuses any copy
of it that arrives once that state has changed (step 2 of :mod:`providers.aws.route53.adapter`).

:func:`normalize_changes` is the one gate a caller's batch passes before it is compared or
sent: malformed changes and sets a traffic policy instance manages are
:class:`~providers.errors.Rejected` here, before anything is read or sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from providers.aws.route53.model import (
    ACTIONS,
    PROVIDER,
    TRAFFIC_POLICY,
    Change,
    Key,
    Record,
    key_of,
    normalize,
)
from providers.errors import Rejected

BatchState = Literal["post", "pre", "neither"]


_ANY = object()  # an UPSERT's prior value: the batch does not say it


def expected_states(changes: Sequence[Change]) -> tuple[dict[Key, Any], dict[Key, Any]]:
    """(pre-state, post-state) per record set key as far as the batch itself says them: a
    record, None (absent) or ``_ANY``. Only :meth:`Route53.batch_state` uses the pre-state;
    :meth:`Route53.change` compares with the records it read before sending instead."""
    pre: dict[Key, Any] = {}
    post: dict[Key, Any] = {}
    for change in changes:
        key = key_of(change["record"])
        if key not in pre:
            pre[key] = {"DELETE": change["record"], "CREATE": None}.get(change["action"], _ANY)
        post[key] = None if change["action"] == "DELETE" else change["record"]
    return pre, post


def holds(observed: Mapping[Key, Record], expected: Mapping[Key, Any]) -> bool:
    """Whether ``observed`` holds every set of ``expected`` (as :func:`expected_states`
    gives them: a record, None for absent, or any value for an UPSERT's prior one)."""
    return all(want is _ANY or observed.get(key) == want for key, want in expected.items())


def compare_and_swap(changes: Sequence[Change], before: Mapping[Key, Record]) -> list[Change]:
    """The batch to send for ``changes`` planned against the records ``before``: each UPSERT
    as DELETE (the set as read, if any) + CREATE (step 2 of :mod:`.adapter`). Route53
    applies it only while every set it changes is still as read."""
    state = dict(before)
    sent: list[Change] = []
    for change in changes:
        rec = change["record"]
        key = key_of(rec)
        if change["action"] == "UPSERT":
            prior = state.get(key)
            if prior is not None:
                sent.append(Change(action="DELETE", record=prior))
            sent.append(Change(action="CREATE", record=rec))
        else:
            sent.append(change)
        if change["action"] == "DELETE":
            state.pop(key, None)
        else:
            state[key] = rec
    return sent


def touched(observed: Mapping[Key, Record], changes: Sequence[Change]) -> dict[Key, Record | None]:
    """The record sets ``changes`` touch, as ``observed`` holds them (None: absent)."""
    return {key_of(c["record"]): observed.get(key_of(c["record"])) for c in changes}


def refuse_traffic_policy_sets(records: Iterable[Record | None]) -> None:
    """Rejected if any of ``records`` was made by a traffic policy instance: it belongs to
    the instance (DeleteTrafficPolicyInstance removes it; a ChangeResourceRecordSets edit
    leaves the instance in place and out of step with it); Alfred does not edit it."""
    managed = [r for r in records if r is not None and TRAFFIC_POLICY in r["routing"]]
    if managed:
        raise Rejected(
            "the batch touches record sets a traffic policy instance manages: "
            + ", ".join(
                f"{r['type']} {r['name']}"
                + (f" ({r['set_identifier']})" if r["set_identifier"] else "")
                + f" of {r['routing'][TRAFFIC_POLICY]}"
                for r in managed
            ),
            provider=PROVIDER,
            code="TrafficPolicyRecord",
            details={"records": managed},
        )


def normalize_changes(changes: Sequence[Mapping[str, Any]]) -> list[Change]:
    """The caller's batch with every record normalized; Rejected for an empty batch, a
    malformed change or one that touches a set a traffic policy made."""
    if not changes:
        raise Rejected("a change batch needs at least one change", provider=PROVIDER)
    normalized: list[Change] = []
    for change in changes:
        try:
            action = str(change["action"]).upper()
            rec = normalize(change["record"])
        except (KeyError, TypeError, ValueError) as exc:
            raise Rejected(
                f"malformed change {change!r}: {type(exc).__name__}: {exc}", provider=PROVIDER
            ) from exc
        if action not in ACTIONS:
            raise Rejected(f"unknown change action {action!r}", provider=PROVIDER)
        normalized.append(Change(action=action, record=rec))  # type: ignore[typeddict-item]
    refuse_traffic_policy_sets(c["record"] for c in normalized)
    return normalized

"""The pure parts of the Route53 steps: the post-state of a batch, drift, the restoring batch,
the dry run's simulated batch and its read-only adapter."""

from __future__ import annotations

from typing import Any

import pytest

from executions.runtime.registry import compensation_get
from workflows.steps import route53 as steps
from workflows.steps.blast_radius import BlastRadius

ZONE = {"id": "Z1", "name": "example.com", "record_set_count": 4}
ALIAS = {"hosted_zone_id": "Z2", "dns_name": "lb.example.net", "evaluate_target_health": False}


def rec(name: str, type_: str = "A", *values: str, alias: Any = None) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "ttl": None if alias else 300,
        "values": [] if alias else list(values or ["192.0.2.1"]),
        "alias": alias,
        "set_identifier": None,
        "routing": {},
    }


CNAME = rec("api.example.com", "CNAME", "old.example.net")
ALIASED = rec("api.example.com", "A", alias=ALIAS)
BATCH = [{"action": "DELETE", "record": CNAME}, {"action": "UPSERT", "record": ALIASED}]


def test_a_batch_leaves_its_names_in_the_post_state():
    assert steps.post_state([CNAME], BATCH) == [ALIASED]
    assert steps.post_state([], [{"action": "UPSERT", "record": ALIASED}]) == [ALIASED]


def test_the_simulated_batch_records_what_the_batch_would_do_and_calls_nothing():
    receipt = steps.simulate_batch(zone=ZONE, changes=BATCH, existing=[CNAME], operation="op")

    assert receipt["simulated"] is True and receipt["handle"]["status"] == "INSYNC"
    assert receipt["resource"] == steps.RESOURCE and receipt["action"] == "change"
    assert receipt["before"] == [CNAME] and receipt["after"] == [ALIASED]
    assert receipt["undo"] == {"zone": ZONE, "names": ["api.example.com"]}
    assert steps.change_insync(receipt["handle"]) == receipt["handle"]


def test_the_simulated_batch_goes_through_the_blast_radius_guard_too():
    apex = [{"action": "UPSERT", "record": rec("example.com", "NS", "ns1.example.net")}]

    with pytest.raises(BlastRadius):
        steps.simulate_batch(zone=ZONE, changes=apex, existing=[], operation="op")


def test_the_restoring_batch_takes_the_names_back_to_before():
    receipt = steps.simulate_batch(zone=ZONE, changes=BATCH, existing=[CNAME], operation="op")

    changes = steps.restore_changes(receipt)

    assert steps.post_state(receipt["after"], changes) == [CNAME]
    assert [c["action"] for c in changes] == ["DELETE", "UPSERT"]  # the alias leaves first
    created = steps.simulate_batch(
        zone=ZONE, changes=[{"action": "UPSERT", "record": ALIASED}], existing=[], operation="o"
    )
    assert steps.restore_changes(created) == [{"action": "DELETE", "record": ALIASED}]


def test_drift_names_each_set_that_is_not_as_expected_compared_whole():
    changed = {**ALIASED, "alias": {**ALIAS, "dns_name": "other.example.net"}}
    extra = rec("api.example.com", "TXT", '"x"')

    differences = steps.drift([ALIASED], [changed, extra])

    assert [(d["type"], d["expected"] is None) for d in differences] == [
        ("A", False),
        ("TXT", True),
    ]
    assert steps.drift([ALIASED], [dict(ALIASED)]) == []


def test_the_batch_declares_its_undo_with_the_engine():
    assert compensation_get(steps.RESOURCE, "change") is steps.undo_batch


def test_a_dry_run_reaches_no_mutating_call():
    class Adapter:
        def records(self, zone_id: str, name: str) -> list[Any]:
            return []

        def change(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("reached")

    read_only = steps.ReadOnlyRoute53(Adapter())  # type: ignore[arg-type]

    assert read_only.records("Z1", "a") == []
    for mutating in ("change", "create_zone", "delete_zone", "stop"):
        with pytest.raises(AttributeError, match="dry run"):
            getattr(read_only, mutating)

"""The blast-radius guard over Route53 batches: the apex NS/SOA never, thresholds unless
forced (octoDNS's defaults)."""

from __future__ import annotations

from typing import Any

import pytest

from workflows.steps.blast_radius import BlastRadius, blast_radius_check

ZONE = "example.com"


def rec(name: str, type_: str = "A", *values: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "ttl": 300,
        "values": list(values or ["192.0.2.1"]),
        "alias": None,
        "set_identifier": None,
        "routing": {},
    }


def check(changes: list[dict[str, Any]], existing: list[dict[str, Any]], count: int, **kw: Any):
    return blast_radius_check(
        zone=ZONE, record_set_count=count, changes=changes, existing=existing, **kw
    )


@pytest.mark.parametrize("type_", ["NS", "SOA"])
@pytest.mark.parametrize("action", ["UPSERT", "DELETE", "CREATE"])
def test_the_apex_ns_and_soa_are_never_changed_even_forced(type_, action):
    with pytest.raises(BlastRadius) as refused:
        check([{"action": action, "record": rec(ZONE, type_)}], [], 2, force=True)

    assert refused.value.code == "blast_radius" and refused.value.forceable is False


def test_ns_below_the_apex_is_an_ordinary_record():
    assert check([{"action": "UPSERT", "record": rec(f"sub.{ZONE}", "NS")}], [], 2)


def test_updating_more_than_30_percent_of_a_zone_of_10_is_refused_unless_forced():
    existing = [rec(f"r{i}.{ZONE}") for i in range(4)]
    changes = [{"action": "UPSERT", "record": rec(r["name"], "A", "192.0.2.9")} for r in existing]

    with pytest.raises(BlastRadius) as refused:
        check(changes, existing, 10)

    assert refused.value.forceable and refused.value.details["updates"] == 4
    assert check(changes, existing, 10, force=True)["updates"] == 4
    assert check(changes[:3], existing, 10)["updates"] == 3  # 30% exactly is allowed


def test_a_delete_and_create_of_one_set_is_an_update_a_lone_delete_a_delete():
    existing = [rec(f"r{i}.{ZONE}") for i in range(4)]
    replace = [
        change
        for r in existing[:2]
        for change in (
            {"action": "DELETE", "record": r},
            {"action": "CREATE", "record": rec(r["name"], "A", "192.0.2.9")},
        )
    ]
    remove = [{"action": "DELETE", "record": r} for r in existing[2:]]

    counts = check(replace + remove, existing, 10)

    assert counts == {"existing": 10, "updates": 2, "deletes": 2}
    with pytest.raises(BlastRadius, match="deletes 4"):
        check([{"action": "DELETE", "record": r} for r in existing], existing, 10)


def test_small_zones_and_new_names_are_not_limited():
    existing = [rec(f"r{i}.{ZONE}") for i in range(9)]
    every = [{"action": "DELETE", "record": r} for r in existing]

    assert check(every, existing, 9)["deletes"] == 9
    creates = [{"action": "UPSERT", "record": rec(f"new{i}.{ZONE}")} for i in range(50)]
    assert check(creates, [], 100) == {"existing": 100, "updates": 0, "deletes": 0}

"""The pure parts of the ACM steps: the zones a name may live in, the validation CNAMEs as
exact CREATEs (identical: nothing; different: refused), grouping by zone, the dry run's
simulated request and its read-only adapter, the token and the registered undo."""

from __future__ import annotations

from typing import Any

import pytest

from executions.runtime.errors import FatalError
from executions.runtime.registry import compensation_get
from workflows.steps import acm as steps

EXAMPLE = {"id": "Z1", "name": "example.com", "record_set_count": 4}
SUB = {"id": "Z2", "name": "eu.example.com", "record_set_count": 4}
VALIDATION = {"name": "_abc.www.example.com", "type": "CNAME", "value": "_x.acm-validations.aws."}


def rrset(name: str, type_: str, *values: str, ttl: int = 300) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "ttl": ttl,
        "values": list(values),
        "alias": None,
        "set_identifier": None,
        "routing": {},
    }


def test_a_name_may_live_in_any_zone_above_it_longest_first_a_wildcard_at_its_base():
    assert steps.candidate_zones("a.b.example.com") == [
        "a.b.example.com",
        "b.example.com",
        "example.com",
    ]
    assert steps.candidate_zones("*.example.com") == ["example.com"]


def test_missing_validation_records_become_exact_creates():
    changes = steps.validation_changes([VALIDATION], [])

    assert changes == [
        {"action": "CREATE", "record": rrset(VALIDATION["name"], "CNAME", VALIDATION["value"])}
    ]


def test_an_identical_record_already_there_is_left_alone_whatever_its_ttl():
    there = rrset(VALIDATION["name"], "CNAME", "_X.acm-validations.aws", ttl=60)

    assert steps.validation_changes([VALIDATION], [there]) == []
    assert steps.in_place(VALIDATION, [there])


@pytest.mark.parametrize(
    "there",
    [
        rrset(VALIDATION["name"], "CNAME", "_other.acm-validations.aws."),
        rrset(VALIDATION["name"], "TXT", '"hello"'),
    ],
)
def test_a_different_record_at_a_validation_name_is_refused_naming_it(there):
    with pytest.raises(FatalError) as raised:
        steps.validation_changes([VALIDATION], [there])

    assert raised.value.code == "validation_record_conflict"
    assert VALIDATION["name"] in raised.value.message
    assert raised.value.details["conflicts"][0]["found"] == [there]


def test_records_group_by_the_longest_zone_holding_them():
    records = [
        VALIDATION,
        {"name": "_def.api.eu.example.com", "type": "CNAME", "value": "_y.acm-validations.aws."},
    ]

    grouped = steps.by_zone(records, [EXAMPLE, SUB, EXAMPLE])

    assert [(zone["name"], [r["name"] for r in rs]) for zone, rs in grouped] == [
        ("eu.example.com", ["_def.api.eu.example.com"]),
        ("example.com", ["_abc.www.example.com"]),
    ]


def test_a_dry_run_simulates_one_record_per_base_name_and_a_request_without_a_call():
    records = steps.simulated_records(["example.com", "*.example.com", "www.example.com"])
    receipt = steps.simulate_request(
        domain="example.com",
        alternative_names=["*.example.com"],
        execution_id="exe_1",
        ticket_ids=[],
    )

    assert sorted(r["name"].split(".", 1)[1] for r in records) == sorted(
        ["example.com", "www.example.com"]
    )
    assert receipt["simulated"] is True
    assert (receipt["resource"], receipt["action"]) == (steps.RESOURCE, "request")


def test_the_dry_runs_adapter_has_no_mutating_call():
    adapter = steps.ReadOnlyAcm(object())  # type: ignore[arg-type]

    for name in ("request", "delete", "stop"):
        with pytest.raises(AttributeError):
            getattr(adapter, name)


def test_the_token_is_the_executions_and_fits_acm():
    token = steps.idempotency_token("exe_01ABC")

    assert token == steps.idempotency_token("exe_01ABC") != steps.idempotency_token("exe_01ABD")
    assert len(token) == 32 and token.isalnum()


def test_the_request_and_the_validation_batch_are_undone_through_the_registry():
    assert compensation_get(steps.RESOURCE, "request") is steps.undo_request
    validation = compensation_get("aws.route53.record_sets", "validation")
    assert validation is steps.undo_validation_batch


def test_a_validation_batch_receipt_names_its_certificate():
    receipt = steps.simulate_validation_batch(
        certificate_arn="arn:x",
        zone=EXAMPLE,
        changes=steps.validation_changes([VALIDATION], []),
        existing=[],
        operation="op",
    )

    assert (receipt["resource"], receipt["action"]) == ("aws.route53.record_sets", "validation")
    assert receipt["undo"] == {
        "zone": EXAMPLE,
        "names": [VALIDATION["name"]],
        "certificate_arn": "arn:x",
    }


def test_tags_name_the_execution_and_the_tickets():
    assert steps.certificate_tags("exe_1", ["OPS-1", "OPS-2"]) == {
        "alfred:execution": "exe_1",
        "alfred:tickets": "OPS-1 OPS-2",
    }
    assert steps.certificate_tags("exe_1", []) == {"alfred:execution": "exe_1"}

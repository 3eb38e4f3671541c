"""Route53 adapter contract: zones, records at a name, one atomic change batch, recovery.

Every test runs against the Route53 stand-in by default and against a real account with
ALFRED_CONTRACT_TARGET=real (see tests/contract/fixtures/aws.py); ``standin`` tests need fault
injection or the stand-in's view of the change batches it applied.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ProxyConnectionError,
    ReadTimeoutError,
    SSLError,
)

from providers.aws import AwsClients
from providers.aws.clients import is_ambiguous
from providers.aws.route53 import (
    DEFAULT_TIMEOUT,
    IN_FLIGHT_MARGIN,
    TRAFFIC_POLICY,
    Change,
    Record,
    Route53,
    Zone,
    record,
    to_wire,
)
from providers.errors import Conflict, NotFound, Rejected, Throttled, Transient, Unknown
from providers.handles import Handle, StopUnsupported
from providers.sandbox.aws import AwsStandIn
from providers.sandbox.route53 import LateBatch
from tests.contract.fixtures.aws import REAL, Boto, DnsNames, eventually, unique

CLOUDFRONT = {"hosted_zone_id": "Z2FDTNDATAQYW2", "dns_name": "d111111abcdef8.cloudfront.net"}


def a(name: str, *values: str, ttl: int = 300) -> Record:
    return record(name, "A", ttl=ttl, values=values)


def cname(name: str, target: str, ttl: int = 300) -> Record:
    return record(name, "CNAME", ttl=ttl, values=[target])


def create(*records: Record) -> list[Change]:
    return [Change(action="CREATE", record=r) for r in records]


def upsert(*records: Record) -> list[Change]:
    return [Change(action="UPSERT", record=r) for r in records]


def delete(*records: Record) -> list[Change]:
    return [Change(action="DELETE", record=r) for r in records]


def wire(changes: list[Change]) -> list[dict[str, Any]]:
    """boto3's ``Changes`` shape: another writer's batch for a fault's ``foreign_changes``."""
    return [{"Action": c["action"], "ResourceRecordSet": to_wire(c["record"])} for c in changes]


def alias_to(name: str, zone: Zone, target: str, *, health: bool = False) -> Record:
    """An A alias at ``name`` to the record ``target`` in the same zone (valid on AWS too)."""
    return record(
        name,
        "A",
        alias={"hosted_zone_id": zone["id"], "dns_name": target, "evaluate_target_health": health},
    )


def batches(standin: AwsStandIn, operation: str) -> int:
    """How many batches carrying ``operation`` the stand-in applied."""
    return sum(1 for b in standin.route53.change_batches if b.comment == f"alfred {operation}")


def replace(old: Record, new: Record) -> list[Change]:
    """An UPSERT of ``new`` over ``old`` as the adapter sends it: Route53's replace idiom."""
    return [Change(action="DELETE", record=old), Change(action="CREATE", record=new)]


@dataclass(frozen=True)
class HeldUpsert:
    """Our UPSERT of 192.0.2.2 over 192.0.2.1 at ``name``, held in the network: NotApplied."""

    name: str
    other: str  # a second name, for an unrelated change in the zone
    operation: str
    batch: list[Change]
    refused: Transient

    def late(self, standin: AwsStandIn) -> LateBatch:
        """What became of the held copy once it landed."""
        [late] = [
            b for b in standin.route53.late_batches if b.comment == f"alfred {self.operation}"
        ]
        return late


def hold_an_upsert(
    route53: Route53, zone: Zone, names: DnsNames, standin: AwsStandIn, *, lands_after: int = 1
) -> HeldUpsert:
    """Create 192.0.2.1 at a new name, then send the UPSERT to 192.0.2.2 with its connection
    dropped; the copy lands just before the ``lands_after``-th change in the zone from now."""
    name, other = names(), names()
    route53.change(zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))
    operation = unique("op-")
    batch = upsert(a(name, "192.0.2.2"))
    standin.faults.arm("ChangeResourceRecordSets", "hold_request", after=lands_after)
    with pytest.raises(Transient) as caught:
        route53.change(zone["id"], batch, operation=operation)
    return HeldUpsert(name, other, operation, batch, caught.value)


# -- zones -------------------------------------------------------------------------------------


def test_zone_found_by_exact_name_with_its_name_servers(
    aws_route53: Route53, aws_zone: Zone
) -> None:
    # when
    zone = aws_route53.zone(aws_zone["name"].upper() + ".")

    # then
    assert zone["id"] == aws_zone["id"]
    assert zone["name"] == aws_zone["name"]
    assert zone["private"] is False
    assert len(zone["name_servers"]) == 4


def test_zone_of_another_name_is_not_found(aws_route53: Route53, aws_zone: Zone) -> None:
    # when / then: a name under the zone is not a zone, nor is a name nobody created
    for name in (f"sub.{aws_zone['name']}", f"{unique('nozone-')}.example"):
        with pytest.raises(NotFound) as caught:
            aws_route53.zone(name)
        assert caught.value.code == "NoSuchHostedZone"


@pytest.mark.standin
def test_two_public_zones_of_one_name_are_ambiguous(aws_route53: Route53, aws_boto: Boto) -> None:
    # given
    name = f"{unique('twice-')}.example"
    ids = {
        aws_boto.route53.create_hosted_zone(Name=name, CallerReference=unique("ref-"))[
            "HostedZone"
        ]["Id"].removeprefix("/hostedzone/")
        for _ in range(2)
    }

    # when / then
    with pytest.raises(Conflict) as caught:
        aws_route53.zone(name)
    assert set(caught.value.details["zone_ids"]) == ids


def test_create_zone_is_idempotent_and_reports_delegation(
    aws_route53: Route53, aws_zone: Zone
) -> None:
    # given
    name = f"{unique('z')}.{aws_zone['name']}"
    reference = unique("alfred-contract-")

    # when
    first = aws_route53.create_zone(name, caller_reference=reference, comment="contract")
    again = aws_route53.create_zone(name, caller_reference=reference)
    try:
        # then: one zone, found again by its caller reference, with its NS delegation
        assert first["kind"] == "hosted_zone"
        assert first["status"] in ("PENDING", "INSYNC")
        assert len(first["observations"]["name_servers"]) == 4
        assert again["id"] == first["id"]
        assert again["observations"]["recovered"] is True
        assert again["observations"]["name_servers"] == first["observations"]["name_servers"]
        assert aws_route53.zone(name)["id"] == first["id"]
        ns = [r for r in aws_route53.records(first["id"], name) if r["type"] == "NS"]
        assert {v.rstrip(".") for v in ns[0]["values"]} == set(
            first["observations"]["name_servers"]
        )
        assert aws_route53.inspect(first)["id"] == first["id"]
    finally:
        deleted = aws_route53.delete_zone(str(first["id"]))

    # and the deletion is idempotent compensation
    assert deleted["ok"] is True
    assert aws_route53.delete_zone(str(first["id"]))["observations"]["already_absent"] is True
    assert aws_route53.inspect(deleted)["status"] == "DELETED"


@pytest.mark.standin
def test_lost_create_zone_response_finds_the_zone(
    aws_route53: Route53, aws_standin: AwsStandIn, aws_zone: Zone
) -> None:
    # given: the first CreateHostedZone is performed but its response is lost
    name = f"{unique('z')}.{aws_zone['name']}"
    aws_standin.faults.arm("CreateHostedZone", "lose_response")

    # when
    created = aws_route53.create_zone(name, caller_reference=unique("alfred-contract-"))

    # then: one zone; botocore's retry met HostedZoneAlreadyExists, resolved by the reference
    assert created["observations"]["recovered"] is True
    assert created["status"] == "APPLIED"
    assert aws_route53.zone(name)["id"] == created["id"]
    aws_route53.delete_zone(str(created["id"]))


@pytest.mark.standin
def test_clients_follow_the_aws_environment(
    aws_standin: AwsStandIn, aws_zone: Zone, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: only the standard AWS variables say where AWS is
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_standin.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "contract")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "contract")
    monkeypatch.setenv("AWS_REGION", "us-east-1")

    # when
    route53 = Route53(clients=AwsClients())

    # then
    assert route53.zone(aws_zone["name"])["id"] == aws_zone["id"]


# -- reads -------------------------------------------------------------------------------------


def test_records_at_exact_name_are_normalized(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_boto: Boto
) -> None:
    # given: an A (values unsorted) and a TXT at one name, and a record at a child name
    name = aws_dns_names()
    child = f"deeper.{name}"
    aws_dns_names.names.append(child)
    aws_boto.route53.change_resource_record_sets(
        HostedZoneId=aws_zone["id"],
        ChangeBatch={
            "Changes": [
                {
                    "Action": "CREATE",
                    "ResourceRecordSet": {
                        "Name": name.upper(),
                        "Type": "A",
                        "TTL": 60,
                        "ResourceRecords": [{"Value": "192.0.2.9"}, {"Value": "192.0.2.1"}],
                    },
                },
                {
                    "Action": "CREATE",
                    "ResourceRecordSet": {
                        "Name": name + ".",
                        "Type": "TXT",
                        "TTL": 60,
                        "ResourceRecords": [{"Value": '"hello"'}],
                    },
                },
                {
                    "Action": "CREATE",
                    "ResourceRecordSet": {
                        "Name": child,
                        "Type": "A",
                        "TTL": 60,
                        "ResourceRecords": [{"Value": "192.0.2.2"}],
                    },
                },
            ]
        },
    )

    # when
    found = aws_route53.records(aws_zone["id"], name + ".")

    # then
    assert found == [
        {
            "name": name,
            "type": "A",
            "ttl": 60,
            "values": ["192.0.2.1", "192.0.2.9"],
            "alias": None,
            "set_identifier": None,
            "routing": {},
        },
        {
            "name": name,
            "type": "TXT",
            "ttl": 60,
            "values": ['"hello"'],
            "alias": None,
            "set_identifier": None,
            "routing": {},
        },
    ]
    assert aws_route53.records(aws_zone["id"], f"nothing-{name}") == []


@pytest.mark.standin
def test_apex_alias_read_from_the_zone(
    aws_route53: Route53, aws_boto: Boto, aws_standin: AwsStandIn
) -> None:
    # given: a zone whose apex has an A alias to CloudFront, and one without
    with_alias = f"{unique('apex-')}.example"
    bare = f"{unique('bare-')}.example"
    for name in (with_alias, bare):
        aws_boto.route53.create_hosted_zone(Name=name, CallerReference=unique("ref-"))
    zone = aws_route53.zone(with_alias)
    aws_route53.change(
        zone["id"],
        create(record(with_alias, "A", alias=CLOUDFRONT)),
        operation=unique("apex-"),
    )

    # when
    aliases = aws_route53.apex_alias(zone)

    # then
    assert [(r["type"], r["alias"]) for r in aliases] == [
        (
            "A",
            {
                "hosted_zone_id": "Z2FDTNDATAQYW2",
                "dns_name": "d111111abcdef8.cloudfront.net",
                "evaluate_target_health": False,
            },
        )
    ]
    assert aliases[0]["ttl"] is None
    assert aws_route53.apex_alias(aws_route53.zone(bare)) == []


@pytest.mark.standin
def test_stand_in_lists_in_route53_order_across_pages(aws_boto: Boto) -> None:
    # given
    zone_name = f"{unique('order-')}.example"
    zone_id = aws_boto.route53.create_hosted_zone(Name=zone_name, CallerReference=unique("r"))[
        "HostedZone"
    ]["Id"]
    names = [f"b.{zone_name}", f"a.{zone_name}", f"x.a.{zone_name}", f"*.{zone_name}"]
    aws_boto.route53.change_resource_record_sets(
        HostedZoneId=zone_id,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "CREATE",
                    "ResourceRecordSet": {
                        "Name": n,
                        "Type": t,
                        "TTL": 60,
                        "ResourceRecords": [{"Value": v}],
                    },
                }
                for n in names
                for t, v in (("TXT", '"x"'), ("A", "192.0.2.1"))
            ]
        },
    )

    # when: listed two at a time
    pages = aws_boto.route53.get_paginator("list_resource_record_sets").paginate(
        HostedZoneId=zone_id, PaginationConfig={"PageSize": 2}
    )
    listed = [(r["Name"], r["Type"]) for page in pages for r in page["ResourceRecordSets"]]

    # then: labels reversed, then type; '*' escaped as Route53 does (and sorting first)
    z = zone_name + "."
    assert listed == [
        (z, "NS"),
        (z, "SOA"),
        (f"\\052.{z}", "A"),
        (f"\\052.{z}", "TXT"),
        (f"a.{z}", "A"),
        (f"a.{z}", "TXT"),
        (f"x.a.{z}", "A"),
        (f"x.a.{z}", "TXT"),
        (f"b.{z}", "A"),
        (f"b.{z}", "TXT"),
    ]


# -- the change batch --------------------------------------------------------------------------


def test_pending_observed_before_insync(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_patience: float
) -> None:
    # given
    name = aws_dns_names()
    operation = unique("op-")

    # when
    submitted = aws_route53.change(
        aws_zone["id"], create(a(name, "192.0.2.1")), operation=operation
    )

    # then: the change is PENDING first, INSYNC later, and the records are there at once
    assert submitted["kind"] == "change"
    assert submitted["status"] == "PENDING"
    assert (submitted["done"], submitted["ok"]) == (False, False)
    assert submitted["observations"]["comment"] == f"alfred {operation}"
    assert submitted["observations"]["sent"] == create(a(name, "192.0.2.1"))
    assert submitted["observations"]["ownership"] == "proven"
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.1")]
    synced = eventually(
        lambda: aws_route53.inspect(submitted), lambda h: h["done"], timeout=aws_patience
    )
    assert (synced["status"], synced["ok"], synced["id"]) == ("INSYNC", True, submitted["id"])


def test_unknown_change_is_no_such_change(aws_route53: Route53) -> None:
    # given: a handle naming a change Route53 never made
    submitted = {
        "provider": "aws.route53",
        "kind": "change",
        "id": "C0000000000000NOSUCHCHANGE",
        "status": "PENDING",
        "done": False,
        "ok": False,
        "observations": {},
        "observed_at": "2026-01-01T00:00:00+00:00",
    }

    # when / then
    with pytest.raises(NotFound) as caught:
        aws_route53.inspect(submitted)  # type: ignore[arg-type]
    assert caught.value.code == "NoSuchChange"


def test_cname_beside_a_rejected(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: an A record at the name
    name = aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))

    # when: a CNAME is created beside it
    with pytest.raises(Conflict) as caught:
        aws_route53.change(
            aws_zone["id"], create(cname(name, "target.example.net")), operation=unique("op-")
        )

    # then: refused with AWS's words; the name holds only the A record
    assert caught.value.code == "InvalidChangeBatch"
    assert caught.value.details["messages"] == [
        f"RRSet of type CNAME with DNS name {name}. is not permitted as it conflicts with "
        f"other records with the same DNS name in zone {aws_zone['name']}."
    ]
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.1")]


def test_record_beside_cname_rejected(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given
    name = aws_dns_names()
    aws_route53.change(
        aws_zone["id"], create(cname(name, "target.example.net")), operation=unique("op-")
    )

    # when
    with pytest.raises(Conflict) as caught:
        aws_route53.change(
            aws_zone["id"],
            create(record(name, "TXT", ttl=60, values=['"v"'])),
            operation=unique("op-"),
        )

    # then
    assert caught.value.details["messages"] == [
        f"RRSet of type TXT with DNS name {name}. is not permitted because a conflicting RRSet "
        f"of type CNAME with the same DNS name already exists in zone {aws_zone['name']}."
    ]
    assert [r["type"] for r in aws_route53.records(aws_zone["id"], name)] == ["CNAME"]


def test_cname_at_apex_rejected(aws_route53: Route53, aws_zone: Zone) -> None:
    # when
    with pytest.raises(Rejected) as caught:
        aws_route53.change(
            aws_zone["id"],
            create(cname(aws_zone["name"], "target.example.net")),
            operation=unique("op-"),
        )

    # then
    zone = aws_zone["name"] + "."
    assert caught.value.details["messages"] == [
        f"RRSet of type CNAME with DNS name {zone} is not permitted at apex in zone {zone}"
    ]


def test_no_partially_applied_batch(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: a batch whose first change is valid and whose second deletes what is not there
    fresh, missing = aws_dns_names(), aws_dns_names()
    batch = [
        Change(action="CREATE", record=a(fresh, "192.0.2.1")),
        Change(action="DELETE", record=a(missing, "192.0.2.2")),
    ]

    # when
    with pytest.raises(Conflict) as caught:
        aws_route53.change(aws_zone["id"], batch, operation=unique("op-"))

    # then: nothing of it was applied
    assert caught.value.details["messages"] == [
        f"Tried to delete resource record set [name='{missing}.', type='A'] but it was not found"
    ]
    assert aws_route53.records(aws_zone["id"], fresh) == []


def test_stale_delete_rejected(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: the record changed since the plan read it (another value, another TTL)
    name = aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.7")), operation=unique("op-"))

    for stale in (a(name, "192.0.2.1"), a(name, "192.0.2.7", ttl=60)):
        # when
        with pytest.raises(Conflict) as caught:
            aws_route53.change(
                aws_zone["id"], [Change(action="DELETE", record=stale)], operation=unique("op-")
            )

        # then
        assert caught.value.details["messages"] == [
            f"Tried to delete resource record set [name='{name}.', type='A'] "
            "but the values provided do not match the current values"
        ]
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.7")]


def test_create_of_existing_set_rejected(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given
    name = aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))

    # when
    with pytest.raises(Conflict) as caught:
        aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.2")), operation=unique("op-"))

    # then
    assert caught.value.details["messages"] == [
        f"Tried to create resource record set [name='{name}.', type='A'] but it already exists"
    ]


def test_cname_replaced_by_alias_in_one_batch(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: a CNAME, read back as the plan would read it
    name = aws_dns_names()
    aws_route53.change(
        aws_zone["id"], create(cname(name, "old.example.net")), operation=unique("op-")
    )
    existing = aws_route53.records(aws_zone["id"], name)
    alias = record(name, "A", alias=CLOUDFRONT)

    # when: the exact DELETE and the alias UPSERT go as one batch
    aws_route53.change(
        aws_zone["id"],
        [
            *(Change(action="DELETE", record=r) for r in existing),
            Change(action="UPSERT", record=alias),
        ],
        operation=unique("op-"),
    )

    # then
    assert aws_route53.records(aws_zone["id"], name) == [alias]


def test_upsert_sent_as_a_compare_and_swap_on_the_set_read(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: a record at one name, nothing at another
    name, fresh = aws_dns_names(), aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))

    # when: both are UPSERTed in one batch
    submitted = aws_route53.change(
        aws_zone["id"],
        upsert(a(name, "192.0.2.2"), a(fresh, "192.0.2.3")),
        operation=unique("op-"),
    )

    # then: sent as DELETE of the set read + CREATE, and CREATE where nothing was; ours
    assert submitted["observations"]["sent"] == [
        *replace(a(name, "192.0.2.1"), a(name, "192.0.2.2")),
        *create(a(fresh, "192.0.2.3")),
    ]
    assert submitted["observations"]["ownership"] == "proven"
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.2")]
    assert aws_route53.records(aws_zone["id"], fresh) == [a(fresh, "192.0.2.3")]


def test_result_another_writer_made_is_applied_but_unproven(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: the plan read 192.0.2.1 at the name; another writer has since set 192.0.2.2, the
    # very value the batch sets
    name = aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))
    aws_route53.change(aws_zone["id"], upsert(a(name, "192.0.2.2")), operation=unique("them-"))

    # when: the batch's own precondition (DELETE of 192.0.2.1) no longer holds
    result = aws_route53.change(
        aws_zone["id"],
        replace(a(name, "192.0.2.1"), a(name, "192.0.2.2")),
        operation=unique("op-"),
    )

    # then: the names hold its result, so nothing is sent, but it is not ours to reverse
    assert (result["id"], result["status"]) == (None, "APPLIED")
    assert result["observations"]["already_applied"] is True
    assert result["observations"]["sent"] is None
    assert result["observations"]["ownership"] == "unproven"


def test_alias_given_a_ttl_or_values_is_refused(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: an alias target in the zone
    name, target = aws_dns_names(), aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(target, "192.0.2.1")), operation=unique("op-"))
    to_target = {"hosted_zone_id": aws_zone["id"], "dns_name": target}

    # when / then: Route53 keeps no TTL or values for an alias, so none may be given
    with pytest.raises(ValueError, match="alias"):
        record(name, "A", ttl=300, alias=to_target)
    with pytest.raises(ValueError, match="alias"):
        record(name, "A", values=["192.0.2.9"], alias=to_target)
    malformed: Any = {**alias_to(name, aws_zone, target), "ttl": 300}
    with pytest.raises(Rejected):
        aws_route53.change(aws_zone["id"], upsert(malformed), operation=unique("op-"))
    assert aws_route53.records(aws_zone["id"], name) == []

    # and the alias without them applies on the first call, read back as given
    applied = aws_route53.change(
        aws_zone["id"], upsert(alias_to(name, aws_zone, target)), operation=unique("op-")
    )
    assert applied["id"] is not None
    assert aws_route53.records(aws_zone["id"], name) == [alias_to(name, aws_zone, target)]


def test_duplicate_values_rejected(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given
    name = aws_dns_names()

    # when
    with pytest.raises(Rejected) as caught:
        aws_route53.change(
            aws_zone["id"], create(a(name, "192.0.2.1", "192.0.2.1")), operation=unique("op-")
        )

    # then
    assert caught.value.code == "InvalidChangeBatch"
    assert caught.value.details["messages"] == ["Duplicate Resource Record: '192.0.2.1'"]
    assert aws_route53.records(aws_zone["id"], name) == []


def test_two_changes_to_one_record_set_rejected(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given
    name = aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))
    invalid = (
        f"The request contains an invalid set of changes for a resource record set 'A {name}.'"
    )

    for batch in (
        upsert(a(name, "192.0.2.2"), a(name, "192.0.2.3")),
        delete(a(name, "192.0.2.1"), a(name, "192.0.2.1")),
    ):
        # when
        with pytest.raises(Rejected) as caught:
            aws_route53.change(aws_zone["id"], batch, operation=unique("op-"))

        # then: refused whole
        assert caught.value.details["messages"] == [invalid]
        assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.1")]


def test_delete_then_create_replaces_a_record_set(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given
    name = aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))

    # when: the replace idiom, one set changed twice in one batch
    aws_route53.change(
        aws_zone["id"],
        [*delete(a(name, "192.0.2.1")), *create(a(name, "192.0.2.2"))],
        operation=unique("op-"),
    )

    # then
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.2")]


def test_apex_ns_and_soa_cannot_be_deleted(aws_route53: Route53, aws_zone: Zone) -> None:
    # given: a zone of the test's own (so even a wrongly accepted DELETE harms nothing else)
    name = f"{unique('z')}.{aws_zone['name']}"
    zone_id = str(aws_route53.create_zone(name, caller_reference=unique("alfred-contract-"))["id"])
    try:
        apex = {r["type"]: r for r in aws_route53.records(zone_id, name)}
        expected = {
            "NS": "A HostedZone must contain at least one NS record for the zone itself.",
            "SOA": "A HostedZone must contain exactly one SOA record.",
        }
        for rtype, message in expected.items():
            # when
            with pytest.raises(Rejected) as caught:
                aws_route53.change(zone_id, delete(apex[rtype]), operation=unique("op-"))

            # then
            assert caught.value.details["messages"] == [message]
        assert {r["type"] for r in aws_route53.records(zone_id, name)} == {"NS", "SOA"}
    finally:
        aws_route53.delete_zone(zone_id)


def test_cname_beside_alias_rejected(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: an A alias at the name (to a record in the zone)
    name, target = aws_dns_names(), aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(target, "192.0.2.1")), operation=unique("op-"))
    alias = alias_to(name, aws_zone, target)
    aws_route53.change(aws_zone["id"], create(alias), operation=unique("op-"))

    # when
    with pytest.raises(Conflict) as caught:
        aws_route53.change(
            aws_zone["id"], create(cname(name, "target.example.net")), operation=unique("op-")
        )

    # then: an alias A is an A: the CNAME may not join it
    assert caught.value.details["messages"] == [
        f"RRSet of type CNAME with DNS name {name}. is not permitted as it conflicts with "
        f"other records with the same DNS name in zone {aws_zone['name']}."
    ]
    assert aws_route53.records(aws_zone["id"], name) == [alias]


def test_alias_delete_must_match_evaluate_target_health(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: an alias that does not evaluate its target's health
    name, target = aws_dns_names(), aws_dns_names()
    aws_route53.change(aws_zone["id"], create(a(target, "192.0.2.1")), operation=unique("op-"))
    alias = alias_to(name, aws_zone, target, health=False)
    aws_route53.change(aws_zone["id"], create(alias), operation=unique("op-"))

    # when: a DELETE that differs only in EvaluateTargetHealth
    with pytest.raises(Conflict) as caught:
        aws_route53.change(
            aws_zone["id"],
            delete(alias_to(name, aws_zone, target, health=True)),
            operation=unique("op-"),
        )

    # then: refused; the exact one is accepted
    assert caught.value.details["messages"] == [
        f"Tried to delete resource record set [name='{name}.', type='A'] "
        "but the values provided do not match the current values"
    ]
    assert aws_route53.records(aws_zone["id"], name) == [alias]
    aws_route53.change(aws_zone["id"], delete(alias), operation=unique("op-"))
    assert aws_route53.records(aws_zone["id"], name) == []


def test_malformed_handles_rejected(aws_route53: Route53) -> None:
    # given: a handle of another adapter, one without observations, a recovered change handle
    # that lost its evidence, and no handle at all
    foreign = {"provider": "aws.lambda", "kind": "alias_update", "id": "x", "status": "APPLIED"}
    bare = {"provider": "aws.route53", "kind": "change", "id": None, "status": "APPLIED"}
    hollow = {**bare, "observations": {"recovered": True}}

    # when / then
    for malformed in (foreign, bare, hollow, "change"):
        with pytest.raises(Rejected):
            aws_route53.inspect(malformed)  # type: ignore[arg-type]
    for malformed in (foreign, bare, "change"):
        with pytest.raises(Rejected):
            aws_route53.stop(malformed)  # type: ignore[arg-type]


def test_stop_is_unsupported(aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames) -> None:
    # given
    submitted = aws_route53.change(
        aws_zone["id"], create(a(aws_dns_names(), "192.0.2.1")), operation=unique("op-")
    )

    # when / then
    with pytest.raises(StopUnsupported):
        aws_route53.stop(submitted)


# -- lost responses and throttling -------------------------------------------------------------


@pytest.mark.standin
def test_lost_change_response_recovered_without_second_batch(
    aws_clients: AwsClients, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: Route53 applies the batch, but its response never arrives
    name = aws_dns_names()
    operation = unique("op-")
    route53 = Route53(clients=aws_clients, settle_seconds=3600)
    aws_standin.faults.arm("ChangeResourceRecordSets", "lose_response")

    # when
    recovered = route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=operation)

    # then: recovered from the records, exactly one batch applied
    assert recovered["id"] is None
    assert recovered["status"] == "APPLIED"
    assert recovered["observations"]["recovered"] is True
    assert recovered["observations"]["already_applied"] is False
    assert recovered["observations"]["records"] == [a(name, "192.0.2.1")]
    assert recovered["observations"]["sent"] == create(a(name, "192.0.2.1"))
    # (the batch was ours, but nothing Route53 answers can prove it)
    assert recovered["observations"]["ownership"] == "unproven"
    assert batches(aws_standin, operation) == 1

    # and inspect() holds it APPLIED until the settle time has passed since the recovery
    held = route53.inspect(recovered)
    assert (held["status"], held["done"]) == ("APPLIED", False)
    settled = route53.inspect(_recovered_long_ago(recovered))
    assert (settled["status"], settled["done"], settled["ok"]) == ("APPLIED", True, True)
    assert batches(aws_standin, operation) == 1


def _recovered_long_ago(recovered: Handle) -> Handle:
    """``recovered`` as if its settle time had passed (instead of sleeping through it)."""
    since = dt.datetime.fromisoformat(recovered["observations"]["recovered_at"])
    settle = float(recovered["observations"]["settle_seconds"])
    earlier = (since - dt.timedelta(seconds=settle + 1)).isoformat()
    return {**recovered, "observations": {**recovered["observations"], "recovered_at": earlier}}


@pytest.mark.standin
def test_retry_after_lost_response_sends_nothing(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: a batch applied whose response was lost
    name = aws_dns_names()
    operation = unique("op-")
    batch = upsert(a(name, "192.0.2.1"))
    aws_standin.faults.arm("ChangeResourceRecordSets", "lose_response")
    aws_route53.change(aws_zone["id"], batch, operation=operation)

    # when: the caller retries the same batch
    again = aws_route53.change(aws_zone["id"], batch, operation=operation)

    # then: the records already hold its post-state; nothing sent
    assert (again["id"], again["status"], again["done"]) == (None, "APPLIED", False)
    assert again["observations"]["already_applied"] is True
    assert (again["observations"]["sent"], again["observations"]["ownership"]) == (
        None,
        "unproven",
    )
    assert again["observations"]["records"] == [a(name, "192.0.2.1")]
    assert batches(aws_standin, operation) == 1


@pytest.mark.standin
def test_recovered_change_reported_drifted_once_the_records_change(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: a recovered batch whose record someone deleted since
    name = aws_dns_names()
    aws_standin.faults.arm("ChangeResourceRecordSets", "lose_response")
    recovered = aws_route53.change(
        aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-")
    )
    aws_route53.change(aws_zone["id"], delete(a(name, "192.0.2.1")), operation=unique("op-"))

    # when
    inspected = aws_route53.inspect(recovered)

    # then
    assert (inspected["status"], inspected["done"], inspected["ok"]) == ("DRIFTED", True, False)


@pytest.mark.standin
def test_lost_upsert_then_foreign_write_is_unknown_not_overwritten(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: our UPSERT is applied, its response lost, and another writer changes the name
    # before the adapter reads it back
    name = aws_dns_names()
    operation = unique("op-")
    aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))
    theirs = upsert(a(name, "198.51.100.7"))
    aws_standin.faults.arm(
        "ChangeResourceRecordSets", "lose_response", foreign_changes=wire(theirs)
    )

    # when
    with pytest.raises(Unknown) as caught:
        aws_route53.change(aws_zone["id"], upsert(a(name, "192.0.2.2")), operation=operation)

    # then: our batch went once and was not re-sent over theirs; the evidence is in the error
    assert batches(aws_standin, operation) == 1
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "198.51.100.7")]
    assert caught.value.code == "ChangeOutcomeUnknown"
    assert caught.value.details["before"] == [a(name, "192.0.2.1")]
    assert caught.value.details["observed"] == [a(name, "198.51.100.7")]


@pytest.mark.standin
def test_dropped_change_is_transient_and_a_retry_applies_it_once(
    aws_route53: Route53,
    aws_clients: AwsClients,
    aws_zone: Zone,
    aws_dns_names: DnsNames,
    aws_standin: AwsStandIn,
) -> None:
    # given: the batch is lost on the way in
    name = aws_dns_names()
    operation = unique("op-")
    batch = upsert(a(name, "192.0.2.1"))
    aws_standin.faults.arm("ChangeResourceRecordSets", "drop_request")

    # when
    with pytest.raises(Transient) as caught:
        aws_route53.change(aws_zone["id"], batch, operation=operation)

    # then: not re-sent by the adapter; nothing applied; the UPSERT went as a CREATE (nothing
    # was at the name), which Route53 refuses should the request still land after a retry
    assert caught.value.code == "NotApplied"
    assert caught.value.details["observed"] == []
    assert caught.value.details["sent"] == create(a(name, "192.0.2.1"))
    assert batches(aws_standin, operation) == 0
    assert aws_route53.records(aws_zone["id"], name) == []
    # and: the caller must wait out the change client's timeouts before retrying
    assert caught.value.details["retry_after_seconds"] == (
        aws_clients.connect_timeout + aws_clients.read_timeout + IN_FLIGHT_MARGIN
    )

    # and the caller's retry applies it once (made at once here, which only a test may do:
    # the stand-in dropped this request for good, so no copy of it is in flight)
    submitted = aws_route53.change(aws_zone["id"], batch, operation=operation)
    assert (submitted["id"] is not None, submitted["status"]) == (True, "PENDING")
    assert submitted["observations"]["ownership"] == "proven"
    assert batches(aws_standin, operation) == 1
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.1")]


@pytest.mark.standin
@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_gateway_error_on_change_resolved_by_reading(
    applied: bool,
    aws_route53: Route53,
    aws_zone: Zone,
    aws_dns_names: DnsNames,
    aws_standin: AwsStandIn,
) -> None:
    # given: a 502 from a gateway, after the batch was applied or instead of it
    name = aws_dns_names()
    operation = unique("op-")
    batch = create(a(name, "192.0.2.1"))
    aws_standin.faults.arm("ChangeResourceRecordSets", "server_error", status=502, apply=applied)

    # when / then: never re-sent; the records decide
    if applied:
        recovered = aws_route53.change(aws_zone["id"], batch, operation=operation)
        assert (recovered["id"], recovered["status"]) == (None, "APPLIED")
        assert "502" in recovered["observations"]["cause"]
        assert batches(aws_standin, operation) == 1
    else:
        with pytest.raises(Transient) as caught:
            aws_route53.change(aws_zone["id"], batch, operation=operation)
        assert caught.value.code == "NotApplied"
        assert batches(aws_standin, operation) == 0


@pytest.mark.standin
def test_batch_landed_meanwhile_is_recovered_not_a_conflict(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: the very batch lands while this attempt is throttled — an earlier attempt of it,
    # still in flight when change() read the records, or (here) another writer's identical
    # batch: nothing Route53 answers tells the two apart. The retried CREATE finds the set.
    name = aws_dns_names()
    operation = unique("op-")
    batch = create(a(name, "192.0.2.1"))
    aws_standin.faults.arm("ChangeResourceRecordSets", "throttle", foreign_changes=wire(batch))

    # when
    recovered = aws_route53.change(aws_zone["id"], batch, operation=operation)

    # then: InvalidChangeBatch re-checked against the records, not reported as a Conflict
    assert (recovered["id"], recovered["status"]) == (None, "APPLIED")
    assert "InvalidChangeBatch" in recovered["observations"]["cause"]
    assert recovered["observations"]["records"] == [a(name, "192.0.2.1")]
    assert batches(aws_standin, operation) == 0
    # and: applied, but not provably by us: compensation must not simply reverse it
    assert recovered["observations"]["ownership"] == "unproven"
    assert recovered["observations"]["sent"] == batch


@pytest.mark.standin
@pytest.mark.parametrize("lands", ["before-the-retry", "after-the-retry"])
def test_held_upsert_retried_at_once_applies_once(
    lands: str,
    aws_route53: Route53,
    aws_zone: Zone,
    aws_dns_names: DnsNames,
    aws_standin: AwsStandIn,
) -> None:
    # given: our UPSERT over 192.0.2.1 is held in the network (its connection drops, nothing
    # applied yet) and lands later: just before the retry's batch, or after it (just before
    # the next change in the zone). The retry comes at once — sooner than NotApplied's
    # retry_after_seconds allows — to show what Route53 itself does inside that window.
    after = 1 if lands == "before-the-retry" else 2
    held = hold_an_upsert(aws_route53, aws_zone, aws_dns_names, aws_standin, lands_after=after)
    sent = replace(a(held.name, "192.0.2.1"), a(held.name, "192.0.2.2"))
    assert (held.refused.code, held.refused.details["sent"]) == ("NotApplied", sent)

    # when: the engine retries at once (and, in the second case, someone changes the zone)
    retried = aws_route53.change(aws_zone["id"], held.batch, operation=held.operation)
    if lands == "after-the-retry":
        aws_route53.change(
            aws_zone["id"], create(a(held.other, "192.0.2.9")), operation=unique("x")
        )

    # then: exactly one batch of ours applied; Route53 refused the other copy
    assert batches(aws_standin, held.operation) == 1
    assert aws_route53.records(aws_zone["id"], held.name) == [a(held.name, "192.0.2.2")]
    late = held.late(aws_standin)
    assert retried["observations"]["sent"] == sent
    if lands == "before-the-retry":
        # the held copy applied; the retry's copy was refused and resolved by reading
        assert late.change_id is not None
        assert (retried["id"], retried["status"]) == (None, "APPLIED")
        assert "InvalidChangeBatch" in retried["observations"]["cause"]
        assert retried["observations"]["ownership"] == "unproven"
    else:
        # the retry's copy applied; the held one came too late: its DELETE is stale
        assert late.change_id is None
        assert late.error is not None and "do not match the current values" in late.error
        assert (retried["status"], retried["observations"]["ownership"]) == ("PENDING", "proven")


@pytest.mark.standin
@pytest.mark.parametrize("retried", [True, False], ids=["retried", "not-retried"])
def test_held_upsert_landing_after_a_foreign_write_is_refused(
    retried: bool,
    aws_route53: Route53,
    aws_zone: Zone,
    aws_dns_names: DnsNames,
    aws_standin: AwsStandIn,
    aws_boto: Boto,
) -> None:
    # given: our UPSERT over 192.0.2.1 is held in the network (NotApplied); the engine's retry
    # applies it, or not yet; then another writer sets 198.51.100.7
    # it lands just before the change in the zone that follows the other writer's
    after = 3 if retried else 2
    held = hold_an_upsert(aws_route53, aws_zone, aws_dns_names, aws_standin, lands_after=after)
    if retried:
        aws_route53.change(aws_zone["id"], held.batch, operation=held.operation)
    theirs = wire(upsert(a(held.name, "198.51.100.7")))
    aws_boto.route53.change_resource_record_sets(
        HostedZoneId=aws_zone["id"], ChangeBatch={"Changes": theirs}
    )

    # when: the held copy lands
    aws_route53.change(aws_zone["id"], create(a(held.other, "192.0.2.9")), operation=unique("x"))

    # then: refused (its DELETE names 192.0.2.1); the other writer's value survives
    late = held.late(aws_standin)
    assert late.change_id is None
    assert late.error is not None and "do not match the current values" in late.error
    assert aws_route53.records(aws_zone["id"], held.name) == [a(held.name, "198.51.100.7")]
    assert batches(aws_standin, held.operation) == (1 if retried else 0)


@pytest.mark.standin
def test_not_applied_asks_to_wait_out_the_change_clients_timeouts(
    aws_standin: AwsStandIn, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: a change client with timeouts of its own, and a batch held in the network (its
    # connection drops; the request may still land)
    session = boto3.session.Session(
        aws_access_key_id="contract", aws_secret_access_key="contract", region_name="us-east-1"
    )
    clients = AwsClients(
        session=session, endpoint_url=aws_standin.url, connect_timeout=3, read_timeout=7
    )
    route53 = Route53(clients=clients, throttle_backoff=0.05)
    name = aws_dns_names()
    aws_standin.faults.arm("ChangeResourceRecordSets", "hold_request")

    # when
    with pytest.raises(Transient) as caught:
        route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))

    # then: the retry must wait for the change client's connect and read timeouts (and a
    # margin), the time after which a copy still in flight has landed or died
    assert caught.value.code == "NotApplied"
    wait = caught.value.details["retry_after_seconds"]
    assert wait == route53.in_flight_window == 3 + 7 + IN_FLIGHT_MARGIN
    assert wait >= clients.connect_timeout + clients.read_timeout
    assert f"do not retry before {wait:g} s" in caught.value.message


def test_in_flight_window_defaults_to_botocores_timeouts() -> None:
    # given: a change client that does not say its timeouts (no botocore meta.config)
    route53 = Route53(client=object(), change_client=object())

    # then: botocore's defaults (60 s each) are assumed, not zero
    assert route53.in_flight_window == 2 * DEFAULT_TIMEOUT + IN_FLIGHT_MARGIN


@pytest.mark.standin
@pytest.mark.parametrize("lands", ["before-the-compensation", "after-the-compensation"])
def test_copy_landing_inside_the_retry_window(
    lands: str,
    aws_route53: Route53,
    aws_zone: Zone,
    aws_dns_names: DnsNames,
    aws_standin: AwsStandIn,
) -> None:
    """What the compare-and-swap does, and does not do, against a copy still in flight when
    the caller retries too soon. This test does NOT show that retry_after_seconds is long
    enough (that rests on the client's timeouts bounding how long a request can stay in
    flight); it shows why the wait is needed: the one landing Route53 cannot refuse."""
    # given: our UPSERT over 192.0.2.1 is held in the network (NotApplied); the caller
    # retries at once, against retry_after_seconds, and the retry applies (proven)
    # it lands just before the compensation (2nd change from now) or after it (3rd)
    after = 2 if lands == "before-the-compensation" else 3
    held = hold_an_upsert(aws_route53, aws_zone, aws_dns_names, aws_standin, lands_after=after)
    name, operation = held.name, held.operation
    assert held.refused.details["retry_after_seconds"] > 0
    retried = aws_route53.change(aws_zone["id"], held.batch, operation=operation)
    assert retried["observations"]["ownership"] == "proven"

    # when: the retry is compensated (its sent batch reversed), then the zone changes again
    reverse = [
        Change(action="CREATE" if c["action"] == "DELETE" else "DELETE", record=c["record"])
        for c in reversed(retried["observations"]["sent"])
    ]
    aws_route53.change(aws_zone["id"], reverse, operation=f"{operation}-undo")
    aws_route53.change(aws_zone["id"], create(a(held.other, "192.0.2.9")), operation=unique("x"))

    # then
    late = held.late(aws_standin)
    if lands == "before-the-compensation":
        # the retry had changed the set: the copy's DELETE of 192.0.2.1 is stale, refused;
        # the compensation then restores 192.0.2.1, and it stays
        assert late.change_id is None
        assert late.error is not None and "do not match the current values" in late.error
        assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.1")]
    else:
        # the remaining exposure: the compensation put back exactly the state the copy was
        # based on, so the copy applies and undoes it. Route53 cannot refuse it and the
        # adapter cannot tell it from the retry; only a caller that waits retry_after_seconds
        # (by when the copy has landed or died) never gets here.
        assert late.change_id is not None
        assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.2")]


@pytest.mark.standin
@pytest.mark.parametrize("copy", ["landed", "died"])
def test_retry_after_the_wait_sees_what_became_of_the_copy(
    copy: str,
    aws_route53: Route53,
    aws_zone: Zone,
    aws_dns_names: DnsNames,
    aws_standin: AwsStandIn,
    aws_boto: Boto,
) -> None:
    # given: our UPSERT over 192.0.2.1 is held in the network (NotApplied); during the wait
    # it lands (just before someone's unrelated change in the zone) or dies
    held = hold_an_upsert(aws_route53, aws_zone, aws_dns_names, aws_standin)
    name, operation = held.name, held.operation
    if copy == "landed":
        aws_boto.route53.change_resource_record_sets(
            HostedZoneId=aws_zone["id"],
            ChangeBatch={"Changes": wire(create(a(held.other, "192.0.2.9")))},
        )
    else:
        assert aws_standin.route53.discard_held() == 1

    # when: the retry, once the window has passed (nothing of ours is in flight any more)
    retried = aws_route53.change(aws_zone["id"], held.batch, operation=operation)

    # then: the landed copy is found (nothing sent; not provably ours, so compensation asks
    # an operator), or the retry sends and owns the change
    assert aws_route53.records(aws_zone["id"], name) == [a(name, "192.0.2.2")]
    assert batches(aws_standin, operation) == 1
    if copy == "landed":
        assert (retried["id"], retried["observations"]["already_applied"]) == (None, True)
        assert retried["observations"]["ownership"] == "unproven"
    else:
        assert retried["id"] is not None
        assert retried["observations"]["ownership"] == "proven"


@pytest.mark.standin
def test_lost_change_with_foreign_write_is_unknown(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: our batch is lost while another writer puts a different record at the name
    name = aws_dns_names()
    operation = unique("op-")
    theirs = create(a(name, "198.51.100.1"))
    aws_standin.faults.arm("ChangeResourceRecordSets", "drop_request", foreign_changes=wire(theirs))

    # when
    with pytest.raises(Unknown) as caught:
        aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=operation)

    # then: nothing re-sent; the evidence is in the error
    assert batches(aws_standin, operation) == 0
    assert caught.value.details["observed"] == [a(name, "198.51.100.1")]
    assert aws_route53.batch_state(aws_zone["id"], create(a(name, "192.0.2.1"))) == "neither"


def test_only_a_failure_that_proves_nothing_was_sent_is_unambiguous() -> None:
    url = "https://route53.amazonaws.com/2013-04-01/hostedzone/Z1/rrset/"

    # a connection that could not be opened, or not in time; errors raised before sending
    for unsent in (
        EndpointConnectionError(endpoint_url=url),
        ConnectTimeoutError(endpoint_url=url),
        ParamValidationError(report="missing HostedZoneId"),
        NoCredentialsError(),
    ):
        assert is_ambiguous(unsent) is False, unsent
    # anything that can break an exchange once the request may have gone out
    for mid_exchange in (
        ConnectionClosedError(endpoint_url=url),
        ReadTimeoutError(endpoint_url=url),
        SSLError(endpoint_url=url, error="EOF occurred in violation of protocol"),
        ProxyConnectionError(proxy_url="http://proxy:3128", error="tunnel closed"),
    ):
        assert is_ambiguous(mid_exchange) is True, mid_exchange


@pytest.mark.standin
def test_throttled_reads_retried(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given
    name = aws_dns_names()
    fault = aws_standin.faults.arm("ListResourceRecordSets", "throttle")

    # when
    found = aws_route53.records(aws_zone["id"], name)

    # then: botocore's standard mode retried transparently
    assert found == []
    assert fault.fired == 1


@pytest.mark.standin
def test_throttled_change_retried_without_duplicate(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given
    name = aws_dns_names()
    operation = unique("op-")
    fault = aws_standin.faults.arm("ChangeResourceRecordSets", "throttle", times=2)

    # when
    submitted = aws_route53.change(
        aws_zone["id"], create(a(name, "192.0.2.1")), operation=operation
    )

    # then
    assert fault.fired == 2
    assert submitted["id"] is not None
    assert batches(aws_standin, operation) == 1


@pytest.mark.standin
def test_throttling_that_persists_is_throttled(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given
    name = aws_dns_names()
    aws_standin.faults.arm("ChangeResourceRecordSets", "throttle", times=None)

    # when / then
    with pytest.raises(Throttled) as caught:
        aws_route53.change(aws_zone["id"], create(a(name, "192.0.2.1")), operation=unique("op-"))
    assert caught.value.code == "Throttling"
    aws_standin.faults.clear()
    assert aws_route53.records(aws_zone["id"], name) == []


# -- routing policies, traffic policies, escaped names -----------------------------------------

CIDR_COLLECTION = str(uuid.UUID(int=0x5EED))
ROUTED: dict[str, dict[str, Any]] = {
    "weighted": {"Weight": 10},
    "geoproximity": {"GeoProximityLocation": {"AWSRegion": "us-east-1", "Bias": 0}},
    # a real account needs a CIDR collection, which the fixtures do not create
    "cidr": {"CidrRoutingConfig": {"CollectionId": CIDR_COLLECTION, "LocationName": "office"}},
}


def routed(name: str, policy: str, *values: str) -> Record:
    return record(name, "A", ttl=60, values=values, set_identifier=policy, routing=ROUTED[policy])


@pytest.mark.parametrize(
    "policy",
    [
        "weighted",
        "geoproximity",
        pytest.param("cidr", marks=pytest.mark.skipif(REAL, reason="needs a CIDR collection")),
    ],
)
def test_upsert_of_a_routed_set_deletes_it_exactly_as_read(
    policy: str, aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: a record set with a routing policy, read back with all of its routing
    name = aws_dns_names()
    aws_route53.change(
        aws_zone["id"], create(routed(name, policy, "192.0.2.1")), operation=unique("op-")
    )
    assert aws_route53.records(aws_zone["id"], name) == [routed(name, policy, "192.0.2.1")]

    # when
    submitted = aws_route53.change(
        aws_zone["id"], upsert(routed(name, policy, "192.0.2.2")), operation=unique("op-")
    )

    # then: the DELETE half named the set exactly as read (routing included), so Route53
    # applied the batch
    assert submitted["id"] is not None
    assert submitted["observations"]["sent"] == replace(
        routed(name, policy, "192.0.2.1"), routed(name, policy, "192.0.2.2")
    )
    assert aws_route53.records(aws_zone["id"], name) == [routed(name, policy, "192.0.2.2")]


@pytest.mark.standin
def test_stand_in_refuses_a_delete_without_the_routing(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames
) -> None:
    # given: a CIDR-routed set
    name = aws_dns_names()
    aws_route53.change(
        aws_zone["id"], create(routed(name, "cidr", "192.0.2.1")), operation=unique("op-")
    )
    bare = record(name, "A", ttl=60, values=["192.0.2.1"], set_identifier="cidr")

    # when / then: a DELETE that leaves out its CidrRoutingConfig does not match it
    with pytest.raises(Conflict) as caught:
        aws_route53.change(aws_zone["id"], delete(bare), operation=unique("op-"))
    assert caught.value.details["messages"] == [
        f"Tried to delete resource record set [name='{name}.', type='A', set-identifier='cidr'] "
        "but the values provided do not match the current values"
    ]


@pytest.mark.standin
def test_lost_response_on_a_routed_upsert_recovered(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: a CIDR-routed set; the UPSERT over it is applied, its response lost
    name = aws_dns_names()
    aws_route53.change(
        aws_zone["id"], create(routed(name, "cidr", "192.0.2.1")), operation=unique("op-")
    )
    operation = unique("op-")
    aws_standin.faults.arm("ChangeResourceRecordSets", "lose_response")

    # when
    recovered = aws_route53.change(
        aws_zone["id"], upsert(routed(name, "cidr", "192.0.2.2")), operation=operation
    )

    # then: the read-back matches the post-state, routing included: recovered, not Unknown
    assert (recovered["id"], recovered["status"]) == (None, "APPLIED")
    assert recovered["observations"]["records"] == [routed(name, "cidr", "192.0.2.2")]
    assert batches(aws_standin, operation) == 1


@pytest.mark.standin
def test_traffic_policy_sets_are_refused(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_standin: AwsStandIn
) -> None:
    # given: an A set a traffic policy instance made (the stand-in models no instances: it is
    # put in place directly)
    name = aws_dns_names()
    instance = str(uuid.uuid4())
    aws_standin.route53.apply_foreign(
        aws_zone["id"],
        [
            {
                "Action": "CREATE",
                "ResourceRecordSet": {
                    "Name": name,
                    "Type": "A",
                    "TrafficPolicyInstanceId": instance,
                },
            }
        ],
    )
    [managed] = aws_route53.records(aws_zone["id"], name)
    assert managed["routing"] == {TRAFFIC_POLICY: instance}

    # when / then: an UPSERT over it, its DELETE as read, a record naming an instance: all
    # refused before anything is sent
    for batch in (
        upsert(a(name, "192.0.2.1")),
        delete(managed),
        create(record(f"other.{name}", "A", routing={TRAFFIC_POLICY: instance})),
    ):
        operation = unique("op-")
        with pytest.raises(Rejected) as caught:
            aws_route53.change(aws_zone["id"], batch, operation=operation)
        assert caught.value.code == "TrafficPolicyRecord"
        assert batches(aws_standin, operation) == 0
    assert aws_route53.records(aws_zone["id"], name) == [managed]

    # and a set of another type at the name is not the policy's
    txt = record(name, "TXT", ttl=60, values=['"v"'])
    aws_route53.change(aws_zone["id"], create(txt), operation=unique("op-"))
    assert txt in aws_route53.records(aws_zone["id"], name)


def test_escaped_dot_and_wildcard_names(
    aws_route53: Route53, aws_zone: Zone, aws_dns_names: DnsNames, aws_boto: Boto
) -> None:
    # given: one label holding a dot (x\056y), the two labels x.y, and a wildcard
    base = aws_dns_names()
    dotted, escaped, wildcard = f"x.y.{base}", f"x\\056y.{base}", f"*.{base}"
    aws_dns_names.names += [dotted, escaped, wildcard]

    # when: all three are created in one batch (one key each)
    aws_route53.change(
        aws_zone["id"],
        create(a(dotted, "192.0.2.1"), a(escaped, "192.0.2.2"), a(wildcard, "192.0.2.3")),
        operation=unique("op-"),
    )

    # then: Route53 keeps three names, escaped as it returns them
    listed = aws_boto.route53.list_resource_record_sets(
        HostedZoneId=aws_zone["id"], StartRecordName=f"\\052.{base}."
    )["ResourceRecordSets"]
    assert {(r["Name"], r["Type"]) for r in listed} >= {
        (f"\\052.{base}.", "A"),
        (f"x\\056y.{base}.", "A"),
        (f"x.y.{base}.", "A"),
    }
    # and each reads back under its own name; the wildcard as '*' either way it is asked for
    assert aws_route53.records(aws_zone["id"], dotted) == [a(dotted, "192.0.2.1")]
    assert aws_route53.records(aws_zone["id"], escaped) == [a(escaped, "192.0.2.2")]
    assert aws_route53.records(aws_zone["id"], f"\\052.{base}") == [a(wildcard, "192.0.2.3")]
    assert aws_route53.records(aws_zone["id"], wildcard)[0]["name"] == wildcard

    # and an UPSERT of one leaves the other alone
    submitted = aws_route53.change(
        aws_zone["id"], upsert(a(escaped, "192.0.2.4")), operation=unique("op-")
    )
    assert submitted["observations"]["sent"] == replace(
        a(escaped, "192.0.2.2"), a(escaped, "192.0.2.4")
    )
    assert aws_route53.records(aws_zone["id"], dotted) == [a(dotted, "192.0.2.1")]

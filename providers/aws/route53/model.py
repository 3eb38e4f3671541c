"""Route53's record sets and hosted zones as plain values: no boto3, no I/O.

Records are normalized so a plan can be hashed and compared: the name (:func:`normalize_name`:
ASCII lower case without the trailing dot, Route53's ``\\052`` read as ``*``, an escaped dot
inside a label kept escaped), the type, the TTL (None for an alias), the values sorted, the
alias target (``hosted_zone_id``, ``dns_name`` normalized like a name,
``evaluate_target_health``), the set identifier, and in ``routing`` every other member of
Route53's ``ResourceRecordSet`` exactly as boto3 reads it (``Weight``, ``Region``,
``GeoLocation``, ``Failover``, ``MultiValueAnswer``, ``HealthCheckId``, ``CidrRoutingConfig``,
``GeoProximityLocation``, ``AZAffinity``, ``TrafficPolicyInstanceId``, and any member a later
API version adds), so a record read here can be DELETEd exactly: Route53 refuses a DELETE that
does not name the record set's current values, routing included.

An alias record has no TTL and no values: :func:`record` refuses them beside an alias
(``ValueError``; :meth:`Route53.change` reports a malformed change as
:class:`~providers.errors.Rejected`), since Route53 would never read them back.

A record set that carries ``TrafficPolicyInstanceId`` was made by a traffic policy instance and
belongs to it: a batch that touches one (as read, or as given) is
:class:`~providers.errors.Rejected` (``TrafficPolicyRecord``) before anything is sent.

Nothing here talks to Route53: :mod:`.batch` compares and rewrites batches of these values,
:mod:`.adapter` reads and writes them with boto3.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

PROVIDER = "aws.route53"
# The members of a ResourceRecordSet that Record keeps apart; every other one is routing.
CORE_MEMBERS = frozenset({"Name", "Type", "TTL", "ResourceRecords", "AliasTarget", "SetIdentifier"})
TRAFFIC_POLICY = "TrafficPolicyInstanceId"
ACTIONS = ("CREATE", "DELETE", "UPSERT")

Action = Literal["CREATE", "DELETE", "UPSERT"]
Key = tuple[str, str, str | None]


class AliasTarget(TypedDict):
    hosted_zone_id: str
    dns_name: str
    evaluate_target_health: bool


class Record(TypedDict):
    name: str
    type: str
    ttl: int | None
    values: list[str]
    alias: AliasTarget | None
    set_identifier: str | None
    routing: dict[str, Any]


class Change(TypedDict):
    action: Action
    record: Record


class Zone(TypedDict):
    id: str
    name: str
    caller_reference: str
    private: bool
    record_set_count: int
    name_servers: list[str]


# -- normalization -----------------------------------------------------------------------------


_ESCAPE = re.compile(r"\\([0-7]{3})")
_WIRE_UNESCAPED = re.compile(r"[^a-z0-9_.*\\-]")


def normalize_name(name: str) -> str:
    """A name in a form that compares as Route53 compares names, without the trailing dot.

    An octal escape (``\\ooo``, as Route53 returns every character but a-z, 0-9, ``-``,
    ``_`` and ``.``) is decoded when it stands for printable ASCII other than ``.`` and
    ``\\`` (``\\052`` is ``*``); an escaped dot or backslash, a space, a control or
    non-ASCII character (UTF-8 bytes) is kept as ``\\ooo``. So ``a\\056b.z`` (one label
    holding a dot) and ``a.b.z`` (two labels) stay two names, while ``*.z`` and ``\\052.z``
    are one. Only ASCII letters are lower-cased, as DNS does."""
    out: list[str] = []
    text = name.strip()
    i = 0
    while i < len(text):
        char = text[i]
        escape = _ESCAPE.match(text, i) if char == "\\" else None
        if escape is not None:
            codes = [int(escape.group(1), 8)]
            i += 4
        elif char == ".":
            out.append(".")  # a label separator
            i += 1
            continue
        else:
            codes = list(char.encode("utf-8"))
            i += 1
        for code in codes:
            decoded = chr(code)
            if 0x21 <= code <= 0x7E and decoded not in ".\\":
                out.append(decoded.lower() if "A" <= decoded <= "Z" else decoded)
            else:
                out.append(f"\\{code:03o}")
    return "".join(out).rstrip(".")


def wire_name(name: str) -> str:
    """A normalized name as Route53 takes it, with the trailing dot: every character but
    a-z, 0-9, ``-``, ``_``, ``.`` and ``*`` as an octal escape (the escapes of
    :func:`normalize_name` stay as they are; ``*`` goes as given, as a wildcard is written)."""
    return _WIRE_UNESCAPED.sub(lambda m: f"\\{ord(m.group()):03o}", name) + "."


def record(
    name: str,
    type: str,
    *,
    ttl: int | None = None,
    values: Iterable[str] = (),
    alias: Mapping[str, Any] | None = None,
    set_identifier: str | None = None,
    routing: Mapping[str, Any] | None = None,
) -> Record:
    """A normalized record (e.g. for a CREATE or UPSERT). ValueError for an alias given a TTL
    or values: Route53 keeps neither for an alias, so such a record could never be read back
    as given (and a batch holding it would never be seen as applied)."""
    listed = sorted(str(v) for v in values)
    if alias is not None and (ttl is not None or listed):
        raise ValueError(f"an alias record has no TTL or values: {name} {type} ttl={ttl!r}")
    return Record(
        name=normalize_name(name),
        type=type.upper(),
        ttl=None if ttl is None else int(ttl),
        values=listed,
        alias=None
        if alias is None
        else AliasTarget(
            hosted_zone_id=str(alias["hosted_zone_id"]).removeprefix("/hostedzone/"),
            dns_name=normalize_name(str(alias["dns_name"])),
            evaluate_target_health=bool(alias.get("evaluate_target_health", False)),
        ),
        set_identifier=set_identifier,
        routing=dict(routing or {}),
    )


def normalize(raw: Mapping[str, Any]) -> Record:
    """A record from Route53's ``ResourceRecordSet`` shape, or a :class:`Record` again."""
    if "Name" not in raw:
        return record(
            raw["name"],
            raw["type"],
            ttl=raw.get("ttl"),
            values=raw.get("values") or (),
            alias=raw.get("alias"),
            set_identifier=raw.get("set_identifier"),
            routing=raw.get("routing"),
        )
    target = raw.get("AliasTarget")
    return record(
        raw["Name"],
        raw["Type"],
        ttl=raw.get("TTL"),
        values=[r["Value"] for r in raw.get("ResourceRecords") or ()],
        alias=None
        if target is None
        else {
            "hosted_zone_id": target["HostedZoneId"],
            "dns_name": target["DNSName"],
            "evaluate_target_health": target.get("EvaluateTargetHealth", False),
        },
        set_identifier=raw.get("SetIdentifier"),
        # Everything else, whatever the routing policy (or a member a later API version adds):
        # a DELETE must name it all.
        routing={name: value for name, value in raw.items() if name not in CORE_MEMBERS},
    )


def to_wire(rec: Record) -> dict[str, Any]:
    """Route53's ``ResourceRecordSet`` shape of a record."""
    wire: dict[str, Any] = {"Name": wire_name(rec["name"]), "Type": rec["type"]}
    if rec["set_identifier"] is not None:
        wire["SetIdentifier"] = rec["set_identifier"]
    wire.update(rec["routing"])
    if rec["alias"] is not None:
        wire["AliasTarget"] = {
            "HostedZoneId": rec["alias"]["hosted_zone_id"],
            "DNSName": wire_name(rec["alias"]["dns_name"]),
            "EvaluateTargetHealth": rec["alias"]["evaluate_target_health"],
        }
    else:  # (neither: a set a traffic policy made, which has only its instance id)
        if rec["ttl"] is not None:
            wire["TTL"] = rec["ttl"]
        if rec["values"]:
            wire["ResourceRecords"] = [{"Value": v} for v in rec["values"]]
    return wire


def key_of(rec: Record) -> Key:
    return (rec["name"], rec["type"], rec["set_identifier"])

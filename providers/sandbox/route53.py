"""A Route53 that keeps AWS's rules, served by :class:`providers.sandbox.aws.AwsStandIn`.

moto 5.2 is not faithful where Alfred's correctness depends on Route53: it
accepts a CNAME beside other records at one name, applies a change batch change by change (a
failing change leaves the earlier ones applied), checks a DELETE against its own change journal
rather than the record set's current values, and reports every change INSYNC at once. This
module implements the subset of the Route53 REST-XML API Alfred uses, with AWS's semantics:

- **One batch, whole or nothing.** The changes are validated and applied in order against a
  working copy of the zone; the copy replaces the zone only if every change is valid. All
  errors of a batch are reported together, as AWS does: ``InvalidChangeBatch`` (400) whose
  message is the bracketed, comma-separated list of AWS's texts.
- **Exact DELETE.** A DELETE names the record set's current TTL, values (in any order) or alias
  target (``EvaluateTargetHealth`` included) and every other member it has — its routing,
  whatever the policy (``Weight``, ``Region``, ``GeoLocation``, ``Failover``,
  ``MultiValueAnswer``, ``HealthCheckId``, ``CidrRoutingConfig``, ``GeoProximityLocation``,
  ``AZAffinity``, ``TrafficPolicyInstanceId``; members are kept generically, so one a later
  API adds is kept too); anything else is "...but the values provided do not match the current
  values"; an absent set is "...but it was not found".
- **Names as Route53 keeps them.** A name is stored and returned escaped: every character but
  a-z, 0-9, ``-`` and ``_`` in a label as ``\\ooo`` (``*`` as ``\\052``); an escape in a
  request is read as the character it stands for, so ``*`` and ``\\052`` are one name while
  ``a\\056b`` (a dot inside a label) and ``a.b`` are two.
- **One change per record set.** Two changes to one record set (name, type, set identifier)
  in a batch are refused with "The request contains an invalid set of changes for a resource
  record set '<type> <name>'" — except a DELETE followed by a CREATE, the replace idiom.
- **No duplicate values.** A record set that lists one value twice is "Duplicate Resource
  Record: '<value>'".
- **The apex keeps its NS and SOA.** A batch that would leave the zone without them is "A
  HostedZone must contain at least one NS record for the zone itself." / "A HostedZone must
  contain exactly one SOA record." (they may be replaced: DELETE + CREATE, or UPSERT).
- **CNAME exclusivity.** A CNAME excludes every other record at its name (both directions, with
  AWS's two messages), and is refused at the zone apex (where NS and SOA always live).
- **CREATE of an existing set** fails ("...but it already exists"); UPSERT replaces it.
- **Propagation.** A change is ``PENDING`` for ``change_delay`` seconds, then ``INSYNC``;
  ``GetChange`` of an unknown id is ``NoSuchChange`` (404).
- **Zones.** ``CreateHostedZone`` with a ``CallerReference`` (a reference is never reusable,
  even after the zone is deleted: ``HostedZoneAlreadyExists``, 409), NS + SOA at the apex, a
  delegation set of four name servers; ``GetHostedZone``, ``ListHostedZones``,
  ``ListHostedZonesByName`` and ``ListResourceRecordSets`` in Route53's order (names with their
  labels reversed, then type, then set identifier) with its pagination; ``DeleteHostedZone``
  only when nothing but the apex NS/SOA is left (``HostedZoneNotEmpty``).

Not modelled (documented gaps): alias targets are not resolved or checked for existence,
traffic policies (a set carrying ``TrafficPolicyInstanceId`` is accepted as the third kind of
set beside plain and alias ones, as an instance makes it; tests put one in place with
:meth:`Route53.apply_foreign`), health checks, CIDR collections (a ``CidrRoutingConfig`` is not
checked against one), the rules of the routing policies (which members go together, a
``SetIdentifier`` for each), DNSSEC, private-zone VPC associations (a ``VPC`` in the request
only marks the zone private), value syntax beyond A/AAAA addresses and duplicates, and NS/SOA
records below the apex.

:attr:`Route53.change_batches` lists every applied batch (id, zone, comment, changes) so a test
can count them — e.g. to prove that recovering a lost response sent no second batch.

**Requests in flight.** :meth:`Route53.hold` keeps a ChangeResourceRecordSets request
unapplied (the AWS stand-in's ``hold_request`` fault drops its connection) and lands it later:
just before the ``after``-th ChangeResourceRecordSets request on the same zone that reaches the
stand-in afterwards (default the next one; :meth:`Route53.apply_foreign`, the faults' other
writer, does not count), as a request delayed in the network would. It lands under the rules
above, so a stale copy is refused; :attr:`Route53.late_batches` says what became of each.
:meth:`Route53.discard_held` forgets those not landed yet.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import ipaddress
import re
import secrets
import string
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from providers.sandbox.server import Request, Response
from providers.sandbox.state import StateFile

NS = "https://route53.amazonaws.com/doc/2013-04-01/"
API = "/2013-04-01"
RECORD_TYPES = frozenset(
    {"A", "AAAA", "CAA", "CNAME", "DS", "HTTPS", "MX", "NAPTR", "NS", "PTR", "SOA", "SPF"}
    | {"SRV", "SSHFP", "SVCB", "TLSA", "TXT"}
)
ALIAS_TYPES = frozenset({"A", "AAAA", "CNAME", "MX", "NAPTR", "PTR", "SPF", "SRV", "TXT"})
# The members of a ResourceRecordSet RRSet keeps apart; every other one is its routing.
CORE_MEMBERS = frozenset({"Name", "Type", "TTL", "ResourceRecords", "AliasTarget", "SetIdentifier"})
# Where Route53 lists the routing members around TTL/ResourceRecords/AliasTarget.
ROUTING_BEFORE = ("Weight", "Region", "GeoLocation", "Failover", "MultiValueAnswer")
ROUTING_AFTER = (
    "HealthCheckId",
    "TrafficPolicyInstanceId",
    "CidrRoutingConfig",
    "GeoProximityLocation",
    "AZAffinity",
)
TRAFFIC_POLICY = "TrafficPolicyInstanceId"
ACTIONS = frozenset({"CREATE", "DELETE", "UPSERT"})
_ID_ALPHABET = string.ascii_uppercase + string.digits

_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(rf"^{API}/hostedzone/?$"), "CreateHostedZone"),
    ("GET", re.compile(rf"^{API}/hostedzone/?$"), "ListHostedZones"),
    ("GET", re.compile(rf"^{API}/hostedzonesbyname/?$"), "ListHostedZonesByName"),
    ("GET", re.compile(rf"^{API}/hostedzone/(?P<id>[^/]+)/?$"), "GetHostedZone"),
    ("DELETE", re.compile(rf"^{API}/hostedzone/(?P<id>[^/]+)/?$"), "DeleteHostedZone"),
    ("POST", re.compile(rf"^{API}/hostedzone/(?P<id>[^/]+)/rrset/?$"), "ChangeResourceRecordSets"),
    ("GET", re.compile(rf"^{API}/hostedzone/(?P<id>[^/]+)/rrset/?$"), "ListResourceRecordSets"),
    ("GET", re.compile(rf"^{API}/change/(?P<id>[^/]+)/?$"), "GetChange"),
]


class Route53Error(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


# -- names -------------------------------------------------------------------------------------


_ESCAPE = re.compile(r"\\([0-7]{3})")
_PLAIN = frozenset(string.ascii_lowercase + string.digits + "-_")


def fqdn(name: str) -> str:
    """Route53's form of a name, as it stores and returns it: ASCII lower case, with the
    trailing dot, every character of a label but a-z, 0-9, '-' and '_' as \\ooo (non-ASCII
    as its UTF-8 bytes). An escape given is read as the character it stands for (``\\052``
    is ``*``, ``\\141`` is ``a``); an unescaped '.' separates labels."""
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
            out.append(".")
            i += 1
            continue
        else:
            codes = list(char.encode("utf-8"))
            i += 1
        for code in codes:
            decoded = chr(code).lower() if "A" <= chr(code) <= "Z" else chr(code)
            out.append(decoded if decoded in _PLAIN else f"\\{code:03o}")
    result = "".join(out)
    return result if result.endswith(".") else result + "."


def escaped(name: str) -> str:
    """As Route53 returns a name (the form :func:`fqdn` makes)."""
    return fqdn(name)


def _sort_name(name: str) -> str:
    labels = escaped(name).rstrip(".").split(".")
    return ".".join(reversed(labels)) + "."


def _in_zone(name: str, zone: str) -> bool:
    return name == zone or name.endswith("." + zone)


# -- record sets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alias:
    hosted_zone_id: str
    dns_name: str  # fqdn
    evaluate_target_health: bool


@dataclass(frozen=True)
class RRSet:
    name: str  # fqdn
    type: str
    set_identifier: str | None = None
    ttl: int | None = None
    values: tuple[str, ...] = ()
    alias: Alias | None = None
    # Every other member, nested ones flattened ("GeoLocation.CountryCode"), as text.
    routing: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.name, self.type, self.set_identifier)

    def sort_key(self) -> tuple[str, str, str]:
        return (_sort_name(self.name), self.type, self.set_identifier or "")

    def matches(self, other: RRSet) -> bool:
        """Route53's DELETE rule: everything but the order of the values must be equal."""
        return (
            self.key == other.key
            and self.ttl == other.ttl
            and sorted(self.values) == sorted(other.values)
            and self.alias == other.alias
            and dict(self.routing) == dict(other.routing)
        )

    def label(self) -> str:
        ident = f", set-identifier='{self.set_identifier}'" if self.set_identifier else ""
        return f"[name='{escaped(self.name)}', type='{self.type}'{ident}]"

    @classmethod
    def from_wire(cls, rrs: Mapping[str, Any]) -> RRSet:
        """From boto3's ``ResourceRecordSet`` shape (which the XML parser also produces)."""
        alias = rrs.get("AliasTarget")
        routing: dict[str, str] = {}
        for name, value in rrs.items():
            if name not in CORE_MEMBERS:
                _flatten(name, value, routing)
        ttl = rrs.get("TTL")
        return cls(
            name=fqdn(str(rrs["Name"])),
            type=str(rrs["Type"]).upper(),
            set_identifier=rrs.get("SetIdentifier"),
            ttl=None if ttl is None else int(ttl),
            values=tuple(str(r["Value"]) for r in rrs.get("ResourceRecords") or ()),
            alias=None
            if alias is None
            else Alias(
                hosted_zone_id=str(alias["HostedZoneId"]).removeprefix("/hostedzone/"),
                dns_name=fqdn(str(alias["DNSName"])),
                evaluate_target_health=_boolean(alias.get("EvaluateTargetHealth", False)),
            ),
            routing=tuple(sorted(routing.items())),
        )

    def to_wire(self) -> dict[str, Any]:
        """boto3's ``ResourceRecordSet`` shape (names escaped as Route53 returns them: the
        form they are kept in, so no second pass of :func:`escaped`, which the state file
        would pay for on every record set at every save); :meth:`from_wire` reads it back to
        an equal record set."""
        wire: dict[str, Any] = {"Name": self.name, "Type": self.type}
        if self.set_identifier is not None:
            wire["SetIdentifier"] = self.set_identifier
        if self.ttl is not None:
            wire["TTL"] = self.ttl
        if self.values:
            wire["ResourceRecords"] = [{"Value": value} for value in self.values]
        if self.alias is not None:
            wire["AliasTarget"] = {
                "HostedZoneId": self.alias.hosted_zone_id,
                "DNSName": self.alias.dns_name,
                "EvaluateTargetHealth": self.alias.evaluate_target_health,
            }
        wire.update(_unflatten(self.routing))
        return wire

    def to_xml(self, parent: ET.Element) -> None:
        node = _sub(parent, "ResourceRecordSet")
        _sub(node, "Name", escaped(self.name))
        _sub(node, "Type", self.type)
        if self.set_identifier is not None:
            _sub(node, "SetIdentifier", self.set_identifier)
        routing = _unflatten(self.routing)
        for name in ROUTING_BEFORE:
            if name in routing:
                _member_xml(node, name, routing.pop(name))
        if self.ttl is not None:
            _sub(node, "TTL", str(self.ttl))
        if self.values:
            records = _sub(node, "ResourceRecords")
            for value in self.values:
                _sub(_sub(records, "ResourceRecord"), "Value", value)
        if self.alias is not None:
            target = _sub(node, "AliasTarget")
            _sub(target, "HostedZoneId", self.alias.hosted_zone_id)
            _sub(target, "DNSName", escaped(self.alias.dns_name))
            _sub(target, "EvaluateTargetHealth", _xml_bool(self.alias.evaluate_target_health))
        later = [n for n in ROUTING_AFTER if n in routing]
        for name in later + sorted(set(routing) - set(later)):
            _member_xml(node, name, routing[name])


def _flatten(name: str, value: Any, into: dict[str, str]) -> None:
    """``value`` (a boto3 member: a scalar, or a structure as a mapping) as dotted text keys."""
    if isinstance(value, Mapping):
        for inner, item in value.items():
            _flatten(f"{name}.{inner}", item, into)
    elif value is not None:
        into[name] = _xml_bool(value) if isinstance(value, bool) else str(value)


def _unflatten(routing: Iterable[tuple[str, str]]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in routing:
        *path, last = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def _member_xml(parent: ET.Element, name: str, value: Any) -> None:
    if isinstance(value, dict):
        node = _sub(parent, name)
        for inner, item in value.items():
            _member_xml(node, inner, item)
    else:
        _sub(parent, name, value)


@dataclass
class HostedZone:
    id: str
    name: str  # fqdn
    caller_reference: str
    comment: str | None
    private: bool
    name_servers: list[str]
    rrsets: dict[tuple[str, str, str | None], RRSet] = field(default_factory=dict)

    def sorted_rrsets(self) -> list[RRSet]:
        return sorted(self.rrsets.values(), key=RRSet.sort_key)


@dataclass
class Change:
    id: str
    submitted_at: dt.datetime
    insync_at: float  # time.monotonic()
    comment: str | None

    def status(self) -> str:
        return "INSYNC" if time.monotonic() >= self.insync_at else "PENDING"


@dataclass(frozen=True)
class AppliedBatch:
    """One applied ChangeResourceRecordSets, for tests to count and inspect."""

    change_id: str
    zone_id: str
    comment: str | None
    changes: tuple[tuple[str, RRSet], ...]  # (action, record set)
    submitted_at: dt.datetime
    foreign: bool = False  # applied by a fault that simulates another writer
    late: bool = False  # a held request (``hold``) that landed later

    @functools.cached_property
    def json(self) -> dict[str, Any]:
        """As the journal serves it (``GET /_sandbox/journal``) and the state file keeps it;
        made once (a batch never changes), as every save writes every batch. Not to be
        changed by a reader."""
        return {
            "change_id": self.change_id,
            "zone_id": self.zone_id,
            "comment": self.comment,
            "changes": _changes_json(self.changes),
            "submitted_at": _iso(self.submitted_at),
            "foreign": self.foreign,
            "late": self.late,
        }


@dataclass(frozen=True)
class LateBatch:
    """What became of a held ChangeResourceRecordSets request when it landed."""

    zone_id: str
    comment: str | None
    changes: tuple[tuple[str, RRSet], ...]
    change_id: str | None  # applied
    error: str | None  # refused: Route53's error code and message

    def to_json(self) -> dict[str, Any]:
        return {
            "zone_id": self.zone_id,
            "comment": self.comment,
            "changes": _changes_json(self.changes),
            "change_id": self.change_id,
            "error": self.error,
        }


def _changes_json(changes: Iterable[tuple[str, RRSet]]) -> list[dict[str, Any]]:
    """boto3's ``Changes`` shape."""
    return [{"Action": action, "ResourceRecordSet": rrset.to_wire()} for action, rrset in changes]


def _changes_from_json(changes: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, RRSet], ...]:
    return tuple(
        (str(change["Action"]), RRSet.from_wire(change["ResourceRecordSet"])) for change in changes
    )


def _iso(at: dt.datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Held:
    zone_id: str
    body: bytes
    countdown: int  # ChangeResourceRecordSets requests on the zone before it lands


# -- the service -------------------------------------------------------------------------------


_MUTATIONS = frozenset({"CreateHostedZone", "DeleteHostedZone", "ChangeResourceRecordSets"})


class Route53:
    """In-memory Route53. Thread-safe: every request runs under one lock.

    With ``state`` it starts from the state saved there and saves it after every request
    that changed something (:mod:`providers.sandbox.state`): zones and their record sets,
    caller references, changes (one still ``PENDING`` at a restart turns ``INSYNC`` when its
    delay would have ended), and the journal of applied and late batches. Held requests are
    not kept: they are in flight, and a restart drops the connections they travel on.
    """

    def __init__(self, *, change_delay: float = 2.0, state: StateFile | None = None) -> None:
        self.change_delay = change_delay
        self._lock = threading.RLock()
        self._zones: dict[str, HostedZone] = {}
        self._changes: dict[str, Change] = {}
        self._caller_references: dict[str, str] = {}  # reference -> zone id, kept forever
        self._batches: list[AppliedBatch] = []
        self._held: list[_Held] = []
        self._late: list[LateBatch] = []
        self._state = state
        document = state.load() if state is not None else None
        if document is not None:
            self._restore(document)

    # -- state on disk -----------------------------------------------------------------------

    def _save(self) -> None:
        if self._state is None:
            return
        # A change's end is kept as a wall-clock time: monotonic clocks do not survive the
        # process.
        now, wall = time.monotonic(), time.time()
        self._state.save(
            {
                "zones": [
                    {
                        "id": zone.id,
                        "name": zone.name,
                        "caller_reference": zone.caller_reference,
                        "comment": zone.comment,
                        "private": zone.private,
                        "name_servers": zone.name_servers,
                        "rrsets": [rrset.to_wire() for rrset in zone.rrsets.values()],
                    }
                    for zone in self._zones.values()
                ],
                "caller_references": self._caller_references,
                "changes": [
                    {
                        "id": change.id,
                        "submitted_at": change.submitted_at.isoformat(),
                        "insync_at": wall + (change.insync_at - now),
                        "comment": change.comment,
                    }
                    for change in self._changes.values()
                ],
                "change_batches": [batch.json for batch in self._batches],
                "late_batches": [late.to_json() for late in self._late],
            }
        )

    def _restore(self, document: Mapping[str, Any]) -> None:
        now, wall = time.monotonic(), time.time()
        for zone in document["zones"]:
            rrsets = (RRSet.from_wire(wire) for wire in zone["rrsets"])
            self._zones[zone["id"]] = HostedZone(
                id=zone["id"],
                name=zone["name"],
                caller_reference=zone["caller_reference"],
                comment=zone["comment"],
                private=zone["private"],
                name_servers=list(zone["name_servers"]),
                rrsets={rrset.key: rrset for rrset in rrsets},
            )
        self._caller_references = dict(document["caller_references"])
        for change in document["changes"]:
            self._changes[change["id"]] = Change(
                id=change["id"],
                submitted_at=dt.datetime.fromisoformat(change["submitted_at"]),
                insync_at=now + (float(change["insync_at"]) - wall),
                comment=change["comment"],
            )
        self._batches = [
            AppliedBatch(
                change_id=batch["change_id"],
                zone_id=batch["zone_id"],
                comment=batch["comment"],
                changes=_changes_from_json(batch["changes"]),
                submitted_at=dt.datetime.fromisoformat(batch["submitted_at"]),
                foreign=batch["foreign"],
                late=batch["late"],
            )
            for batch in document["change_batches"]
        ]
        self._late = [
            LateBatch(
                zone_id=late["zone_id"],
                comment=late["comment"],
                changes=_changes_from_json(late["changes"]),
                change_id=late["change_id"],
                error=late["error"],
            )
            for late in document["late_batches"]
        ]

    # -- introspection (tests, the ACM issuance check) --------------------------------------

    @property
    def change_batches(self) -> list[AppliedBatch]:
        with self._lock:
            return list(self._batches)

    @property
    def late_batches(self) -> list[LateBatch]:
        with self._lock:
            return list(self._late)

    def journal(self) -> dict[str, Any]:
        """The applied change batches and what became of the held ones, oldest first."""
        with self._lock:
            return {
                "change_batches": [batch.json for batch in self._batches],
                "late_batches": [late.to_json() for late in self._late],
            }

    def lookup(self, name: str, rtype: str) -> list[str]:
        """The values of the plain record set (no set identifier) ``name``/``rtype`` in the
        most specific public zone that holds ``name``, as a resolver would find them."""
        name = fqdn(name)
        with self._lock:
            zones = [z for z in self._zones.values() if not z.private and _in_zone(name, z.name)]
            if not zones:
                return []
            zone = max(zones, key=lambda z: len(z.name))
            rrset = zone.rrsets.get((name, rtype.upper(), None))
            return list(rrset.values) if rrset else []

    # -- requests ----------------------------------------------------------------------------

    @staticmethod
    def operation(request: Request) -> tuple[str, dict[str, str]] | None:
        """The AWS operation name of ``request`` and its path parameters."""
        for method, pattern, name in _ROUTES:
            match = pattern.match(request.path)
            if match and request.method == method:
                return name, match.groupdict()
        return None

    def handle(self, request: Request) -> Response:
        routed = self.operation(request)
        if routed is None:
            return error_response(
                404,
                "UnknownOperation",
                f"{request.method} {request.path} is not implemented by the Route53 stand-in",
            )
        name, params = routed
        handlers: dict[str, Callable[[Request, dict[str, str]], Response]] = {
            "CreateHostedZone": self._create_hosted_zone,
            "ListHostedZones": self._list_hosted_zones,
            "ListHostedZonesByName": self._list_hosted_zones_by_name,
            "GetHostedZone": self._get_hosted_zone,
            "DeleteHostedZone": self._delete_hosted_zone,
            "ChangeResourceRecordSets": self._change_resource_record_sets,
            "ListResourceRecordSets": self._list_resource_record_sets,
            "GetChange": self._get_change,
        }
        try:
            with self._lock:
                try:
                    if name == "ChangeResourceRecordSets":
                        self._land_held(params["id"])
                    return handlers[name](request, params)
                finally:
                    if name in _MUTATIONS:  # a refused batch may follow a late one that landed
                        self._save()
        except Route53Error as exc:
            return error_response(exc.status, exc.code, exc.message)

    def hold(self, request: Request, *, after: int = 1) -> None:
        """Keep the ChangeResourceRecordSets ``request`` unapplied; it lands just before the
        ``after``-th ChangeResourceRecordSets request on its zone from now on."""
        routed = self.operation(request)
        if routed is None or routed[0] != "ChangeResourceRecordSets":
            raise ValueError("only a ChangeResourceRecordSets request can be held")
        zone_id = routed[1]["id"].removeprefix("/hostedzone/")
        with self._lock:
            self._held.append(_Held(zone_id=zone_id, body=request.body, countdown=max(after, 1)))

    def discard_held(self) -> int:
        """Forget the held requests that have not landed; how many there were."""
        with self._lock:
            count = len(self._held)
            self._held.clear()
            return count

    def _land_held(self, zone_id: str) -> None:
        zone_id = zone_id.removeprefix("/hostedzone/")
        due: list[_Held] = []
        for held in self._held:
            if held.zone_id == zone_id:
                held.countdown -= 1
                if held.countdown == 0:
                    due.append(held)
        self._held = [h for h in self._held if h.countdown > 0]
        for held in due:
            comment: str | None = None
            changes: list[tuple[str, RRSet]] = []
            try:
                comment, changes = _batch(held.body)
                zone = self._zone(zone_id)
                for action, rrset in changes:
                    _check_input(action, rrset)
                change = self._apply(zone, changes, comment=comment, late=True)
            except Route53Error as exc:
                self._late.append(
                    LateBatch(zone_id, comment, tuple(changes), None, f"{exc.code}: {exc.message}")
                )
            else:
                self._late.append(LateBatch(zone_id, comment, tuple(changes), change.id, None))

    def apply_foreign(self, zone_id: str, changes: Iterable[Mapping[str, Any]]) -> str:
        """Apply a batch (boto3's ``Changes`` shape) as another writer would: the faults use
        it to race a request. Raises :class:`Route53Error` if the batch is invalid."""
        with self._lock:
            zone = self._zone(zone_id)
            parsed = [
                (str(c["Action"]).upper(), RRSet.from_wire(c["ResourceRecordSet"])) for c in changes
            ]
            change = self._apply(zone, parsed, comment="foreign writer (fault)", foreign=True)
            self._save()
            return change.id

    # -- zones -------------------------------------------------------------------------------

    def _zone(self, zone_id: str) -> HostedZone:
        zone_id = zone_id.removeprefix("/hostedzone/")
        zone = self._zones.get(zone_id)
        if zone is None:
            raise Route53Error(404, "NoSuchHostedZone", f"No hosted zone found with ID: {zone_id}")
        return zone

    def _new_change(self, comment: str | None) -> Change:
        change = Change(
            id="C" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20)),
            submitted_at=dt.datetime.now(dt.UTC),
            insync_at=time.monotonic() + self.change_delay,
            comment=comment,
        )
        self._changes[change.id] = change
        return change

    def _create_hosted_zone(self, request: Request, params: dict[str, str]) -> Response:
        body = _parse(request.body)
        name = _text(body, "Name")
        reference = _text(body, "CallerReference")
        if not name or not reference:
            raise Route53Error(400, "InvalidInput", "Name and CallerReference are required")
        if reference in self._caller_references:
            raise Route53Error(
                409,
                "HostedZoneAlreadyExists",
                "A hosted zone has already been created with the specified caller reference.",
            )
        zone_name = fqdn(name)
        if not re.fullmatch(r"([a-z0-9_-]+\.)+", zone_name.replace("\\052", "")):
            raise Route53Error(400, "InvalidDomainName", f"{name} is not a valid domain name.")
        config = body.find("HostedZoneConfig")
        zone_id = "Z" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))
        zone = HostedZone(
            id=zone_id,
            name=zone_name,
            caller_reference=reference,
            comment=_text(config, "Comment") if config is not None else None,
            private=body.find("VPC") is not None
            or (config is not None and _boolean(_text(config, "PrivateZone") or "false")),
            name_servers=_name_servers(zone_id),
        )
        for rrset in (
            RRSet(zone_name, "NS", ttl=172800, values=tuple(f"{n}." for n in zone.name_servers)),
            RRSet(
                zone_name,
                "SOA",
                ttl=900,
                values=(
                    f"{zone.name_servers[0]}. awsdns-hostmaster.amazon.com. "
                    "1 7200 900 1209600 86400",
                ),
            ),
        ):
            zone.rrsets[rrset.key] = rrset
        self._zones[zone_id] = zone
        self._caller_references[reference] = zone_id
        change = self._new_change(None)
        root = _root("CreateHostedZoneResponse")
        _zone_xml(root, zone)
        _change_xml(root, change)
        _delegation_xml(root, zone)
        response = _xml_response(201, root)
        response.headers["Location"] = f"https://route53.amazonaws.com{API}/hostedzone/{zone_id}"
        return response

    def _get_hosted_zone(self, request: Request, params: dict[str, str]) -> Response:
        zone = self._zone(params["id"])
        root = _root("GetHostedZoneResponse")
        _zone_xml(root, zone)
        _delegation_xml(root, zone)
        return _xml_response(200, root)

    def _delete_hosted_zone(self, request: Request, params: dict[str, str]) -> Response:
        zone = self._zone(params["id"])
        required = {(zone.name, "NS", None), (zone.name, "SOA", None)}
        if set(zone.rrsets) - required:
            raise Route53Error(
                400,
                "HostedZoneNotEmpty",
                "The hosted zone contains resource records that are not SOA or NS records.",
            )
        del self._zones[zone.id]
        root = _root("DeleteHostedZoneResponse")
        _change_xml(root, self._new_change(None))
        return _xml_response(200, root)

    def _ordered_zones(self) -> list[HostedZone]:
        return sorted(self._zones.values(), key=lambda z: (_sort_name(z.name), z.id))

    def _list_hosted_zones(self, request: Request, params: dict[str, str]) -> Response:
        zones = sorted(self._zones.values(), key=lambda z: z.id)
        marker = request.arg("marker")
        if marker:
            zones = [z for z in zones if z.id >= marker]
        limit = _max_items(request, 100)
        page, rest = zones[:limit], zones[limit:]
        root = _root("ListHostedZonesResponse")
        listing = _sub(root, "HostedZones")
        for zone in page:
            _zone_xml(listing, zone)
        if marker:
            _sub(root, "Marker", marker)
        _sub(root, "IsTruncated", _xml_bool(bool(rest)))
        if rest:
            _sub(root, "NextMarker", rest[0].id)
        _sub(root, "MaxItems", str(limit))
        return _xml_response(200, root)

    def _list_hosted_zones_by_name(self, request: Request, params: dict[str, str]) -> Response:
        dns_name = request.arg("dnsname")
        zone_id = request.arg("hostedzoneid")
        if zone_id and not dns_name:
            raise Route53Error(400, "InvalidInput", "hostedzoneid requires dnsname")
        zones = self._ordered_zones()
        if dns_name:
            start = (_sort_name(fqdn(dns_name)), zone_id or "")
            zones = [z for z in zones if (_sort_name(z.name), z.id) >= start]
        limit = _max_items(request, 100)
        page, rest = zones[:limit], zones[limit:]
        root = _root("ListHostedZonesByNameResponse")
        listing = _sub(root, "HostedZones")
        for zone in page:
            _zone_xml(listing, zone)
        if dns_name:
            _sub(root, "DNSName", escaped(fqdn(dns_name)))
        if zone_id:
            _sub(root, "HostedZoneId", zone_id)
        _sub(root, "IsTruncated", _xml_bool(bool(rest)))
        if rest:
            _sub(root, "NextDNSName", escaped(rest[0].name))
            _sub(root, "NextHostedZoneId", rest[0].id)
        _sub(root, "MaxItems", str(limit))
        return _xml_response(200, root)

    # -- record sets -------------------------------------------------------------------------

    def _list_resource_record_sets(self, request: Request, params: dict[str, str]) -> Response:
        zone = self._zone(params["id"])
        start_name, start_type = request.arg("name"), request.arg("type")
        start_identifier = request.arg("identifier")
        if start_type and not start_name:
            raise Route53Error(
                400, "InvalidInput", "The input is not valid: type requires name to be set"
            )
        rrsets = zone.sorted_rrsets()
        if start_name:
            start = (_sort_name(fqdn(start_name)), start_type or "", start_identifier or "")
            rrsets = [r for r in rrsets if r.sort_key() >= start]
        limit = _max_items(request, 300)
        page, rest = rrsets[:limit], rrsets[limit:]
        root = _root("ListResourceRecordSetsResponse")
        listing = _sub(root, "ResourceRecordSets")
        for rrset in page:
            rrset.to_xml(listing)
        _sub(root, "IsTruncated", _xml_bool(bool(rest)))
        if rest:
            _sub(root, "NextRecordName", escaped(rest[0].name))
            _sub(root, "NextRecordType", rest[0].type)
            if rest[0].set_identifier is not None:
                _sub(root, "NextRecordIdentifier", rest[0].set_identifier)
        _sub(root, "MaxItems", str(limit))
        return _xml_response(200, root)

    def _change_resource_record_sets(self, request: Request, params: dict[str, str]) -> Response:
        zone = self._zone(params["id"])
        comment, changes = _batch(request.body)
        for action, rrset in changes:
            _check_input(action, rrset)
        change = self._apply(zone, changes, comment=comment)
        root = _root("ChangeResourceRecordSetsResponse")
        _change_xml(root, change)
        return _xml_response(200, root)

    def _apply(
        self,
        zone: HostedZone,
        changes: list[tuple[str, RRSet]],
        *,
        comment: str | None,
        foreign: bool = False,
        late: bool = False,
    ) -> Change:
        """Validate ``changes`` in order against a working copy of the zone; commit the copy
        only if all of them are valid (Route53 applies a batch whole or not at all)."""
        work = dict(zone.rrsets)
        repeated = _repeated_sets(changes)
        errors: list[str] = [
            "The request contains an invalid set of changes for a resource record set "
            f"'{rrset.type} {escaped(rrset.name)}'"
            for rrset in repeated.values()
        ]
        for action, rrset in changes:
            if rrset.key in repeated:
                continue
            message = self._check_change(zone, work, action, rrset)
            if message:
                errors.append(message)
            elif action == "DELETE":
                del work[rrset.key]
            else:
                work[rrset.key] = rrset
        if (zone.name, "NS", None) not in work:
            errors.append("A HostedZone must contain at least one NS record for the zone itself.")
        if (zone.name, "SOA", None) not in work:
            errors.append("A HostedZone must contain exactly one SOA record.")
        if errors:
            raise Route53Error(400, "InvalidChangeBatch", "[" + ", ".join(errors) + "]")
        zone.rrsets = work
        change = self._new_change(comment)
        self._batches.append(
            AppliedBatch(
                change_id=change.id,
                zone_id=zone.id,
                comment=comment,
                changes=tuple(changes),
                submitted_at=change.submitted_at,
                foreign=foreign,
                late=late,
            )
        )
        return change

    @staticmethod
    def _check_change(
        zone: HostedZone,
        work: dict[tuple[str, str, str | None], RRSet],
        action: str,
        rrset: RRSet,
    ) -> str | None:
        """AWS's message for the first rule ``rrset`` breaks, or None."""
        if not _in_zone(rrset.name, zone.name):
            return f"RRSet with DNS name {escaped(rrset.name)} is not permitted in zone {zone.name}"
        seen: set[str] = set()
        for value in rrset.values:
            if value in seen:
                return f"Duplicate Resource Record: '{value}'"
            seen.add(value)
        if action == "DELETE":
            current = work.get(rrset.key)
            if current is None:
                return f"Tried to delete resource record set {rrset.label()} but it was not found"
            if not current.matches(rrset):
                return (
                    f"Tried to delete resource record set {rrset.label()} "
                    "but the values provided do not match the current values"
                )
            return None
        invalid = _invalid_values(rrset)
        if invalid:
            return invalid
        if action == "CREATE" and rrset.key in work:
            return f"Tried to create resource record set {rrset.label()} but it already exists"
        others = [r for r in work.values() if r.name == rrset.name and r.key != rrset.key]
        name = escaped(rrset.name)
        if rrset.type == "CNAME":
            if rrset.name == zone.name:
                return (
                    f"RRSet of type CNAME with DNS name {name} is not permitted at apex "
                    f"in zone {zone.name}"
                )
            if any(r.type != "CNAME" for r in others):
                return (
                    f"RRSet of type CNAME with DNS name {name} is not permitted as it "
                    f"conflicts with other records with the same DNS name in zone {zone.name}"
                )
        elif any(r.type == "CNAME" for r in others):
            return (
                f"RRSet of type {rrset.type} with DNS name {name} is not permitted because a "
                "conflicting RRSet of type CNAME with the same DNS name already exists in "
                f"zone {zone.name}"
            )
        return None

    def _get_change(self, request: Request, params: dict[str, str]) -> Response:
        change_id = params["id"].removeprefix("/change/")
        change = self._changes.get(change_id)
        if change is None:
            raise Route53Error(
                404,
                "NoSuchChange",
                f"A change with the specified change ID does not exist: {change_id}",
            )
        root = _root("GetChangeResponse")
        _change_xml(root, change)
        return _xml_response(200, root)


def _repeated_sets(changes: list[tuple[str, RRSet]]) -> dict[tuple[str, str, str | None], RRSet]:
    """The record sets a batch changes more than once, other than DELETE then CREATE."""
    actions: dict[tuple[str, str, str | None], list[str]] = {}
    first: dict[tuple[str, str, str | None], RRSet] = {}
    for action, rrset in changes:
        actions.setdefault(rrset.key, []).append(action)
        first.setdefault(rrset.key, rrset)
    return {
        key: first[key]
        for key, done in actions.items()
        if len(done) > 1 and done != ["DELETE", "CREATE"]
    }


# -- request parsing ---------------------------------------------------------------------------


def _parse(body: bytes) -> ET.Element:
    try:
        root = ET.fromstring(body or b"<empty/>")  # noqa: S314 - loopback test clients only
    except ET.ParseError as exc:
        raise Route53Error(400, "MalformedInput", f"The XML document is malformed: {exc}") from exc
    for node in root.iter():  # drop the namespace: {ns}Name -> Name
        if isinstance(node.tag, str) and "}" in node.tag:
            node.tag = node.tag.split("}", 1)[1]
    return root


def _batch(body: bytes) -> tuple[str | None, list[tuple[str, RRSet]]]:
    """The Comment and the changes of a ChangeResourceRecordSets request body."""
    batch = _parse(body).find("ChangeBatch")
    if batch is None:
        raise Route53Error(400, "InvalidInput", "ChangeBatch is required")
    changes = [
        (_text(node, "Action") or "", _rrset_from_xml(node.find("ResourceRecordSet")))
        for node in batch.iterfind("Changes/Change")
    ]
    if not changes:
        raise Route53Error(400, "InvalidInput", "ChangeBatch.Changes must not be empty")
    return _text(batch, "Comment"), changes


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _boolean(value: object) -> bool:
    return value is True or str(value).strip().lower() == "true"


def _rrset_from_xml(node: ET.Element | None) -> RRSet:
    if node is None:
        raise Route53Error(400, "InvalidInput", "Change.ResourceRecordSet is required")
    wire: dict[str, Any] = {}
    for child in node:
        if child.tag == "ResourceRecords":
            wire["ResourceRecords"] = [
                {"Value": _text(r, "Value") or ""} for r in child.iterfind("ResourceRecord")
            ]
        elif child.tag == "AliasTarget":
            wire["AliasTarget"] = {
                "HostedZoneId": _text(child, "HostedZoneId") or "",
                "DNSName": _text(child, "DNSName") or "",
                "EvaluateTargetHealth": _text(child, "EvaluateTargetHealth") or "false",
            }
        else:  # Name, Type, TTL, SetIdentifier and every routing member, nested or not
            wire[child.tag] = _xml_member(child)
    if "Name" not in wire or "Type" not in wire:
        raise Route53Error(400, "InvalidInput", "ResourceRecordSet requires Name and Type")
    try:
        return RRSet.from_wire(wire)
    except ValueError as exc:
        raise Route53Error(400, "InvalidInput", f"Invalid ResourceRecordSet: {exc}") from exc


def _xml_member(node: ET.Element) -> Any:
    if len(node):
        return {child.tag: _xml_member(child) for child in node}
    return (node.text or "").strip()


def _check_input(action: str, rrset: RRSet) -> None:
    """The request-shape rules Route53 enforces before looking at the zone (InvalidInput)."""
    where = (
        f"Change with [Action={action}, Name={escaped(rrset.name)}, Type={rrset.type}, "
        f"SetIdentifier={rrset.set_identifier or 'null'}]"
    )
    if action not in ACTIONS:
        raise Route53Error(400, "InvalidInput", f"Invalid action {action!r} in {where}")
    if rrset.type not in RECORD_TYPES:
        raise Route53Error(400, "InvalidInput", f"Invalid type {rrset.type!r} in {where}")
    has_alias = rrset.alias is not None
    has_plain = rrset.ttl is not None or bool(rrset.values)
    has_policy = TRAFFIC_POLICY in dict(rrset.routing)
    kinds = int(has_alias) + int(has_plain) + int(has_policy)
    if kinds != 1 or (has_plain and (rrset.ttl is None or not rrset.values)):
        found = "more than one" if kinds > 1 else "none"
        raise Route53Error(
            400,
            "InvalidInput",
            "Invalid request: Expected exactly one of [AliasTarget, all of [TTL, and "
            f"ResourceRecords], or TrafficPolicyInstanceId], but found {found} in {where}",
        )
    if rrset.alias is not None and rrset.type not in ALIAS_TYPES:
        raise Route53Error(
            400, "InvalidInput", f"Alias records are not supported for type {rrset.type}"
        )


def _invalid_values(rrset: RRSet) -> str | None:
    checks = {
        "A": (ipaddress.IPv4Address, "ARRDATAIllegalIPv4Address", "IPv4"),
        "AAAA": (ipaddress.IPv6Address, "AAAARRDATAIllegalIPv6Address", "IPv6"),
    }
    if rrset.type not in checks:
        return None
    parse, code, family = checks[rrset.type]
    for value in rrset.values:
        try:
            parse(value)
        except ValueError:
            return (
                f"Invalid Resource Record: 'FATAL problem: {code} (Value is not a valid "
                f"{family} address) encountered with '{value}''"
            )
    return None


def _max_items(request: Request, default: int) -> int:
    raw = request.arg("maxitems")
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise Route53Error(400, "InvalidInput", f"Invalid maxitems: {raw}")
    return min(int(raw), default)


# -- response building -------------------------------------------------------------------------


def _root(tag: str) -> ET.Element:
    return ET.Element(tag, xmlns=NS)


def _sub(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    node = ET.SubElement(parent, tag)
    if text is not None:
        node.text = text
    return node


def _xml_bool(value: bool) -> str:
    return "true" if value else "false"


def _xml_response(status: int, root: ET.Element) -> Response:
    body = b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")
    return Response(status, body, {"Content-Type": "text/xml", "x-amzn-RequestId": _request_id()})


def error_response(status: int, code: str, message: str, *, sender: bool = True) -> Response:
    root = _root("ErrorResponse")
    node = _sub(root, "Error")
    _sub(node, "Type", "Sender" if sender else "Receiver")
    _sub(node, "Code", code)
    _sub(node, "Message", message)
    _sub(root, "RequestId", _request_id())
    return _xml_response(status, root)


def _request_id() -> str:
    return str(uuid.uuid4())


def _zone_xml(parent: ET.Element, zone: HostedZone) -> None:
    node = _sub(parent, "HostedZone")
    _sub(node, "Id", f"/hostedzone/{zone.id}")
    _sub(node, "Name", escaped(zone.name))
    _sub(node, "CallerReference", zone.caller_reference)
    config = _sub(node, "Config")
    if zone.comment:
        _sub(config, "Comment", zone.comment)
    _sub(config, "PrivateZone", _xml_bool(zone.private))
    _sub(node, "ResourceRecordSetCount", str(len(zone.rrsets)))


def _change_xml(parent: ET.Element, change: Change) -> None:
    node = _sub(parent, "ChangeInfo")
    _sub(node, "Id", f"/change/{change.id}")
    _sub(node, "Status", change.status())
    _sub(node, "SubmittedAt", change.submitted_at.isoformat(timespec="milliseconds")[:-6] + "Z")
    if change.comment:
        _sub(node, "Comment", change.comment)


def _delegation_xml(parent: ET.Element, zone: HostedZone) -> None:
    servers = _sub(_sub(parent, "DelegationSet"), "NameServers")
    for server in zone.name_servers:
        _sub(servers, "NameServer", server)


def _name_servers(zone_id: str) -> list[str]:
    """Four name servers in four TLDs, stable for a zone id, shaped like Route53's."""
    digest = hashlib.sha256(zone_id.encode()).digest()
    servers = []
    for i, tld in enumerate(("com", "net", "org", "co.uk")):
        number = int.from_bytes(digest[2 * i : 2 * i + 2], "big") % 2048
        servers.append(f"ns-{number}.awsdns-{digest[8 + i] % 64:02d}.{tld}")
    return servers

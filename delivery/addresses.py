"""Which network addresses a webhook may be sent to: an allow-list, not a deny-list.

An address is **globally reachable** when it lies in the unicast space (IPv4 outside
``224.0.0.0/4``; IPv6 in ``2000::/3``, the global unicast block, or NAT64's well-known
``64:ff9b::/96``) and the most specific entry of the IANA special-purpose registries that
holds it (the tables below, copied from the registries as of 2025) does not say "not globally
reachable". Anything the tables do not name inside that space is ordinary global unicast; any
address outside it (``fec0::/10``, ``::ffff:0:0:0/96``, multicast, whatever IANA assigns
there next) is refused. A deny-list misses what nobody thought of; this misses nothing new.

An IPv6 address that carries an IPv4 address to an IPv4 host — IPv4-mapped, SIIT's
IPv4-translated, the old IPv4-compatible form, NAT64 (well-known and local-use), 6to4 and
Teredo — is also judged by every IPv4 address it embeds: a translator or a tunnel relays the
connection there (``64:ff9b::a9fe:a9fe`` is 169.254.169.254 behind NAT64). The registries mark
6to4 and Teredo "N/A": they are taken exactly when every IPv4 address they embed is.

``ALFRED_WEBHOOK_ALLOW_PRIVATE`` (``make run``, the tests' local receivers) relaxes this to
"anything but link-local, multicast, unspecified and a cloud's metadata address": those never,
in any setting, directly or embedded.

The relay checks every address a host name resolves to just before it connects, and connects
to the address it checked (``delivery.relay``); a URL's IP literal is checked when it is saved.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ValidationError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# IANA IPv4 Special-Purpose Address Registry: (prefix, globally reachable).
IPV4_SPECIAL: tuple[tuple[str, bool], ...] = (
    ("0.0.0.0/8", False),  # "this network" (RFC 791)
    ("0.0.0.0/32", False),  # "this host on this network"
    ("10.0.0.0/8", False),  # private-use (RFC 1918)
    ("100.64.0.0/10", False),  # shared address space, carrier-grade NAT (RFC 6598)
    ("127.0.0.0/8", False),  # loopback
    ("169.254.0.0/16", False),  # link-local: cloud instance metadata (RFC 3927)
    ("172.16.0.0/12", False),  # private-use
    ("192.0.0.0/24", False),  # IETF protocol assignments (RFC 6890)
    ("192.0.0.0/29", False),  # IPv4 service continuity prefix (RFC 7335)
    ("192.0.0.8/32", False),  # IPv4 dummy address (RFC 7600)
    ("192.0.0.9/32", True),  # Port Control Protocol anycast (RFC 7723)
    ("192.0.0.10/32", True),  # Traversal Using Relays around NAT anycast (RFC 8155)
    ("192.0.0.170/32", False),  # NAT64/DNS64 discovery (RFC 7050)
    ("192.0.0.171/32", False),  # NAT64/DNS64 discovery
    ("192.0.2.0/24", False),  # documentation, TEST-NET-1 (RFC 5737)
    ("192.31.196.0/24", True),  # AS112-v4 (RFC 7535)
    ("192.52.193.0/24", True),  # AMT (RFC 7450)
    ("192.88.99.0/24", False),  # deprecated 6to4 relay anycast (RFC 7526)
    ("192.168.0.0/16", False),  # private-use
    ("192.175.48.0/24", True),  # direct delegation AS112 service (RFC 7534)
    ("198.18.0.0/15", False),  # benchmarking (RFC 2544)
    ("198.51.100.0/24", False),  # documentation, TEST-NET-2
    ("203.0.113.0/24", False),  # documentation, TEST-NET-3
    ("240.0.0.0/4", False),  # reserved (RFC 1112)
    ("255.255.255.255/32", False),  # limited broadcast (RFC 919)
)

# IANA IPv6 Special-Purpose Address Registry: (prefix, globally reachable); None is the
# registry's "N/A" (6to4, Teredo): decided by the IPv4 addresses they embed.
IPV6_SPECIAL: tuple[tuple[str, bool | None], ...] = (
    ("::1/128", False),  # loopback
    ("::/128", False),  # unspecified
    ("::ffff:0:0/96", False),  # IPv4-mapped (RFC 4291)
    ("64:ff9b::/96", True),  # IPv4-IPv6 translation, NAT64's well-known prefix (RFC 6052)
    ("64:ff9b:1::/48", False),  # IPv4-IPv6 translation, local use (RFC 8215)
    ("100::/64", False),  # discard-only (RFC 6666)
    ("100:0:0:1::/64", False),  # dummy IPv6 prefix (RFC 9780)
    ("2001::/23", False),  # IETF protocol assignments (RFC 2928)
    ("2001::/32", None),  # Teredo (RFC 4380)
    ("2001:1::1/128", True),  # Port Control Protocol anycast (RFC 7723)
    ("2001:1::2/128", True),  # TURN anycast (RFC 8155)
    ("2001:1::3/128", True),  # DNS-SD service registration protocol anycast (RFC 9665)
    ("2001:2::/48", False),  # benchmarking (RFC 5180)
    ("2001:3::/32", True),  # AMT (RFC 7450)
    ("2001:4:112::/48", True),  # AS112-v6 (RFC 7535)
    ("2001:10::/28", False),  # deprecated ORCHID (RFC 4843)
    ("2001:20::/28", True),  # ORCHIDv2 (RFC 7343)
    ("2001:30::/28", True),  # drone remote ID protocol entity tags (RFC 9374)
    ("2001:db8::/32", False),  # documentation (RFC 3849)
    ("2002::/16", None),  # 6to4 (RFC 3056)
    ("2620:4f:8000::/48", True),  # direct delegation AS112 service (RFC 7534)
    ("3fff::/20", False),  # documentation (RFC 9637)
    ("5f00::/16", False),  # segment routing (SRv6) SIDs (RFC 9602)
    ("fc00::/7", False),  # unique-local (RFC 4193)
    ("fe80::/10", False),  # link-local unicast (RFC 4291)
)

# Where globally reachable unicast may lie at all: whatever is outside is refused.
_MULTICAST_V4 = ipaddress.IPv4Network("224.0.0.0/4")
_UNICAST_V6 = (ipaddress.IPv6Network("2000::/3"), ipaddress.IPv6Network("64:ff9b::/96"))

# Never, whatever the settings: besides link-local (169.254.169.254 and friends), the cloud
# metadata services that answer on a unique-local address (AWS's IMDS over IPv6).
_METADATA_ADDRESSES = frozenset({ipaddress.IPv6Address("fd00:ec2::254")})


def _table(rows: Iterable[tuple[str, bool | None]]) -> list[tuple[Network, bool | None]]:
    """Most specific prefix first, so the first that holds an address is its entry."""
    parsed = [(ipaddress.ip_network(prefix), reachable) for prefix, reachable in rows]
    return sorted(parsed, key=lambda row: -row[0].prefixlen)


_V4 = _table(IPV4_SPECIAL)
_V6 = _table(IPV6_SPECIAL)

# IPv6 forms that carry an IPv4 address, besides those the ipaddress module unwraps itself
# (IPv4-mapped, 6to4, Teredo).
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")  # IPv4-translated (RFC 6145)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a connection to ``address`` may end at: a translator or a tunnel
    relays it there, so each is judged as if it were the target."""
    packed = address.packed
    found = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address in _NAT64 or address in _IPV4_COMPATIBLE or address in _SIIT:
        found.append(ipaddress.IPv4Address(packed[12:]))
    if address in _NAT64_LOCAL:  # a /48 prefix: the IPv4 sits around the zero "u" octet
        found.append(ipaddress.IPv4Address(packed[6:8] + packed[9:11]))
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)  # its server and its client
    return found


def globally_reachable(address: Address) -> bool:
    """Whether ``address`` itself is globally reachable unicast by the registries (its
    embedded IPv4 addresses aside; an "N/A" entry counts as reachable here)."""
    if isinstance(address, ipaddress.IPv4Address):
        if address in _MULTICAST_V4:
            return False
        table = _V4
    else:
        if not any(address in network for network in _UNICAST_V6):
            return False
        table = _V6
    for network, reachable in table:
        if address in network:
            return reachable is not False
    return True


def _never(address: Address) -> bool:
    return (
        address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or address in _METADATA_ADDRESSES
    )


def address_check(address: Address) -> None:
    """ValidationError when Alfred may not connect to ``address`` for a webhook: the address
    and every IPv4 address it embeds must be globally reachable unicast (or, with
    ALFRED_WEBHOOK_ALLOW_PRIVATE, at least not link-local, multicast, unspecified or a
    metadata service)."""
    embedded = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else []
    for each in (address, *embedded):
        named = str(address) if each == address else f"{address} (to {each})"
        if _never(each):
            raise ValidationError(
                f"{named}: link-local, multicast, unspecified and metadata addresses are refused"
            )
        if not settings.ALFRED_WEBHOOK_ALLOW_PRIVATE and not globally_reachable(each):
            raise ValidationError(
                f"{named}: not a globally reachable unicast address (a loopback, private or "
                "reserved one needs ALFRED_WEBHOOK_ALLOW_PRIVATE)"
            )

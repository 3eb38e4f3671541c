"""The webhook allow-list over the IANA special-purpose registries: every registry prefix, its
first and last address, and the IPv6 forms that carry an IPv4 address, each written out here
with the answer expected (not computed from ``delivery.addresses``' own tables)."""

from __future__ import annotations

import ipaddress

import pytest
from django.core.exceptions import ValidationError

from delivery.addresses import IPV4_SPECIAL, IPV6_SPECIAL, address_check, embedded_ipv4

# (address, taken in production). Each registry prefix by its first and its last address,
# where a more specific entry does not hold them.
PRODUCTION = [
    # IPv4 special-purpose registry
    ("0.0.0.0", False),  # noqa: S104 (a literal, not a bind)
    ("0.255.255.255", False),
    ("10.0.0.0", False),
    ("10.255.255.255", False),
    ("100.64.0.0", False),
    ("100.127.255.255", False),
    ("127.0.0.1", False),
    ("127.255.255.255", False),
    ("169.254.0.0", False),
    ("169.254.169.254", False),
    ("172.16.0.0", False),
    ("172.31.255.255", False),
    ("192.0.0.0", False),
    ("192.0.0.7", False),
    ("192.0.0.8", False),
    ("192.0.0.9", True),  # PCP anycast: globally reachable
    ("192.0.0.10", True),  # TURN anycast
    ("192.0.0.11", False),
    ("192.0.0.170", False),
    ("192.0.0.171", False),
    ("192.0.0.255", False),
    ("192.0.2.0", False),
    ("192.0.2.255", False),
    ("192.31.196.0", True),  # AS112-v4
    ("192.31.196.255", True),
    ("192.52.193.0", True),  # AMT
    ("192.52.193.255", True),
    ("192.88.99.0", False),
    ("192.88.99.255", False),
    ("192.168.0.0", False),
    ("192.168.255.255", False),
    ("192.175.48.0", True),  # direct delegation AS112
    ("192.175.48.255", True),
    ("198.18.0.0", False),
    ("198.19.255.255", False),
    ("198.51.100.0", False),
    ("198.51.100.255", False),
    ("203.0.113.0", False),
    ("203.0.113.255", False),
    ("240.0.0.0", False),
    ("255.255.255.254", False),
    ("255.255.255.255", False),
    # multicast (its own registry: never unicast)
    ("224.0.0.1", False),
    ("239.255.255.255", False),
    # ordinary global unicast, on either side of the special blocks
    ("8.8.8.8", True),
    ("1.1.1.1", True),
    ("100.63.255.255", True),
    ("100.128.0.0", True),
    ("172.15.255.255", True),
    ("172.32.0.0", True),
    ("198.17.255.255", True),
    ("198.20.0.0", True),
    ("223.255.255.255", True),
    # IPv6 special-purpose registry
    ("::1", False),
    ("::", False),
    ("::ffff:0:0", False),
    ("::ffff:8.8.8.8", False),  # IPv4-mapped: not reachable as such, even to a global IPv4
    ("::ffff:0:a9fe:a9fe", False),  # SIIT-translated 169.254.169.254 (the issue's)
    ("::ffff:0:a00:1", False),  # SIIT-translated 10.0.0.1 (the issue's)
    ("::ffff:0:808:808", False),  # SIIT-translated 8.8.8.8: outside the unicast space
    ("64:ff9b::808:808", True),  # NAT64 to 8.8.8.8
    ("64:ff9b::a9fe:a9fe", False),  # NAT64 to 169.254.169.254
    ("64:ff9b::a00:1", False),  # NAT64 to 10.0.0.1
    ("64:ff9b:1::", False),
    ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", False),
    ("100::", False),
    ("100::ffff:ffff:ffff:ffff", False),
    ("100:0:0:1::", False),
    ("2001::", False),  # Teredo with server and client 0.0.0.0 / 255.255.255.255
    ("2001:0:808:808:0:0:f7f7:f7f7", True),  # Teredo, server and client 8.8.8.8
    ("2001:0:4136:e378:8000:63bf:5601:5601", False),  # Teredo, client 169.254.169.254
    ("2001:1::1", True),  # PCP anycast
    ("2001:1::2", True),  # TURN anycast
    ("2001:1::3", True),  # DNS-SD SRP anycast
    ("2001:1::4", False),
    ("2001:2::", False),
    ("2001:2:0:ffff:ffff:ffff:ffff:ffff", False),
    ("2001:3::", True),  # AMT
    ("2001:3:ffff:ffff:ffff:ffff:ffff:ffff", True),
    ("2001:4:112::", True),  # AS112-v6
    ("2001:4:112:ffff:ffff:ffff:ffff:ffff", True),
    ("2001:10::", False),
    ("2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("2001:20::", True),  # ORCHIDv2
    ("2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", True),
    ("2001:30::", True),  # DRIP
    ("2001:3f:ffff:ffff:ffff:ffff:ffff:ffff", True),
    ("2001:40::", False),  # rest of 2001::/23
    ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("2001:db8::", False),
    ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("2002:808:808::1", True),  # 6to4 of 8.8.8.8
    ("2002:a9fe:a9fe::1", False),  # 6to4 of 169.254.169.254
    ("2002:7f00:1::1", False),  # 6to4 of 127.0.0.1
    ("2002::", False),  # 6to4 of 0.0.0.0
    ("2620:4f:8000::", True),  # direct delegation AS112
    ("2620:4f:8000:ffff:ffff:ffff:ffff:ffff", True),
    ("3fff::", False),
    ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("5f00::", False),  # SRv6 SIDs (the issue's)
    ("5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("fc00::", False),
    ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("fd00:ec2::254", False),
    ("fe80::", False),
    ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    # outside the IPv6 unicast space: refused though no registry entry names them
    ("fec0::1", False),  # deprecated site-local (the issue's)
    ("ff02::1", False),  # multicast
    ("4000::1", False),  # unassigned
    ("::a9fe:a9fe", False),  # IPv4-compatible
    # ordinary global unicast
    ("2606:4700:4700::1111", True),
    ("2a00:1450:4001::1", True),
    ("2001:200::1", True),  # just past 2001::/23
    ("3ffe::1", True),
    ("3fff:1000::", True),  # just past 3fff::/20
]

# With ALFRED_WEBHOOK_ALLOW_PRIVATE: loopback and private are taken; link-local, multicast,
# unspecified and metadata addresses never, directly or embedded.
ALLOW_PRIVATE = [
    ("127.0.0.1", True),
    ("10.0.0.1", True),
    ("::1", True),
    ("fc00::1", True),
    ("169.254.169.254", False),
    ("fe80::1", False),
    ("224.0.0.1", False),
    ("ff02::1", False),
    ("0.0.0.0", False),  # noqa: S104 (a literal, not a bind)
    ("::", False),
    ("fd00:ec2::254", False),  # AWS's instance metadata over IPv6
    ("::ffff:0:a9fe:a9fe", False),
    ("::ffff:169.254.169.254", False),
    ("64:ff9b::a9fe:a9fe", False),
    ("2002:a9fe:a9fe::1", False),
]


@pytest.mark.parametrize(("literal", "taken"), PRODUCTION)
def test_production_takes_only_globally_reachable_unicast(settings, literal, taken):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    address = ipaddress.ip_address(literal)
    if taken:
        address_check(address)
    else:
        with pytest.raises(ValidationError):
            address_check(address)


@pytest.mark.parametrize(("literal", "taken"), ALLOW_PRIVATE)
def test_allow_private_still_refuses_link_local_multicast_and_metadata(settings, literal, taken):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True
    address = ipaddress.ip_address(literal)
    if taken:
        address_check(address)
    else:
        with pytest.raises(ValidationError, match="link-local, multicast"):
            address_check(address)


def test_every_registry_prefix_is_exercised():
    """The sample list covers each registry entry: an entry added to the tables without a
    case here fails."""
    samples = [ipaddress.ip_address(literal) for literal, _ in PRODUCTION]
    for prefix, _ in (*IPV4_SPECIAL, *IPV6_SPECIAL):
        network = ipaddress.ip_network(prefix)
        assert any(sample in network for sample in samples), prefix


@pytest.mark.parametrize(
    ("literal", "embedded"),
    [
        ("::ffff:169.254.169.254", ["169.254.169.254"]),
        ("::ffff:0:a9fe:a9fe", ["169.254.169.254"]),
        ("::ffff:0:a00:1", ["10.0.0.1"]),
        ("64:ff9b::a00:1", ["10.0.0.1"]),
        ("64:ff9b:1:a9fe:a9:fe00::", ["169.254.169.254"]),
        ("::a9fe:a9fe", ["169.254.169.254"]),
        ("2002:a9fe:a9fe::1", ["169.254.169.254"]),
        ("2001:0:4136:e378:8000:63bf:5601:5601", ["65.54.227.120", "169.254.169.254"]),
        ("2606:4700:4700::1111", []),
    ],
)
def test_every_embedding_is_unwrapped(literal, embedded):
    found = embedded_ipv4(ipaddress.IPv6Address(literal))
    assert [str(each) for each in found] == embedded


def test_the_refusal_names_the_embedded_address(settings):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(ValidationError) as refused:
        address_check(ipaddress.ip_address("64:ff9b::a00:1"))
    assert refused.value.messages == [
        "64:ff9b::a00:1 (to 10.0.0.1): not a globally reachable unicast address (a loopback, "
        "private or reserved one needs ALFRED_WEBHOOK_ALLOW_PRIVATE)"
    ]

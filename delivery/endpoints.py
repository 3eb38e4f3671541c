"""Webhook endpoints: where Alfred may send signed events, and their signing secrets.

A URL must be ``https://`` (``http://`` only outside production) and carry no credentials. It
never aims at a link-local or metadata address (``169.254.0.0/16``, ``fe80::/10``: the cloud
instance-metadata service), nor, unless ``ALFRED_WEBHOOK_ALLOW_PRIVATE`` (on under
``make run``, off in production), at a loopback, private or otherwise reserved address.
Well-known metadata host names are refused too. Host names are not resolved at save time (DNS
can change after the save): the relay checks every address it is about to connect to with
``address_check`` and connects to the address it checked.

A secret is generated here (Standard Webhooks ``whsec_`` + base64 of 32 random bytes),
returned once to whoever created or rotated it, and never shown again. A rotation keeps the
old secret signing beside the new one for ``ROTATION_OVERLAP`` (receivers roll over without
a gap: Standard Webhooks sends space-separated signatures and a receiver accepts any)."""

from __future__ import annotations

import base64
import ipaddress
import re
import secrets
from collections.abc import Iterable
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from alfred.principals import Caller
from alfred.readonly import writes_allowed
from engine.models import AuditEntry, WebhookEndpoint

ROTATION_OVERLAP = timedelta(hours=24)
# An event type an endpoint may ask for: lower-case words joined by dots (execution.failed).
EVENT_TYPE_RE = re.compile(r"[a-z][a-z_]{0,40}(?:\.[a-z][a-z_]{0,40}){0,3}")

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# Cloud instance-metadata services by name (their addresses are link-local, refused below).
_METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)


def webhook_secret_new() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


# IPv6 forms that carry an IPv4 address to an IPv4 host (besides IPv4-mapped, which the ipaddress
# module unwraps itself): NAT64's well-known prefix and its local-use one (RFC 6052, RFC 8215),
# and the deprecated IPv4-compatible form. 6to4 (2002::/16) and Teredo (2001::/32) are
# unwrapped by ``sixtofour`` and ``teredo``.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a connection to ``address`` may end at: a translator or a tunnel
    relays it there, so each is checked as if it were the target (``64:ff9b::a9fe:a9fe`` is
    169.254.169.254 behind NAT64)."""
    packed = address.packed
    found = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address in _NAT64 or address in _IPV4_COMPATIBLE:
        found.append(ipaddress.IPv4Address(packed[12:]))
    if address in _NAT64_LOCAL:  # a /48 prefix: the IPv4 sits around the zero "u" octet
        found.append(ipaddress.IPv4Address(packed[6:8] + packed[9:11]))
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)  # its server and its client
    return found


def address_check(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """ValidationError when Alfred may not connect to ``address`` for a webhook: the address
    itself and every IPv4 address it embeds must pass."""
    embedded = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else []
    for each in (address, *embedded):
        _one_address_check(each, shown=address)


def _one_address_check(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    shown: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    named = str(shown) if address == shown else f"{shown} (to {address})"
    if address.is_link_local or address.is_multicast or address.is_unspecified:
        raise ValidationError(f"{named}: link-local, multicast and unspecified are refused")
    if not address.is_global and not settings.ALFRED_WEBHOOK_ALLOW_PRIVATE:
        raise ValidationError(
            f"{named}: a loopback, private or reserved address needs ALFRED_WEBHOOK_ALLOW_PRIVATE"
        )


def endpoint_url_check(url: str) -> None:
    """ValidationError when ``url`` may not receive Alfred's events."""
    parts = urlsplit(url)
    allowed = {"https"} if settings.PRODUCTION else {"https", "http"}
    if parts.scheme not in allowed:
        raise ValidationError(f"the URL must use {' or '.join(sorted(allowed))}")
    if parts.username or parts.password:
        raise ValidationError("the URL must not carry credentials")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise ValidationError("the URL has no host")
    if host in _METADATA_NAMES:
        raise ValidationError("an instance-metadata service is never a webhook endpoint")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host in _LOOPBACK_NAMES and not settings.ALFRED_WEBHOOK_ALLOW_PRIVATE:
            raise ValidationError("a loopback host needs ALFRED_WEBHOOK_ALLOW_PRIVATE") from None
        return
    address_check(address)


def webhook_endpoint_save(
    endpoint: WebhookEndpoint, *, caller: Caller, changed: Iterable[str] = ()
) -> str | None:
    """Check and save ``endpoint``, with its audit entry in the same transaction; a new one
    gets a secret, returned (the only time). ``changed``: the fields an update set."""
    writes_allowed()
    endpoint_url_check(endpoint.url)
    created = endpoint._state.adding
    secret = webhook_secret_new() if created else None
    if secret is not None:
        endpoint.secret = secret
    # Not durable: the admin's add and change pages run their save in a transaction of their
    # own (which this joins: the row and its audit entry still commit together).
    with transaction.atomic():
        if created:
            endpoint.save()
            _audit(caller, "webhook.create", endpoint.pk, url=endpoint.url)
            return secret
        # Never the secrets: a rotation landing between the form's read and this save stays.
        if endpoint.active:
            endpoint.disabled_reason = ""
        endpoint.save(
            update_fields=[
                "url",
                "description",
                "event_types",
                "active",
                "disabled_reason",
                "updated_at",
            ]
        )
        _audit(caller, "webhook.update", endpoint.pk, fields=sorted(changed))
    return None


def webhook_secret_rotate(endpoint_id: str, *, caller: Caller, reason: str = "") -> str:
    """A new secret (returned, the only time); the current one keeps signing beside it for
    ``ROTATION_OVERLAP``. Rotating again within the overlap retires the oldest at once."""
    writes_allowed()
    secret = webhook_secret_new()
    with transaction.atomic(durable=True):
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint_id)
        endpoint.previous_secret = endpoint.secret
        endpoint.previous_secret_expires_at = timezone.now() + ROTATION_OVERLAP
        endpoint.secret = secret
        endpoint.save(
            update_fields=["secret", "previous_secret", "previous_secret_expires_at", "updated_at"]
        )
        _audit(caller, "webhook.rotate_secret", endpoint.pk, reason=reason)
    return secret


def endpoint_secrets(endpoint: WebhookEndpoint) -> list[str]:
    """The secrets that sign a delivery now: the current one, and the one before it while its
    overlap lasts."""
    current = [endpoint.secret]
    expires = endpoint.previous_secret_expires_at
    if endpoint.previous_secret and expires is not None and expires > timezone.now():
        current.append(endpoint.previous_secret)
    return current


def webhook_endpoint_delete(endpoint_id: str, *, caller: Caller) -> bool:
    """Delete the endpoint and what it is owed (its deliveries and their log), audited.
    Not durable, as the save: the admin's delete page runs in a transaction of its own."""
    writes_allowed()
    with transaction.atomic():
        url = WebhookEndpoint.objects.filter(pk=endpoint_id).values_list("url", flat=True).first()
        if url is None:
            return False
        WebhookEndpoint.objects.filter(pk=endpoint_id).delete()
        _audit(caller, "webhook.delete", endpoint_id, url=url)
    return True


def _audit(
    caller: Caller, action: str, endpoint_id: str, *, reason: str = "", **data: object
) -> None:
    """An operator's change to an endpoint, in the audit log (never a secret), written in the
    change's transaction."""
    AuditEntry.objects.create(
        actor=caller.principal,
        action=action,
        target_type="webhook_endpoint",
        target_id=endpoint_id,
        reason=reason,
        data={"actor_name": caller.name, **data},
    )

"""Webhook endpoints: where Alfred may send signed events, and their signing secrets.

A URL must be ``https://`` (``http://`` only outside production), carry no credentials, and
not aim at a link-local or metadata address (``169.254.0.0/16``, ``fe80::/10``: the cloud
instance-metadata service) ever, nor at a loopback, private or otherwise reserved address
unless the endpoint says ``allow_private``. Well-known metadata host names are refused too.
Other host names are not resolved here (DNS can change after the save, and may not answer
now): whatever delivers events must check the address it actually connects to.

A secret is generated here (Standard Webhooks ``whsec_`` + base64 of 24 random bytes),
returned once to whoever created or rotated it, and never shown again."""

from __future__ import annotations

import base64
import ipaddress
import secrets
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from alfred.readonly import writes_allowed
from executions.models import WebhookEndpoint

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
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def endpoint_url_check(url: str, *, allow_private: bool) -> None:
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
        if host in _LOOPBACK_NAMES and not allow_private:
            raise ValidationError("a loopback host needs allow_private") from None
        return
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_link_local or address.is_multicast or address.is_unspecified:
        raise ValidationError("link-local, multicast and unspecified addresses are refused")
    if not address.is_global and not allow_private:
        raise ValidationError("a loopback, private or reserved address needs allow_private")


def webhook_endpoint_save(endpoint: WebhookEndpoint) -> str | None:
    """Check and save ``endpoint``; a new one gets a secret, returned (the only time)."""
    writes_allowed()
    endpoint_url_check(endpoint.url, allow_private=endpoint.allow_private)
    created = endpoint._state.adding
    secret = webhook_secret_new() if created else None
    if secret is not None:
        endpoint.secret = secret
    if created:
        endpoint.save()
    else:
        # Never the secret: a rotation landing between the form's read and this save stays.
        endpoint.save(
            update_fields=["url", "description", "event_types", "active", "allow_private"]
        )
    return secret


def webhook_secret_rotate(endpoint_id: str) -> str:
    writes_allowed()
    secret = webhook_secret_new()
    with transaction.atomic():
        WebhookEndpoint.objects.filter(pk=endpoint_id).update(secret=secret)
    return secret

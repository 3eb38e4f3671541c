"""Webhook endpoints: where Alfred may send signed events, and their signing secrets.

A URL must be ``https://`` (``http://`` only outside production), carry no credentials and,
if it names a port, one from 1 to 65535: whatever is saved here can be sent to. An IP literal
must be one ``delivery.addresses`` allows (globally reachable unicast, or with
``ALFRED_WEBHOOK_ALLOW_PRIVATE`` — on under ``make run``, off in production — anything but
link-local, multicast and metadata addresses); well-known metadata host names are refused too.
Host names are not resolved at save time (DNS can change after the save): the relay checks
every address it is about to connect to with ``address_check`` and connects to the address it
checked.

A secret is generated here (Standard Webhooks ``whsec_`` + base64 of 32 random bytes),
returned once to whoever created or rotated it, and never shown again. A rotation keeps the
old secret signing beside the new one for ``ROTATION_OVERLAP`` (receivers roll over without
a gap: Standard Webhooks sends space-separated signatures and a receiver accepts any)."""

from __future__ import annotations

import base64
import ipaddress
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
from delivery.addresses import address_check
from executions.models import AuditEntry, WebhookEndpoint

ROTATION_OVERLAP = timedelta(hours=24)

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# Cloud instance-metadata services by name (their addresses are refused by delivery.addresses).
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


def endpoint_url_check(url: str) -> None:
    """ValidationError when ``url`` may not receive Alfred's events."""
    parts = urlsplit(url)
    allowed = {"https"} if settings.PRODUCTION else {"https", "http"}
    if parts.scheme not in allowed:
        raise ValidationError(f"the URL must use {' or '.join(sorted(allowed))}")
    if parts.username or parts.password:
        raise ValidationError("the URL must not carry credentials")
    try:
        port = parts.port  # None when the URL names none
    except ValueError:  # out of range or not a number: urlsplit says so only when asked
        port = 0
    if port == 0:
        raise ValidationError("the URL's port must be a number from 1 to 65535")
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

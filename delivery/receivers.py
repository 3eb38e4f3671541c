"""Inbound notifications: GitHub pushes and ArgoCD notifications that wake waits early.

A sender is verified before anything is read from what it sent — GitHub by the HMAC-SHA256
of the body under ``ALFRED_GITHUB_WEBHOOK_SECRET`` (``X-Hub-Signature-256``), ArgoCD by the
bearer secret ``ALFRED_ARGOCD_WEBHOOK_SECRET`` its notifications service sends — compared in
constant time; an unset secret verifies nothing. A verified notification is recorded by its
delivery id (a resent one is a no-op) and brings forward every poll that watches what it
names (``executions.runtime.scans.polls_hasten``): ``github:<owner/name>`` for a push,
``argocd:<application>`` for ArgoCD. The poll timers stay the guarantee: a lost, late or
forged notification changes nothing but when a poll happens.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from executions.models import InboundNotification
from executions.runtime.scans import polls_hasten


class Unverified(Exception):
    """The request does not prove it comes from the sender it claims."""


class Unreadable(Exception):
    """Verified, but not a notification this receiver understands."""


@dataclass(frozen=True)
class Received:
    duplicate: bool
    topics: tuple[str, ...]
    woken: int


def github_verify(body: bytes, signature: str) -> None:
    secret = settings.ALFRED_GITHUB_WEBHOOK_SECRET
    if not secret:
        raise Unverified("no GitHub webhook secret is configured")
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.strip()):
        raise Unverified("the X-Hub-Signature-256 does not match the body")


def argocd_verify(authorization: str) -> None:
    secret = settings.ALFRED_ARGOCD_WEBHOOK_SECRET
    if not secret:
        raise Unverified("no ArgoCD webhook secret is configured")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), secret):
        raise Unverified("the bearer secret does not match")


def _json(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        raise Unreadable("the body is not JSON") from None
    if not isinstance(document, dict):
        raise Unreadable("the body is not a JSON object")
    return document


def github_topics(event: str, body: bytes) -> list[str]:
    """A push names its repository; other events (``ping``...) name nothing."""
    if event != "push":
        return []
    repository = _json(body).get("repository")
    name = repository.get("full_name") if isinstance(repository, dict) else None
    if not isinstance(name, str) or "/" not in name:
        raise Unreadable("a push without repository.full_name")
    return [f"github:{name.lower()}"]


def argocd_notification(body: bytes, delivery_header: str = "") -> tuple[str, list[str]]:
    """The delivery id (the ``X-Delivery-Id`` header, else the body's ``id``) and the topics
    of ``{"app": "<name>", "id": "<delivery>"}`` (or ``"application"``), as
    docs/providers.md's template sends."""
    document = _json(body)
    app = document.get("app") or document.get("application")
    if isinstance(app, dict):
        app = (app.get("metadata") or {}).get("name")
    if not isinstance(app, str) or not app:
        raise Unreadable("no application name (app)")
    delivery = delivery_header.strip() or str(document.get("id") or "").strip()
    if not delivery:
        raise Unreadable("no delivery id (X-Delivery-Id or id)")
    return delivery, [f"argocd:{app}"]


def notification_receive(source: str, delivery_id: str, topics: list[str]) -> Received:
    """Record the notification once and bring forward the polls it concerns, together."""
    try:
        with transaction.atomic(durable=True):
            record = InboundNotification.objects.create(
                source=source, delivery_id=delivery_id[:200], topics=topics
            )
            woken = polls_hasten(topics)
            if woken:
                record.woken = woken
                record.save(update_fields=["woken"])
    except IntegrityError:
        return Received(duplicate=True, topics=tuple(topics), woken=0)
    return Received(duplicate=False, topics=tuple(topics), woken=woken)

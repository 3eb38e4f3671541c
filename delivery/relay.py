"""The webhook relay: the outbox's events, signed (Standard Webhooks), to each endpoint.

Why one row per delivery rather than a cursor per endpoint: the rows are written in the
emitting transaction (``outbox.event_emit``), so an event is owed to every endpoint the
moment it exists and nothing needs to catch up; one event that an endpoint keeps refusing
retries on its own schedule without holding back the endpoint's other events (a cursor would
block on it, or need this table anyway); and each row carries what an operator asks about —
its attempts, the last answer, "send it again". The price is that deliveries to one endpoint
are not in order; every event carries its execution's gapless ``sequence`` (and a webhook-id
that repeats only when the same event is sent again), which is what a receiver orders and
deduplicates by.

At least once: a relay claims a due delivery for one attempt (``claimed_until``), sends it
and records the answer. A relay that dies mid-attempt leaves the claim to run out, and the
scan sends the delivery again, with the same ``webhook-id``. A 2xx delivers; anything else,
a timeout or a refused connection retries on ``ALFRED_WEBHOOK_RETRY_SCHEDULE``, at the latest
``Retry-After`` says when a 429 or 503 carries one; after the last attempt the delivery is
``failed`` (audit ``webhook.exhausted``). ``410 Gone`` disables the endpoint (audit
``webhook.disabled``): its deliveries wait, pending, until an operator enables it again.

The relay connects to an address it has checked (``endpoints.address_check``), with the
URL's host name as Host and TLS server name, so a host name that resolves elsewhere after
the check (DNS rebinding) cannot aim a delivery at a private address.

A receiver is not trusted to be quick or small. An attempt is over by
``ALFRED_WEBHOOK_TIMEOUT_SECONDS`` after it began, whatever the receiver does: every socket
operation's timeout is cut to what is left (``_DeadlineTransport``), so one that drips its
answer a byte at a time neither outlives the claim (which would let a second relay send the
delivery alongside) nor keeps a relay thread. Of the answer only the status, the headers and
a prefix of the body are read (``_excerpt``). Name resolution is the one step not bounded by
the deadline (``getaddrinfo`` cannot be interrupted); the resolver's own timeouts bound it.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpcore
import httpx
from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from alfred.metrics import WEBHOOK_ATTEMPTS
from alfred.readonly import writes_allowed
from delivery.addresses import address_check
from delivery.endpoints import endpoint_secrets
from delivery.feed import event_document
from executions.models import (
    AuditEntry,
    DeliveryStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from executions.runtime.clock import db_now

log = logging.getLogger(__name__)

RELAY_TASK = "executions.tasks.webhook_relay"
BATCH = 50
SENDERS = 8  # concurrent attempts per relay task: one slow receiver does not hold the rest
EXCERPT_CHARS = 500
EXCERPT_BYTES = EXCERPT_CHARS * 4  # UTF-8: at most four bytes a character
MAX_RETRY_AFTER = timedelta(hours=24)
USER_AGENT = "Alfred-Webhooks/1"


def relay_publish() -> None:
    """Ask a relay to send what it owes, after the transaction that owed it commits (a hint:
    the scan finds any delivery whose message is lost)."""
    try:
        current_app.send_task(RELAY_TASK, queue="webhooks")
    except Exception:
        log.warning("webhook relay not published; the scan will send what is due")


@dataclass(frozen=True)
class Claimed:
    id: int
    number: int  # this attempt's number, from 1
    round_number: int  # its place in the retry schedule, from 1
    url: str
    secrets: tuple[str, ...]
    event_key: str
    body: str
    broken: str = ""  # why this delivery cannot be sent (its body could not be made)


@dataclass(frozen=True)
class Answer:
    status_code: int | None
    duration_ms: int
    excerpt: str = ""
    error: str = ""
    retry_after: timedelta | None = None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def deliveries_relay(batch: int = BATCH) -> int:
    """Claim due deliveries, send them, record the answers. Returns how many were tried."""
    if not due_now():
        return 0  # the scan's usual answer: one statement, no transaction, no row lock
    claimed = deliveries_claim(batch)
    if not claimed:
        return 0
    client = _client()
    if len(claimed) == 1:
        _record_one(claimed[0], attempt_send(client, claimed[0]))
        return 1
    with ThreadPoolExecutor(max_workers=min(SENDERS, len(claimed))) as pool:
        answers = pool.map(lambda item: (item, attempt_send(client, item)), claimed)
        for item, answer in answers:
            _record_one(item, answer)
    return len(claimed)


def _record_one(item: Claimed, answer: Answer) -> None:
    """Record one answer; a failure to record it is that delivery's alone (its claim runs out
    and it is sent again), never its batch's: the others' answers are recorded all the same,
    so a healthy receiver is not sent the same webhook-id again because of a neighbour."""
    try:
        delivery_record(item, answer)
    except Exception:
        log.exception("webhook delivery %s: its answer was not recorded", item.id)


_clients: dict[int, httpx.Client] = {}


def _client() -> httpx.Client:
    """One client per worker process (its connections kept alive between deliveries to the
    same receiver); a forked child makes its own. No proxy from the environment: the relay
    connects to the address it checked."""
    pid = os.getpid()
    client = _clients.get(pid)
    if client is None:
        client = _clients[pid] = httpx.Client(
            transport=_DeadlineTransport(),
            timeout=settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS,
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        )
    return client


# When the attempt running on this thread must be over (time.monotonic()).
_deadline: ContextVar[float | None] = ContextVar("webhook_attempt_deadline", default=None)


def _clamped(timeout: float | None, error: type[Exception]) -> float:
    """``timeout`` cut to what is left of the attempt: httpx's timeouts bound each socket
    operation, so a receiver that drips its answer a byte at a time never trips them."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout if timeout is not None else settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the attempt's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _clamped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._stream.start_tls(
            ssl_context, server_hostname, _clamped(timeout, httpcore.ConnectTimeout)
        )
        return _DeadlineStream(stream)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.SyncBackend):
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = super().connect_tcp(
            host, port, _clamped(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport on a connection pool whose every socket operation (connect, TLS
    handshake, each write and read) ends by the attempt's deadline. httpx passes no network
    backend through, so the pool is made again with one, as httpx itself makes it."""

    def __init__(self) -> None:
        limits = httpx.Limits(max_connections=SENDERS * 4, max_keepalive_connections=SENDERS)
        super().__init__(limits=limits)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_DeadlineBackend(),
        )


def deliveries_claim(batch: int = BATCH) -> list[Claimed]:
    """Take up to ``batch`` due deliveries of active endpoints for one attempt each. SKIP
    LOCKED: two relays claim disjoint sets; the claim outlasts the attempts of the batch (a
    relay that dies leaves it to run out)."""
    timeout = settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS
    with transaction.atomic(durable=True):
        now = db_now()
        rows = list(
            WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(
                Q(claimed_until__isnull=True) | Q(claimed_until__lt=now),
                status=DeliveryStatus.PENDING,
                next_attempt_at__lte=now,
                endpoint__active=True,
            )
            .select_related("endpoint", "event")
            .order_by("next_attempt_at", "id")[:batch]
        )
        if not rows:
            return []
        rounds = -(-len(rows) // SENDERS)
        claim = now + timedelta(seconds=rounds * timeout * 1.5 + 5)
        WebhookDelivery.objects.filter(pk__in=[row.pk for row in rows]).update(claimed_until=claim)
    return [_claimed(row) for row in rows]


def _claimed(row: WebhookDelivery) -> Claimed:
    """What an attempt needs of a claimed row. Claimed already: a row whose body cannot be
    made is still attempted — as an error recorded against it alone, on its retry schedule."""
    claimed = Claimed(
        id=row.pk,
        number=row.attempts + 1,
        round_number=row.round_attempts + 1,
        url=row.endpoint.url,
        secrets=(),
        event_key=row.event.key,
        body="",
    )
    try:
        body = json.dumps(
            {
                "type": row.event.type,
                "timestamp": row.event.created_at.isoformat(),
                "data": event_document(row.event),
            },
            cls=DjangoJSONEncoder,
            separators=(",", ":"),
        )
        return replace(claimed, secrets=tuple(endpoint_secrets(row.endpoint)), body=body)
    except Exception as exc:
        log.exception("webhook delivery %s: its request could not be made", row.pk)
        return replace(claimed, broken=_error(exc))


def _error(exc: Exception) -> str:
    return f"error: {type(exc).__name__}: {exc}"[:1000]


def attempt_send(client: httpx.Client, item: Claimed) -> Answer:
    """One POST, over by ``ALFRED_WEBHOOK_TIMEOUT_SECONDS`` whatever the receiver does (the
    claim outlasts it, so no other relay sends the delivery meanwhile); of the answer, only
    its status, ``Retry-After`` and the first bytes of its body are read.

    Whatever the attempt raises is its answer: an error recorded against this delivery, on
    its retry schedule to ``failed``. Raised instead, it would leave the whole batch
    unrecorded, to be claimed and sent again to every receiver when the claim ran out."""
    started = time.monotonic()
    deadline = _deadline.set(started + settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS)
    try:
        return _attempt(client, item, started)
    except Exception as exc:
        log.exception("webhook delivery %s: the attempt failed", item.id)
        return Answer(None, int((time.monotonic() - started) * 1000), error=_error(exc))
    finally:
        _deadline.reset(deadline)


def _attempt(client: httpx.Client, item: Claimed, started: float) -> Answer:
    timeout = settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    if item.broken:
        return Answer(None, took(), error=item.broken)
    try:
        target, headers, extensions = _pinned(item.url)
    except (ValidationError, OSError) as exc:
        message = exc.messages[0] if isinstance(exc, ValidationError) else str(exc)
        return Answer(None, took(), error=f"refused: {message}"[:1000])
    stamp = timezone.now()
    headers.update(
        {
            "Content-Type": "application/json",
            "webhook-id": item.event_key,
            "webhook-timestamp": str(int(stamp.timestamp())),
            "webhook-signature": " ".join(
                Webhook(secret).sign(item.event_key, stamp, item.body) for secret in item.secrets
            ),
        }
    )
    request = client.build_request(
        "POST",
        target,
        content=item.body,
        headers=headers,
        extensions=extensions,
        timeout=timeout,
    )
    try:
        response = client.send(request, stream=True)
    except httpx.TimeoutException:
        return Answer(None, took(), error=f"timeout: no answer within {timeout:g} s")
    except httpx.HTTPError as exc:
        return Answer(None, took(), error=f"{type(exc).__name__}: {exc}"[:1000])
    try:
        excerpt = _excerpt(response)
    finally:
        response.close()  # unread, the rest is never received: the connection goes
    return Answer(response.status_code, took(), excerpt=excerpt, retry_after=_retry_after(response))


def _excerpt(response: httpx.Response) -> str:
    """The body's first ``EXCERPT_CHARS`` characters, from at most ``EXCERPT_BYTES`` read
    (never the whole body: it is the receiver's to make as large as it likes). A body cut
    short by the deadline keeps what came: the status already answered the delivery."""
    prefix = bytearray()
    try:
        for chunk in response.iter_raw():
            prefix += chunk
            if len(prefix) >= EXCERPT_BYTES:
                break
    except httpx.HTTPError:
        pass
    return bytes(prefix[:EXCERPT_BYTES]).decode("utf-8", "replace")[:EXCERPT_CHARS]


def _pinned(url: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL with its host replaced by a checked address, the Host header, and the TLS
    server name, so the connection goes where the check looked."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    for address in addresses:
        address_check(address)  # every address: which one a retry gets is not ours to pick
    address = addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    host_header = parts.netloc.rsplit("@", 1)[-1]
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return target, {"Host": host_header}, extensions


def _retry_after(response: httpx.Response) -> timedelta | None:
    if response.status_code not in (429, 503):
        return None
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if value.isdigit():
        wait = timedelta(seconds=int(value))
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        wait = when - timezone.now()
    return max(timedelta(0), min(wait, MAX_RETRY_AFTER))


def delivery_record(item: Claimed, answer: Answer) -> None:
    """The attempt's log line and the delivery's next state, in one transaction, only while
    this relay's claim stands (a delivery redelivered by an operator meanwhile starts over)."""
    schedule = settings.ALFRED_WEBHOOK_RETRY_SCHEDULE
    with transaction.atomic(durable=True):
        now = db_now()
        delivery = (
            WebhookDelivery.objects.select_for_update()
            .select_related("endpoint")
            .filter(pk=item.id, status=DeliveryStatus.PENDING, attempts=item.number - 1)
            .first()
        )
        if delivery is None:
            return
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=item.number,
            status_code=answer.status_code,
            duration_ms=answer.duration_ms,
            response_excerpt=answer.excerpt,
            error=answer.error,
        )
        delivery.attempts = item.number
        delivery.round_attempts = item.round_number
        delivery.last_status_code = answer.status_code
        delivery.last_error = answer.error
        delivery.claimed_until = None
        if answer.delivered:
            delivery.status = DeliveryStatus.DELIVERED
            delivery.delivered_at = now
            delivery.next_attempt_at = None
        elif answer.status_code == 410:
            delivery.status = DeliveryStatus.FAILED
            delivery.next_attempt_at = None
            _endpoint_disable(delivery.endpoint, item)
        elif item.round_number >= len(schedule):
            delivery.status = DeliveryStatus.FAILED
            delivery.next_attempt_at = None
            _audit(
                "webhook.exhausted",
                delivery.endpoint_id,
                delivery=delivery.pk,
                event=item.event_key,
                attempts=item.number,
                last_status_code=answer.status_code,
                last_error=answer.error,
            )
        else:
            wait = timedelta(seconds=schedule[item.round_number])
            if answer.retry_after is not None:
                wait = max(wait, answer.retry_after)
            delivery.next_attempt_at = now + wait
        delivery.save(
            update_fields=[
                "attempts",
                "round_attempts",
                "last_status_code",
                "last_error",
                "claimed_until",
                "status",
                "delivered_at",
                "next_attempt_at",
            ]
        )
    outcome = "delivered" if answer.delivered else "refused" if answer.status_code else "error"
    WEBHOOK_ATTEMPTS.labels(delivery.endpoint_id, outcome).inc()
    log.debug(
        "webhook %s to %s attempt %d: %s in %d ms",
        item.event_key,
        item.url,
        item.number,
        answer.status_code or answer.error,
        answer.duration_ms,
    )


def _endpoint_disable(endpoint: WebhookEndpoint, item: Claimed) -> None:
    updated = WebhookEndpoint.objects.filter(pk=endpoint.pk, active=True).update(
        active=False,
        disabled_reason=f"410 Gone for {item.event_key}",
        updated_at=timezone.now(),
    )
    if updated:
        _audit("webhook.disabled", endpoint.pk, event=item.event_key, reason="410 Gone")


def _audit(action: str, endpoint_id: str, reason: str = "", **data: Any) -> None:
    AuditEntry.objects.create(
        actor="alfred:webhook-relay",
        action=action,
        target_type="webhook_endpoint",
        target_id=endpoint_id,
        reason=reason,
        data=data,
    )


class DeliveryInFlight(Exception):
    """The delivery is being attempted right now: its answer is recorded within its claim."""

    def __init__(self, delivery_id: int, claimed_until: datetime) -> None:
        super().__init__(
            f"Delivery {delivery_id} is being sent right now; its answer is recorded by "
            f"{claimed_until.isoformat(timespec='seconds')}. Ask again then if it still needs "
            "sending."
        )
        self.delivery_id = delivery_id
        self.claimed_until = claimed_until


def delivery_redeliver(delivery_id: int, *, actor: str, actor_name: str, reason: str) -> None:
    """Send one delivery now, whatever became of it: delivered, failed, or pending and waiting
    out its back-off (a receiver that is back need not wait hours). DeliveryInFlight when a
    relay is attempting it right now; WebhookDelivery.DoesNotExist when there is none."""
    if not deliveries_redeliver(
        actor=actor, actor_name=actor_name, reason=reason, delivery_ids=[delivery_id]
    ):
        claimed_until = WebhookDelivery.objects.values_list("claimed_until", flat=True).get(
            pk=delivery_id
        )
        # Not put back, so claimed when looked at (a claim that ran out since is sent anyway)
        raise DeliveryInFlight(delivery_id, claimed_until or timezone.now())


def deliveries_redeliver(
    *,
    actor: str,
    actor_name: str,
    reason: str,
    delivery_ids: list[int] | None = None,
    endpoint_id: str | None = None,
) -> int:
    """Send again now: the given deliveries whatever their status, or every failed one of
    ``endpoint_id``. Each starts its retry schedule over, keeping its webhook-id (a receiver
    that had it dedupes it). Returns how many were put back; a delivery being attempted right
    now (claimed) is left to finish."""
    writes_allowed()
    with transaction.atomic(durable=True):
        now = db_now()
        owed = WebhookDelivery.objects.select_for_update(skip_locked=True).filter(
            Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
        )
        if delivery_ids is not None:
            owed = owed.filter(pk__in=delivery_ids)
        else:
            owed = owed.filter(endpoint_id=endpoint_id, status=DeliveryStatus.FAILED)
        rows = list(owed.values_list("pk", "endpoint_id"))
        if not rows:
            return 0
        WebhookDelivery.objects.filter(pk__in=[pk for pk, _ in rows]).update(
            status=DeliveryStatus.PENDING,
            round_attempts=0,
            next_attempt_at=now,
            claimed_until=None,
            delivered_at=None,
        )
        for endpoint in sorted({endpoint for _, endpoint in rows}):
            AuditEntry.objects.create(
                actor=actor,
                action="webhook.redeliver",
                target_type="webhook_endpoint",
                target_id=endpoint,
                reason=reason,
                data={
                    "actor_name": actor_name,
                    "deliveries": sorted(pk for pk, e in rows if e == endpoint),
                },
            )
        transaction.on_commit(relay_publish)
    return len(rows)


def due_now() -> bool:
    """Whether a delivery may be due (the scan's cheap question before it claims; the claim
    decides on the database's clock, under its lock)."""
    return WebhookDelivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=Now(), endpoint__active=True
    ).exists()

"""One delivery that cannot be sent poisons nothing else: whatever an attempt raises, at any
point of it, is recorded as that delivery's failed attempt, on its retry schedule to
``failed``, and every other delivery of its batch is sent once and recorded once. A URL that
cannot be sent (a port past 65535) is refused when it is saved.

The relay runs in this process (``deliveries_relay``, as the worker's task calls it) against
real receivers on local ports; the last test runs it in a real worker."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.test import APIClient

from alfred.tokens import token_create
from delivery import relay
from delivery.endpoints import endpoint_url_check
from executions.events import EventType
from executions.models import (
    DeliveryStatus,
    Execution,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from executions.outbox import event_emit
from tests.conftest import WorkerProcess, wait_for
from tests.integration.test_webhooks import FAST, Receiver

pytestmark = pytest.mark.django_db(transaction=True)

BAD = EventType.LANE_RECOVERY_REQUIRED  # the one event type only the poisoned endpoint asks for
TICK = EventType.ASSISTANCE
PLANTED = "planted at"


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver, Receiver]]:
    found = tuple(Receiver(secret=f"whsec_{uuid.uuid4().hex}").start() for _ in range(3))
    try:
        yield found  # type: ignore[misc]
    finally:
        for each in found:
            each.stop()


def endpoint_for(receiver: Receiver, *event_types: str, url: str = "") -> WebhookEndpoint:
    """Written as a row, as one saved before today's checks would be."""
    return WebhookEndpoint.objects.create(
        url=url or receiver.url,
        secret=receiver.secret or "whsec_" + "A" * 44,
        event_types=list(event_types),
    )


def emit(label: str, type_: EventType) -> str:
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": label}, logical_identity=label, principal="p"
    )
    key = f"{execution.id}:{uuid.uuid4().hex}"
    with transaction.atomic():
        payload = (
            {"kind": "test", "label": label} if type_ == TICK else {"lane": "l", "reason": label}
        )
        event_emit(execution_id=execution.id, type=type_, key=key, payload=payload)
    return key


def poisoned(check: Callable[..., bool], original: Callable[..., Any], where: str) -> Any:
    """``original``, but raising whenever ``check`` says its arguments are the bad
    delivery's."""

    def planted(*args: Any, **kwargs: Any) -> Any:
        if check(*args, **kwargs):
            raise RuntimeError(f"{PLANTED} {where}")
        return original(*args, **kwargs)

    return planted


BAD_PATH = "/poisoned"  # the bad endpoint's path, by which its request and answer are known
# The points past which the request has reached the receiver.
AFTER_SEND = ("excerpt", "retry_after")


def plant(monkeypatch: pytest.MonkeyPatch, point: str, bad: WebhookEndpoint) -> None:
    """Make the attempt for ``bad``'s delivery raise at ``point``; every other attempt runs
    as it would."""

    def is_bad_request(request: httpx.Request, *rest: Any, **kw: Any) -> bool:
        return request.url.path == BAD_PATH

    def is_bad_response(response: httpx.Response, *rest: Any, **kw: Any) -> bool:
        return response.request.url.path == BAD_PATH

    if point == "body":
        monkeypatch.setattr(
            relay,
            "event_document",
            poisoned(lambda event: event.type == BAD, relay.event_document, point),
        )
    elif point == "secrets":
        monkeypatch.setattr(
            relay,
            "endpoint_secrets",
            poisoned(lambda endpoint: endpoint.pk == bad.pk, relay.endpoint_secrets, point),
        )
    elif point == "resolve":
        monkeypatch.setattr(
            relay, "_pinned", poisoned(lambda url: url == bad.url, relay._pinned, point)
        )
    elif point == "sign":
        real = relay.Webhook

        def webhook(secret: str) -> Any:
            if secret == bad.secret:
                raise RuntimeError(f"{PLANTED} {point}")
            return real(secret)

        monkeypatch.setattr(relay, "Webhook", webhook)
    elif point == "send":
        monkeypatch.setattr(
            httpx.Client,
            "send",
            poisoned(lambda self, request, **kw: is_bad_request(request), httpx.Client.send, point),
        )
    elif point == "excerpt":
        monkeypatch.setattr(relay, "_excerpt", poisoned(is_bad_response, relay._excerpt, point))
    elif point == "retry_after":
        monkeypatch.setattr(
            relay, "_retry_after", poisoned(is_bad_response, relay._retry_after, point)
        )
    else:
        raise AssertionError(point)


@pytest.mark.parametrize(
    "point", ["body", "secrets", "resolve", "sign", "send", "excerpt", "retry_after"]
)
def test_an_attempt_that_raises_is_its_own_failed_attempt_and_its_batch_is_sent_once(
    settings, monkeypatch, receivers, point
):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True  # the receivers are on 127.0.0.1
    settings.ALFRED_WEBHOOK_RETRY_SCHEDULE = [0, 0]  # two attempts, no wait between
    # given two healthy endpoints and one whose attempt raises at ``point``, in one batch
    first, second, third = receivers
    healthy = [endpoint_for(first, TICK), endpoint_for(second, TICK)]
    bad = endpoint_for(third, BAD, url=third.url.replace("/hooks", BAD_PATH))
    good_key = emit("good", TICK)
    bad_key = emit("bad", BAD)
    plant(monkeypatch, point, bad)

    # when the relay runs
    assert relay.deliveries_relay() == 3

    # then each healthy receiver got its delivery once, recorded delivered
    for receiver, endpoint in zip((first, second), healthy, strict=True):
        assert receiver.delivered_ids() == [good_key]
        delivery = WebhookDelivery.objects.get(endpoint=endpoint)
        assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 1)
    # and the bad delivery has a failed attempt naming what was raised, due again
    attempt = WebhookAttempt.objects.get(delivery__endpoint=bad)
    assert attempt.status_code is None
    assert attempt.error == f"error: RuntimeError: {PLANTED} {point}"
    delivery = WebhookDelivery.objects.get(endpoint=bad)
    assert (delivery.status, delivery.attempts, delivery.claimed_until) == (
        DeliveryStatus.PENDING,
        1,
        None,
    )

    # when the relay runs again: only the bad delivery is tried, and its schedule ends it
    assert relay.deliveries_relay() == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 2)
    assert relay.deliveries_relay() == 0
    assert first.delivered_ids() == [good_key] and second.delivered_ids() == [good_key]
    # the bad receiver got nothing, or (raised after the send) each attempt: at least once
    assert third.delivered_ids() == ([bad_key, bad_key] if point in AFTER_SEND else [])


def test_a_failure_to_record_one_answer_leaves_the_others_recorded(
    settings, monkeypatch, receivers
):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True
    third = receivers[2]
    endpoints = [endpoint_for(each, TICK) for each in receivers]
    key = emit("record", TICK)
    real = relay.delivery_record

    def record(item: relay.Claimed, answer: relay.Answer) -> None:
        if item.url == third.url:
            raise RuntimeError(f"{PLANTED} record")
        real(item, answer)

    monkeypatch.setattr(relay, "delivery_record", record)
    assert relay.deliveries_relay() == 3
    statuses = [WebhookDelivery.objects.get(endpoint=each).status for each in endpoints]
    # the third was sent but its answer not recorded: its claim stands, to run out and be
    # sent again (at least once); the other two are delivered and are never sent again
    assert statuses == [DeliveryStatus.DELIVERED, DeliveryStatus.DELIVERED, DeliveryStatus.PENDING]
    assert WebhookDelivery.objects.get(endpoint=endpoints[2]).claimed_until is not None
    assert [each.delivered_ids() for each in receivers] == [[key], [key], [key]]


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com:99999/a",
        "https://hooks.example.com:65536/a",
        "https://hooks.example.com:0/a",
        "https://hooks.example.com:/a",
    ],
)
def test_a_url_whose_port_cannot_be_connected_to_is_refused_when_saved(settings, url):
    settings.PRODUCTION = True
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    if url.endswith(":/a"):  # an empty port is the scheme's default: taken
        endpoint_url_check(url)
        return
    with pytest.raises(ValidationError, match="port must be a number from 1 to 65535"):
        endpoint_url_check(url)
    endpoint_url_check("https://hooks.example.com:65535/a")
    endpoint_url_check("https://hooks.example.com:1/a")


def test_the_api_refuses_a_port_past_65535_with_a_problem(settings):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    _, raw = token_create(name="ports-operator", role="operator")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = api.post(
        "/api/v1/webhooks/endpoints", {"url": "https://hooks.example.com:99999/a"}, format="json"
    )
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid_input"
    assert "65535" in response.json()["detail"]
    assert not WebhookEndpoint.objects.exists()
    # and an endpoint saved before cannot be changed to one
    created = api.post(
        "/api/v1/webhooks/endpoints", {"url": "https://hooks.example.com:8443/a"}, format="json"
    )
    assert created.status_code == 201, created.content
    changed = api.patch(
        f"/api/v1/webhooks/endpoints/{created.json()['id']}",
        {"url": "https://hooks.example.com:99999/a"},
        format="json",
    )
    assert changed.status_code == 422
    assert WebhookEndpoint.objects.get().url == "https://hooks.example.com:8443/a"


@pytest.mark.worker
def test_a_legacy_endpoint_with_a_bad_port_fails_alone_in_a_real_worker(receivers):
    # given a healthy endpoint and a row saved before the port check, and a real relay worker
    first, _, _ = receivers
    healthy = endpoint_for(first, TICK)
    bad = endpoint_for(first, BAD, url="http://127.0.0.1:99999/a")
    keys = [emit(f"w{n}", TICK) for n in range(3)]
    emit("wbad", BAD)
    worker = WorkerProcess("relay-faults").start(environ=FAST)
    try:
        # then the healthy receiver gets each event exactly once and the bad delivery ends
        # failed, its every attempt recorded
        wait_for(
            lambda: WebhookDelivery.objects.filter(
                endpoint=bad, status=DeliveryStatus.FAILED
            ).exists(),
            timeout=30,
        )
        wait_for(
            lambda: (
                WebhookDelivery.objects.filter(
                    endpoint=healthy, status=DeliveryStatus.DELIVERED
                ).count()
                == 3
            ),
            timeout=30,
        )
    finally:
        worker.stop()
    assert sorted(first.delivered_ids()) == sorted(keys)
    attempts = list(WebhookAttempt.objects.filter(delivery__endpoint=bad).order_by("number"))
    assert len(attempts) == len(FAST["ALFRED_WEBHOOK_RETRY_SCHEDULE"].split(","))
    assert all(a.error.startswith("error: ValueError: Port") for a in attempts)

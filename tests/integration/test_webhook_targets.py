"""Where webhooks may go and what an attempt may cost: the address rules at save time under
production settings and at connect time in the relay, the attempt's deadline against
receivers that drip their answer, the bounded read of a huge one (the relay runs in this
process: no worker runs in this module, so nothing else can claim the delivery)."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc
import uuid

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

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
from tests.conftest import wait_for
from tests.integration.test_webhooks import DripReceiver, Receiver, answer_head

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def receiver():
    found = Receiver().start()
    try:
        yield found
    finally:
        found.stop()


def emit_many(execution: Execution, count: int) -> None:
    for _ in range(count):
        with transaction.atomic():
            event_emit(
                execution_id=execution.id,
                type=EventType.ASSISTANCE,
                key=f"{execution.id}:{uuid.uuid4().hex}",
                payload={"kind": "test"},
            )


def test_private_targets_are_refused_under_production_settings(settings, receiver):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    settings.PRODUCTION = True
    for url in (
        "https://10.0.0.1/hook",
        "https://127.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://localhost/hook",
        "http://hooks.example.com/plain-http",
    ):
        with pytest.raises(ValidationError):
            endpoint_url_check(url)
    endpoint_url_check("https://hooks.example.com/ok")
    # and at connect time: a row that got past the check (or a name that resolves to a
    # private address) is refused before any byte is sent
    settings.PRODUCTION = False
    endpoint = WebhookEndpoint.objects.create(url=receiver.url, secret="whsec_" + "A" * 44)
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": "p"}, logical_identity="z", principal="p"
    )
    emit_many(execution, 1)
    assert relay.deliveries_relay() == 1
    attempt = WebhookAttempt.objects.get(delivery__endpoint=endpoint)
    assert attempt.status_code is None
    assert "ALFRED_WEBHOOK_ALLOW_PRIVATE" in attempt.error
    assert receiver.received == []


@pytest.mark.parametrize(
    "literal",
    [
        "64:ff9b::a9fe:a9fe",  # NAT64 to 169.254.169.254
        "64:ff9b::a00:1",  # NAT64 to 10.0.0.1
        "64:ff9b:1:a9fe:a9:fe00::",  # local-use NAT64 (a /48) to 169.254.169.254
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
        "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, its client 169.254.169.254
    ],
)
def test_ipv6_forms_that_carry_a_private_ipv4_are_refused_at_save_and_at_connect(
    settings, monkeypatch, literal
):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    settings.PRODUCTION = True
    # at save time, as a literal
    with pytest.raises(ValidationError):
        endpoint_url_check(f"https://[{literal}]/hook")
    # at connect time, as a DNS name whose AAAA is that address (saved: names are not resolved)
    endpoint_url_check("https://hooks.example.test/hook")
    endpoint = WebhookEndpoint.objects.create(
        url="https://hooks.example.test/hook", secret="whsec_" + "A" * 44
    )
    resolve = socket.getaddrinfo

    def aaaa(host, port, *args, **kwargs):
        if host == "hooks.example.test":
            return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (literal, port, 0, 0))]
        return resolve(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", aaaa)
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": "v6"}, logical_identity="v6", principal="p"
    )
    emit_many(execution, 1)
    assert relay.deliveries_relay() == 1
    attempt = WebhookAttempt.objects.get(delivery__endpoint=endpoint)
    assert attempt.status_code is None and attempt.error.startswith("refused: ")
    assert literal.split("::")[0] in attempt.error


def test_a_global_ipv4_behind_nat64_stays_allowed(settings):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = False
    settings.PRODUCTION = True
    endpoint_url_check("https://[64:ff9b::808:808]/hook")  # 8.8.8.8 through a translator
    endpoint_url_check("https://[2606:4700:4700::1111]/hook")


@pytest.fixture
def private_allowed(settings):
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True  # the receivers here are on 127.0.0.1


def a_delivery_to(url: str, label: str) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.create(url=url, secret="whsec_" + "A" * 44)
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": label}, logical_identity=label, principal="p"
    )
    emit_many(execution, 1)
    return endpoint


def test_an_answer_dripping_its_headers_is_cut_at_the_deadline(settings, private_allowed):
    # given a receiver that sends its status line, then a header a byte every 0.1 s for 30 s
    settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS = 1.0
    drip = DripReceiver(head=b"HTTP/1.1 200 OK\r\nX-Slow: ", interval=0.1, drip_for=30).start()
    try:
        endpoint = a_delivery_to(drip.url, "drip-headers")
        # when the relay sends the delivery
        started = time.monotonic()
        assert relay.deliveries_relay() == 1
        # then the attempt ended at its deadline, as a timeout to retry, and hung up
        assert time.monotonic() - started < 1.0 + 1.5
        attempt = WebhookAttempt.objects.get(delivery__endpoint=endpoint)
        assert attempt.status_code is None
        assert attempt.error == "timeout: no answer within 1 s"
        assert WebhookDelivery.objects.get(endpoint=endpoint).status == DeliveryStatus.PENDING
        wait_for(lambda: drip.requests[0]["gone_at"] is not None, timeout=2)
    finally:
        drip.stop()


def test_a_body_dripping_after_a_2xx_is_cut_at_the_deadline_and_delivered(
    settings, private_allowed
):
    settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS = 1.0
    drip = DripReceiver(head=answer_head(200), chunk=b"y", interval=0.1, drip_for=30).start()
    try:
        endpoint = a_delivery_to(drip.url, "drip-body")
        started = time.monotonic()
        assert relay.deliveries_relay() == 1
        assert time.monotonic() - started < 1.0 + 1.5
        attempt = WebhookAttempt.objects.get(delivery__endpoint=endpoint)
        assert attempt.status_code == 200 and set(attempt.response_excerpt) == {"y"}
        assert WebhookDelivery.objects.get(endpoint=endpoint).status == DeliveryStatus.DELIVERED
        wait_for(lambda: drip.requests[0]["gone_at"] is not None, timeout=2)
    finally:
        drip.stop()


def test_a_huge_answer_is_read_no_further_than_its_excerpt(private_allowed):
    # given a receiver answering 500 with a 64 MiB body, as fast as the socket takes it
    size = 64 << 20
    huge = DripReceiver(
        head=answer_head(500, length=size), chunk=b"z" * 65536, interval=0, limit=size
    ).start()
    try:
        endpoint = a_delivery_to(huge.url, "huge")
        # when the relay sends the delivery, its allocations traced
        tracemalloc.start()
        try:
            assert relay.deliveries_relay() == 1
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # then it kept the excerpt, read a bounded prefix (not 64 MiB: ~190 MiB it once cost)
        attempt = WebhookAttempt.objects.get(delivery__endpoint=endpoint)
        assert attempt.status_code == 500
        assert attempt.response_excerpt == "z" * relay.EXCERPT_CHARS
        assert peak < 4 << 20, f"the relay held {peak >> 20} MiB for a {size >> 20} MiB answer"
        wait_for(lambda: huge.requests[0]["gone_at"] is not None, timeout=5)
        assert huge.requests[0]["sent"] < size
    finally:
        huge.stop()


def test_redeliver_of_a_delivery_being_sent_says_so(settings, private_allowed, operator_api):
    # given a delivery whose attempt is under way (a receiver that holds it for its 3 s)
    settings.ALFRED_WEBHOOK_TIMEOUT_SECONDS = 3.0
    drip = DripReceiver(head=b"HTTP/1.1 200 OK\r\nX-Slow: ", interval=0.2, drip_for=30).start()
    try:
        endpoint = a_delivery_to(drip.url, "in-flight")

        def send() -> None:
            try:
                relay.deliveries_relay()
            finally:
                connection.close()

        sending = threading.Thread(target=send)
        sending.start()
        wait_for(lambda: drip.requests, timeout=5)
        delivery = WebhookDelivery.objects.get(endpoint=endpoint)
        # when an operator asks for it again meanwhile
        answer = operator_api.post(f"/api/v1/webhooks/deliveries/{delivery.pk}/redeliver")
        # then 409, saying by when the attempt's answer is recorded; nothing was put back
        assert answer.status_code == 409, answer.content
        problem = answer.json()
        assert problem["code"] == "delivery_in_flight" and problem["delivery"] == delivery.pk
        assert problem["claimed_until"] == delivery.claimed_until.isoformat()
        sending.join(10)
        assert not sending.is_alive()
        # once the attempt is recorded (a timeout, pending its retry), it is sent again
        again = operator_api.post(f"/api/v1/webhooks/deliveries/{delivery.pk}/redeliver")
        assert again.status_code == 202 and again.json() == {"redelivered": 1}
    finally:
        drip.stop()

"""Webhooks end to end: a real Celery worker relays the outbox to a local receiver that
verifies every delivery with ``standardwebhooks.Webhook.verify``; the receiver goes down and
comes back, answers 410, asks to wait with Retry-After; the relay's worker is killed
mid-delivery; private targets are refused at connect time; operators redeliver."""

from __future__ import annotations

import os
import signal
import socketserver
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.db import transaction
from rest_framework.test import APIClient
from standardwebhooks.webhooks import Webhook

from alfred.principals import Caller
from alfred.tokens import token_create
from delivery.endpoints import webhook_endpoint_save
from executions.events import EventType
from executions.models import (
    AuditEntry,
    DeliveryStatus,
    Execution,
    OutboxEvent,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from executions.outbox import event_emit
from tests.conftest import WorkerProcess, wait_for
from tests.support.helpers import submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

FAST = {
    "ALFRED_WEBHOOK_ALLOW_PRIVATE": "1",
    "ALFRED_WEBHOOK_RETRY_SCHEDULE": "0,0.3,0.3,0.5,0.5,1,1,1",
    "ALFRED_WEBHOOK_TIMEOUT_SECONDS": "2",
    "ALFRED_WEBHOOK_SCAN_SECONDS": "1",  # beat keeps whole seconds (alfred.settings)
}


class Served:
    """A receiver's server on a local port, on a thread of its own."""

    server: socketserver.TCPServer
    port: int

    def serve(self, server: socketserver.TCPServer) -> None:
        self.server = server
        server.daemon_threads = True  # type: ignore[attr-defined]
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"


@dataclass
class Receiver(Served):
    """A webhook receiver on a local port. ``answer`` decides each response: (status,
    headers); ``hang`` seconds are slept before answering the first request."""

    secret: str = ""
    answer: Any = None
    hang: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                if receiver.hang:
                    hang, receiver.hang = receiver.hang, 0.0
                    time.sleep(hang)
                    return  # no answer: the sender's worker is killed meanwhile
                try:
                    payload = Webhook(receiver.secret).verify(body, dict(self.headers))
                except Exception as exc:
                    receiver.refused.append(str(exc))
                    self.send_response(400)
                    self.end_headers()
                    return
                status, headers = (receiver.answer or (lambda: (200, {})))()
                if 200 <= status < 300:
                    receiver.received.append(
                        {
                            "id": self.headers["webhook-id"],
                            "signature": self.headers["webhook-signature"],
                            "body": body,
                            "headers": dict(self.headers),
                            "at": time.monotonic(),
                            "payload": payload,
                        }
                    )
                else:
                    receiver.received.append(
                        {
                            "id": self.headers["webhook-id"],
                            "refused": status,
                            "at": time.monotonic(),
                        }
                    )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.serve(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
        return self

    def delivered_ids(self) -> list[str]:
        return [r["id"] for r in self.received if "refused" not in r]


@dataclass
class DripReceiver(Served):
    """A receiver that does not play fair: it answers each POST with ``head`` at once, then
    sends ``chunk`` every ``interval`` seconds until ``limit`` bytes or ``drip_for`` seconds
    have gone, or the sender hangs up. It records when each request came, when the sender went
    away, and how many requests were open at once."""

    head: bytes
    chunk: bytes = b"x"
    interval: float = 0.2
    drip_for: float = 20.0
    limit: int = 1 << 40
    requests: list[dict[str, Any]] = field(default_factory=list)
    open_now: int = 0
    most_open: int = 0

    def start(self) -> DripReceiver:
        receiver = self
        lock = threading.Lock()

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                length = 0
                while (line := self.rfile.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.rfile.read(length)
                seen: dict[str, Any] = {"at": time.monotonic(), "gone_at": None, "sent": 0}
                with lock:
                    receiver.requests.append(seen)
                    receiver.open_now += 1
                    receiver.most_open = max(receiver.most_open, receiver.open_now)
                try:
                    self.wfile.write(receiver.head)
                    while (
                        time.monotonic() < seen["at"] + receiver.drip_for
                        and seen["sent"] < receiver.limit
                    ):
                        self.wfile.write(receiver.chunk)
                        seen["sent"] += len(receiver.chunk)
                        time.sleep(receiver.interval)
                except OSError:  # the sender hung up
                    seen["gone_at"] = time.monotonic()
                finally:
                    with lock:
                        receiver.open_now -= 1

        self.serve(socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler))
        return self


def answer_head(status: int = 200, length: int = 1 << 30) -> bytes:
    return f"HTTP/1.1 {status} OK\r\nContent-Length: {length}\r\n\r\n".encode()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver().start()
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture(scope="module")
def module_relay(django_db_setup: None) -> Iterator[WorkerProcess]:
    worker = WorkerProcess("relay").start(environ=FAST)
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def relay_worker(module_relay: WorkerProcess) -> Iterator[WorkerProcess]:
    """The module's relay for one test; before the database is flushed, nothing it owes is
    in flight (a relay mid-transaction holds locks the flush needs)."""
    yield module_relay
    wait_for(
        lambda: (
            not WebhookDelivery.objects.filter(
                status=DeliveryStatus.PENDING, claimed_until__isnull=False
            ).exists()
        ),
        timeout=30,
    )
    time.sleep(0.2)


@pytest.fixture(autouse=True)
def _private_targets_allowed(settings: Any) -> None:
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True


def endpoint_for(receiver: Receiver, **fields: Any) -> WebhookEndpoint:
    endpoint = WebhookEndpoint(url=receiver.url, **fields)
    secret = webhook_endpoint_save(endpoint, caller=Caller("prn_tests", "operator", "tests"))
    assert secret is not None and secret.startswith("whsec_")
    receiver.secret = secret
    return endpoint


def an_execution(api: APIClient, label: str) -> Execution:
    body = submit(api, "test-counter", {"label": label}).json()
    return Execution.objects.get(pk=body["id"])


def emit_many(execution: Execution, count: int) -> list[str]:
    keys = []
    for _ in range(count):
        key = f"{execution.id}:{uuid.uuid4().hex}"
        with transaction.atomic():
            event_emit(
                execution_id=execution.id,
                type=EventType.ASSISTANCE,
                key=key,
                payload={"kind": "test"},
            )
        keys.append(key)
    return keys


def test_every_event_of_a_real_execution_arrives_signed_and_verifies(api, receiver, relay_worker):
    # given an endpoint for every event
    endpoint = endpoint_for(receiver)
    # when an execution runs to its end on the worker
    execution = an_execution(api, "hooked")
    wait_for(lambda: Execution.objects.get(pk=execution.pk).terminal, timeout=30)
    keys = set(OutboxEvent.objects.filter(execution=execution).values_list("key", flat=True))
    # then every event arrived, verified by standardwebhooks, once each
    try:
        wait_for(lambda: set(receiver.delivered_ids()) >= keys, timeout=30)
    except AssertionError:
        missing = keys - set(receiver.delivered_ids())
        rows = list(WebhookDelivery.objects.filter(event__key__in=missing).values())
        raise AssertionError(f"missing {missing}: {rows}; refused {receiver.refused}") from None
    assert not receiver.refused
    assert sorted(receiver.delivered_ids()) == sorted(keys)
    first = next(r for r in receiver.received if r["payload"]["type"] == "execution.accepted")
    assert first["payload"]["data"]["execution"] == execution.id
    assert first["payload"]["data"]["sequence"] == 1
    wait_for(  # the relay records each answer just after the receiver has it
        lambda: (
            not WebhookDelivery.objects.filter(endpoint=endpoint)
            .exclude(status=DeliveryStatus.DELIVERED)
            .exists()
        ),
        timeout=10,
    )
    assert WebhookAttempt.objects.filter(delivery__endpoint=endpoint).count() == len(keys)
    # and no line a delivery in the relay's log (httpx's request lines are below INFO)
    assert "HTTP Request:" not in relay_worker.output()


def test_an_endpoint_gets_only_the_event_types_it_asked_for(api, receiver, relay_worker):
    endpoint_for(receiver, event_types=["execution.succeeded"])
    execution = an_execution(api, "filtered")
    wait_for(lambda: receiver.delivered_ids(), timeout=30)
    time.sleep(1)
    assert [r["payload"]["type"] for r in receiver.received] == ["execution.succeeded"]
    assert receiver.delivered_ids() == [
        OutboxEvent.objects.get(execution=execution, type="execution.succeeded").key
    ]


def test_a_receiver_down_for_a_while_gets_every_event_when_it_returns(api, receiver, relay_worker):
    # given a receiver that answers 503 for its first two seconds
    endpoint = endpoint_for(receiver)
    first: list[float] = []

    def answer() -> tuple[int, dict[str, str]]:
        first.append(first[0] if first else time.monotonic())
        return (200, {}) if time.monotonic() >= first[0] + 2.0 else (503, {})

    receiver.answer = answer
    execution = an_execution(api, "down")
    keys = emit_many(execution, 20)
    # then once it is back, every event arrives; a repeat is only ever the same webhook-id
    wait_for(lambda: set(receiver.delivered_ids()) >= set(keys), timeout=40)
    wait_for(
        lambda: (
            not WebhookDelivery.objects.filter(
                endpoint=endpoint, status=DeliveryStatus.PENDING
            ).exists()
        ),
        timeout=40,
    )
    all_keys = set(OutboxEvent.objects.filter(execution=execution).values_list("key", flat=True))
    assert set(receiver.delivered_ids()) == all_keys
    assert any("refused" in r for r in receiver.received)  # it really was down
    retried = WebhookDelivery.objects.filter(endpoint=endpoint, attempts__gt=1).count()
    assert retried > 0
    assert WebhookAttempt.objects.filter(delivery__endpoint=endpoint, status_code=503).count() > 0


def test_410_disables_the_endpoint_and_later_events_wait(api, receiver, relay_worker):
    endpoint = endpoint_for(receiver)
    receiver.answer = lambda: (410, {})
    execution = an_execution(api, "gone")
    wait_for(lambda: not WebhookEndpoint.objects.get(pk=endpoint.pk).active, timeout=30)
    endpoint.refresh_from_db()
    assert endpoint.disabled_reason.startswith("410 Gone")
    assert AuditEntry.objects.filter(action="webhook.disabled", target_id=endpoint.pk).exists()
    time.sleep(0.5)  # attempts claimed before the 410 was recorded may still land
    attempts_after_disable = len(receiver.received)
    later = emit_many(execution, 3)
    time.sleep(1.5)
    # nothing more is sent to it, and events after the 410 are not owed to it
    assert len(receiver.received) == attempts_after_disable
    assert not WebhookDelivery.objects.filter(endpoint=endpoint, event__key__in=later).exists()


def test_retry_after_is_honoured(api, receiver, relay_worker):
    endpoint = endpoint_for(receiver)
    answers = iter([(429, {"Retry-After": "2"})])
    receiver.answer = lambda: next(answers, (200, {}))
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": "wait"}, logical_identity="x", principal="p"
    )
    (key,) = emit_many(execution, 1)
    wait_for(lambda: key in receiver.delivered_ids(), timeout=30)
    refused, accepted = (r for r in receiver.received if r["id"] == key)
    assert refused["refused"] == 429
    assert accepted["at"] - refused["at"] >= 2.0  # the schedule alone says 0.3 s
    wait_for(lambda: WebhookDelivery.objects.get(endpoint=endpoint).status == "delivered")
    assert WebhookDelivery.objects.get(endpoint=endpoint).attempts == 2


def test_killing_the_relay_worker_mid_delivery_loses_nothing(api, receiver, relay_worker):
    # given a receiver that holds the first request without answering
    endpoint = endpoint_for(receiver)
    receiver.hang = 30.0
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": "kill"}, logical_identity="y", principal="p"
    )
    (key,) = emit_many(execution, 1)
    wait_for(lambda: receiver.hang == 0.0, timeout=30)  # the request is in the receiver
    # when the worker is killed while the attempt is open
    assert relay_worker.proc is not None
    os.killpg(relay_worker.proc.pid, signal.SIGKILL)
    relay_worker.proc.wait(10)
    assert receiver.delivered_ids() == []
    relay_worker.start(environ=FAST)
    # then the claim runs out and the event arrives, with the same webhook-id
    wait_for(lambda: key in receiver.delivered_ids(), timeout=40)
    wait_for(
        lambda: WebhookDelivery.objects.get(endpoint=endpoint).status == DeliveryStatus.DELIVERED,
        timeout=10,
    )
    assert receiver.delivered_ids() == [key]


def test_operators_manage_endpoints_rotate_secrets_and_redeliver(receiver, relay_worker):
    _, raw = token_create(name="hooks-operator", role="operator")
    operator = APIClient()
    operator.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    _, raw_integration = token_create(name="hooks-integration", role="integration")
    integration = APIClient()
    integration.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_integration}")
    # an integration may not touch endpoints
    assert integration.get("/api/v1/webhooks/endpoints").status_code == 403
    # create: the secret is in this answer only
    created = operator.post(
        "/api/v1/webhooks/endpoints",
        {"url": receiver.url},
        format="json",
    )
    assert created.status_code == 201, created.content
    endpoint_id = created.json()["id"]
    receiver.secret = created.json()["secret"]
    assert "secret" not in operator.get(f"/api/v1/webhooks/endpoints/{endpoint_id}").json()
    bad = operator.post(
        "/api/v1/webhooks/endpoints", {"url": "https://169.254.169.254/"}, format="json"
    )
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_input"
    # a receiver that fails every attempt exhausts the (short) schedule
    receiver.answer = lambda: (500, {})
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": "r"}, logical_identity="w", principal="p"
    )
    (key,) = emit_many(execution, 1)
    wait_for(
        lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.FAILED).exists(), timeout=40
    )
    assert AuditEntry.objects.filter(action="webhook.exhausted", target_id=endpoint_id).exists()
    listed = operator.get(f"/api/v1/webhooks/endpoints/{endpoint_id}/deliveries?status=failed")
    assert listed.status_code == 200
    (failed,) = listed.json()["results"]
    assert failed["attempts"] == 8 and len(failed["attempts_log"]) == 8
    # rotate: both secrets sign while the old one lasts
    old_secret = receiver.secret
    rotated = operator.post(f"/api/v1/webhooks/endpoints/{endpoint_id}/rotate-secret")
    assert rotated.status_code == 200
    receiver.secret = rotated.json()["secret"]
    # redeliver every failed one: the same webhook-id arrives, signed by both secrets
    receiver.answer = None
    again = operator.post(
        f"/api/v1/webhooks/endpoints/{endpoint_id}/redeliver", {"reason": "fixed"}, format="json"
    )
    assert again.status_code == 202 and again.json() == {"redelivered": 1}
    wait_for(lambda: key in receiver.delivered_ids(), timeout=30)
    (arrived,) = [r for r in receiver.received if r.get("id") == key and "refused" not in r]
    assert len(arrived["signature"].split(" ")) == 2
    for secret in (old_secret, receiver.secret):  # either secret alone verifies it
        assert Webhook(secret).verify(arrived["body"], arrived["headers"])["data"]["key"] == key
    assert AuditEntry.objects.filter(action="webhook.redeliver", target_id=endpoint_id).exists()
    # one delivery again, by id (once the relay has recorded the last answer)
    wait_for(lambda: WebhookDelivery.objects.get(endpoint_id=endpoint_id).status == "delivered")
    delivery_id = WebhookDelivery.objects.get(endpoint_id=endpoint_id).pk
    one = operator.post(f"/api/v1/webhooks/deliveries/{delivery_id}/redeliver", {}, format="json")
    assert one.status_code == 202 and one.json() == {"redelivered": 1}
    wait_for(lambda: receiver.delivered_ids().count(key) == 2, timeout=30)
    # update and delete
    patched = operator.patch(
        f"/api/v1/webhooks/endpoints/{endpoint_id}", {"active": False}, format="json"
    )
    assert patched.status_code == 200 and patched.json()["active"] is False
    assert operator.delete(f"/api/v1/webhooks/endpoints/{endpoint_id}").status_code == 204
    assert operator.get(f"/api/v1/webhooks/endpoints/{endpoint_id}").status_code == 404


def test_a_dripping_receiver_gets_one_post_and_holds_the_relay_no_longer_than_the_timeout(
    relay_worker,
):
    # given a receiver that answers 200 at once, then drips its body a byte every 0.25 s for
    # longer than the delivery's claim (2 s timeout: claimed for 1 x 2 x 1.5 + 5 = 8 s)
    drip = DripReceiver(head=answer_head(200), interval=0.25, drip_for=14.0).start()
    try:
        endpoint = WebhookEndpoint(url=drip.url)
        webhook_endpoint_save(endpoint, caller=Caller("prn_tests", "operator", "tests"))
        execution = Execution.objects.create(
            workflow="test-counter", input={"label": "drip"}, logical_identity="d", principal="p"
        )
        emit_many(execution, 1)
        # when the relay's worker sends it
        wait_for(lambda: drip.requests, timeout=30)
        wait_for(
            lambda: WebhookDelivery.objects.get(endpoint=endpoint).status != "pending", timeout=10
        )
        # then the relay hung up at the attempt's deadline, recorded the 200 as delivered,
        # and never sent the event a second time, let alone alongside the first
        (request,) = drip.requests
        wait_for(lambda: request["gone_at"] is not None, timeout=3)  # its next drip tells
        assert request["gone_at"] - request["at"] < 2.0 + 1.0
        delivery = WebhookDelivery.objects.get(endpoint=endpoint)
        assert delivery.status == DeliveryStatus.DELIVERED
        (attempt,) = WebhookAttempt.objects.filter(delivery=delivery)
        assert attempt.status_code == 200 and attempt.duration_ms < 2000 + 500
        assert attempt.response_excerpt == "x" * len(attempt.response_excerpt) != ""
        time.sleep(8.5)  # past the claim: a relay still stuck would be joined by another
        assert len(drip.requests) == 1 and drip.most_open == 1
    finally:
        drip.stop()


def test_an_operator_sends_a_delivery_waiting_out_its_back_off_now(receiver, relay_worker):
    # given a delivery told to wait an hour (429, Retry-After) by a receiver that is back since
    endpoint = endpoint_for(receiver)
    answers = iter([(429, {"Retry-After": "3600"})])
    receiver.answer = lambda: next(answers, (200, {}))
    execution = Execution.objects.create(
        workflow="test-counter", input={"label": "later"}, logical_identity="l", principal="p"
    )
    (key,) = emit_many(execution, 1)
    wait_for(lambda: WebhookDelivery.objects.get(endpoint=endpoint).attempts == 1, timeout=30)
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    assert delivery.status == DeliveryStatus.PENDING
    assert delivery.next_attempt_at is not None
    assert delivery.next_attempt_at > delivery.created_at + timedelta(minutes=59)
    # when an operator asks for it again
    _, raw = token_create(name="hooks-operator", role="operator")
    operator = APIClient()
    operator.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    again = operator.post(
        f"/api/v1/webhooks/deliveries/{delivery.pk}/redeliver", {"reason": "back"}, format="json"
    )
    # then it is sent now, not in an hour, and its schedule starts over
    assert again.status_code == 202 and again.json() == {"redelivered": 1}
    wait_for(lambda: key in receiver.delivered_ids(), timeout=15)
    wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).status == "delivered")
    assert WebhookDelivery.objects.get(pk=delivery.pk).attempts == 2
    audit = AuditEntry.objects.get(action="webhook.redeliver", target_id=endpoint.pk)
    assert audit.reason == "back" and audit.data["deliveries"] == [delivery.pk]

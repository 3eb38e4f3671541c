"""Where webhooks may go: the address rules at save time under production settings, and at
connect time in the relay (run in this process: no worker runs in this module, so nothing
else can claim the delivery)."""

from __future__ import annotations

import uuid

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from executions.events import relay
from executions.events.endpoints import endpoint_url_check
from executions.events.outbox import event_emit
from executions.models import Execution, WebhookAttempt, WebhookEndpoint
from tests.integration.test_webhooks import Receiver

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
                type="test.tick",
                key=f"{execution.id}:{uuid.uuid4().hex}",
                payload={},
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

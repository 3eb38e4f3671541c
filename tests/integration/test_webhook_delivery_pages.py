"""An endpoint's deliveries are cursor-paginated as the executions are
(``GET /webhooks/endpoints/{id}/deliveries``: ``next`` and ``previous`` links, ``limit``
1–200, newest first, a bad cursor a 400 problem), against real PostgreSQL. No relay runs:
what the outbox owes stays pending, as it was owed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from alfred.principals import Caller
from delivery.endpoints import webhook_endpoint_save
from executions.events import EventType
from executions.models import DeliveryStatus, Execution, WebhookDelivery, WebhookEndpoint
from executions.outbox import event_emit
from tests.support.helpers import assert_problem

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def endpoint(settings: Any) -> WebhookEndpoint:
    settings.ALFRED_WEBHOOK_ALLOW_PRIVATE = True
    found = WebhookEndpoint(url="http://127.0.0.1:9/hooks")
    webhook_endpoint_save(found, caller=Caller("prn_tests", "operator", "tests"))
    return found


def owe(count: int) -> list[int]:
    """``count`` events of a new execution, each owed to every endpoint: the deliveries'
    ids, oldest first."""
    execution = Execution.objects.create(
        workflow="test-counter", input={}, logical_identity=uuid.uuid4().hex, principal="p"
    )
    for _ in range(count):
        with transaction.atomic():
            event_emit(
                execution_id=execution.id,
                type=EventType.ASSISTANCE,
                key=f"{execution.id}:{uuid.uuid4().hex}",
                payload={"kind": "test"},
            )
    return list(
        WebhookDelivery.objects.filter(event__execution=execution)
        .order_by("id")
        .values_list("id", flat=True)
    )


def ids(page: Any) -> list[int]:
    assert page.status_code == 200, page.content
    return [d["id"] for d in page.json()["results"]]


def test_deliveries_are_paged_newest_first_by_cursor(operator_api, endpoint):
    # given seven deliveries owed to the endpoint
    owed = owe(7)
    path = f"/api/v1/webhooks/endpoints/{endpoint.pk}/deliveries"

    # when an operator reads them three at a time, following the links
    first = operator_api.get(f"{path}?limit=3")
    more = owe(2)  # owed meanwhile: newer than every page, so in none that follows
    second = operator_api.get(first.json()["next"])
    third = operator_api.get(second.json()["next"])

    # then each delivery came once, newest first, and the last page says there is no more
    assert ids(first) + ids(second) + ids(third) == owed[::-1]
    assert third.json()["next"] is None
    assert first.json()["previous"] is None
    # and a previous link leads back to the page before, the newer ones now included
    back = operator_api.get(second.json()["previous"])
    assert ids(back) == owed[::-1][:3]
    assert ids(operator_api.get(f"{path}?limit=2")) == more[::-1]
    # and each delivery carries its event and its attempts
    [newest] = operator_api.get(f"{path}?limit=1").json()["results"]
    assert (newest["event_type"], newest["status"], newest["attempts_log"]) == (
        "execution.assistance",
        DeliveryStatus.PENDING,
        [],
    )


def test_a_status_filter_pages_too(operator_api, endpoint):
    owed = owe(5)
    WebhookDelivery.objects.filter(pk__in=owed[:3]).update(status=DeliveryStatus.FAILED)
    path = f"/api/v1/webhooks/endpoints/{endpoint.pk}/deliveries?status=failed&limit=2"

    first = operator_api.get(path)
    second = operator_api.get(first.json()["next"])

    assert ids(first) + ids(second) == owed[:3][::-1]
    assert second.json()["next"] is None


def test_a_page_costs_the_same_queries_whatever_its_size(operator_api, endpoint):
    owe(30)
    path = f"/api/v1/webhooks/endpoints/{endpoint.pk}/deliveries"
    with CaptureQueriesContext(connection) as small:
        assert len(ids(operator_api.get(f"{path}?limit=2"))) == 2
    with CaptureQueriesContext(connection) as large:
        assert len(ids(operator_api.get(f"{path}?limit=30"))) == 30
    assert len(large.captured_queries) == len(small.captured_queries)


def test_bad_page_parameters_are_problems(operator_api, endpoint, integration_token):
    owe(1)
    path = f"/api/v1/webhooks/endpoints/{endpoint.pk}/deliveries"
    for query in ("cursor=garbage", "cursor=", "limit=0", "limit=201", "limit=x", "status=lost"):
        assert_problem(operator_api.get(f"{path}?{query}"), 400, "malformed_request")
    assert_problem(operator_api.get("/api/v1/webhooks/endpoints/nope/deliveries"), 404, "not_found")
    integration = APIClient()
    integration.credentials(HTTP_AUTHORIZATION=f"Bearer {integration_token}")
    assert_problem(integration.get(path), 403, "permission_denied")

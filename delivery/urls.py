"""The delivery's routes, under ``/api/v1/`` beside the executions' (``alfred.urls``)."""

from django.urls import path

from delivery.api.receivers import ArgoCDReceiverApi, GitHubReceiverApi
from delivery.api.streams import EventStreamApi, ExecutionEventStreamApi
from delivery.api.webhooks import (
    WebhookDeliveryListApi,
    WebhookDeliveryRedeliverApi,
    WebhookEndpointDetailApi,
    WebhookEndpointListApi,
    WebhookEndpointRedeliverApi,
    WebhookEndpointRotateApi,
    WebhookEventTypeListApi,
)

urlpatterns = [
    path(
        "executions/<str:execution_id>/events/stream",
        ExecutionEventStreamApi.as_view(),
        name="execution-events-stream",
    ),
    path("events/stream", EventStreamApi.as_view(), name="events-stream"),
    path("receivers/github", GitHubReceiverApi.as_view(), name="receiver-github"),
    path("receivers/argocd", ArgoCDReceiverApi.as_view(), name="receiver-argocd"),
    path("webhooks/event-types", WebhookEventTypeListApi.as_view(), name="webhook-event-types"),
    path("webhooks/endpoints", WebhookEndpointListApi.as_view(), name="webhook-endpoint-list"),
    path(
        "webhooks/endpoints/<str:endpoint_id>",
        WebhookEndpointDetailApi.as_view(),
        name="webhook-endpoint-detail",
    ),
    path(
        "webhooks/endpoints/<str:endpoint_id>/rotate-secret",
        WebhookEndpointRotateApi.as_view(),
        name="webhook-endpoint-rotate",
    ),
    path(
        "webhooks/endpoints/<str:endpoint_id>/deliveries",
        WebhookDeliveryListApi.as_view(),
        name="webhook-delivery-list",
    ),
    path(
        "webhooks/endpoints/<str:endpoint_id>/redeliver",
        WebhookEndpointRedeliverApi.as_view(),
        name="webhook-endpoint-redeliver",
    ),
    path(
        "webhooks/deliveries/<str:delivery_id>/redeliver",
        WebhookDeliveryRedeliverApi.as_view(),
        name="webhook-delivery-redeliver",
    ),
]

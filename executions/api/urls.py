from django.urls import path

from executions.api.views.audit import AuditEntryListApi
from executions.api.views.controls import (
    ExecutionApproveApi,
    ExecutionCancelApi,
    ExecutionRetryApi,
    ExecutionRollbackApi,
)
from executions.api.views.executions import (
    ExecutionCreateApi,
    ExecutionDetailApi,
    ExecutionEventsApi,
    ExecutionListApi,
)
from executions.api.views.receivers import ArgoCDReceiverApi, GitHubReceiverApi
from executions.api.views.streams import EventStreamApi, ExecutionEventStreamApi
from executions.api.views.webhooks import (
    WebhookDeliveryListApi,
    WebhookDeliveryRedeliverApi,
    WebhookEndpointDetailApi,
    WebhookEndpointListApi,
    WebhookEndpointRedeliverApi,
    WebhookEndpointRotateApi,
)
from executions.api.views.workflows import WorkflowListApi
from lanes.api import LaneDetailApi, LaneListApi, LaneRecoverApi

urlpatterns = [
    path("workflows", WorkflowListApi.as_view(), name="workflow-list"),
    path(
        "workflows/<str:workflow>/executions",
        ExecutionCreateApi.as_view(),
        name="execution-create",
    ),
    path("executions", ExecutionListApi.as_view(), name="execution-list"),
    path("executions/<str:execution_id>", ExecutionDetailApi.as_view(), name="execution-detail"),
    # Each control at executions/<id>/<name>, named execution-<name> (execution_links).
    path(
        "executions/<str:execution_id>/cancel",
        ExecutionCancelApi.as_view(),
        name="execution-cancel",
    ),
    path(
        "executions/<str:execution_id>/retry",
        ExecutionRetryApi.as_view(),
        name="execution-retry",
    ),
    path(
        "executions/<str:execution_id>/approve",
        ExecutionApproveApi.as_view(),
        name="execution-approve",
    ),
    path(
        "executions/<str:execution_id>/rollback",
        ExecutionRollbackApi.as_view(),
        name="execution-rollback",
    ),
    path(
        "executions/<str:execution_id>/events",
        ExecutionEventsApi.as_view(),
        name="execution-events",
    ),
    path(
        "executions/<str:execution_id>/events/stream",
        ExecutionEventStreamApi.as_view(),
        name="execution-events-stream",
    ),
    path("events/stream", EventStreamApi.as_view(), name="events-stream"),
    path("audit", AuditEntryListApi.as_view(), name="audit-list"),
    path("receivers/github", GitHubReceiverApi.as_view(), name="receiver-github"),
    path("receivers/argocd", ArgoCDReceiverApi.as_view(), name="receiver-argocd"),
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
    path("lanes", LaneListApi.as_view(), name="lane-list"),
    path("lanes/<path:key>/recover", LaneRecoverApi.as_view(), name="lane-recover"),
    path("lanes/<path:key>", LaneDetailApi.as_view(), name="lane-detail"),
]

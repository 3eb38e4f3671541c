from django.urls import path

from executions.api import views
from lanes.api import LaneDetailApi, LaneListApi, LaneRecoverApi

urlpatterns = [
    path("workflows", views.WorkflowListApi.as_view(), name="workflow-list"),
    path(
        "workflows/<str:workflow>/executions",
        views.ExecutionCreateApi.as_view(),
        name="execution-create",
    ),
    path("executions", views.ExecutionListApi.as_view(), name="execution-list"),
    path(
        "executions/<str:execution_id>", views.ExecutionDetailApi.as_view(), name="execution-detail"
    ),
    path(
        "executions/<str:execution_id>/cancel",
        views.ExecutionCancelApi.as_view(),
        name="execution-cancel",
    ),
    path(
        "executions/<str:execution_id>/retry",
        views.ExecutionRetryApi.as_view(),
        name="execution-retry",
    ),
    path(
        "executions/<str:execution_id>/events",
        views.ExecutionEventsApi.as_view(),
        name="execution-events",
    ),
    path("audit", views.AuditEntryListApi.as_view(), name="audit-list"),
    path("lanes", LaneListApi.as_view(), name="lane-list"),
    path("lanes/<path:key>/recover", LaneRecoverApi.as_view(), name="lane-recover"),
    path("lanes/<path:key>", LaneDetailApi.as_view(), name="lane-detail"),
]

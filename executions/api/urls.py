from django.urls import path

from executions.api.views.audit import AuditEntryListApi
from executions.api.views.controls import CONTROL_VIEWS
from executions.api.views.drifts import DriftDetailApi, DriftListApi
from executions.api.views.executions import (
    ExecutionCreateApi,
    ExecutionDetailApi,
    ExecutionEventsApi,
    ExecutionListApi,
)
from executions.api.views.freezes import (
    FreezeDetailApi,
    FreezeEndApi,
    FreezeExemptApi,
    FreezeListApi,
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
    *(
        path(f"executions/<str:execution_id>/{name}", view.as_view(), name=f"execution-{name}")
        for name, view in CONTROL_VIEWS.items()
    ),
    path(
        "executions/<str:execution_id>/events",
        ExecutionEventsApi.as_view(),
        name="execution-events",
    ),
    path("audit", AuditEntryListApi.as_view(), name="audit-list"),
    path("drifts", DriftListApi.as_view(), name="drift-list"),
    path("drifts/<str:drift_id>", DriftDetailApi.as_view(), name="drift-detail"),
    path("freezes", FreezeListApi.as_view(), name="freeze-list"),
    path("freezes/<str:freeze_id>", FreezeDetailApi.as_view(), name="freeze-detail"),
    path("freezes/<str:freeze_id>/end", FreezeEndApi.as_view(), name="freeze-end"),
    path("freezes/<str:freeze_id>/exempt", FreezeExemptApi.as_view(), name="freeze-exempt"),
    path("lanes", LaneListApi.as_view(), name="lane-list"),
    path("lanes/<path:key>/recover", LaneRecoverApi.as_view(), name="lane-recover"),
    path("lanes/<path:key>", LaneDetailApi.as_view(), name="lane-detail"),
]

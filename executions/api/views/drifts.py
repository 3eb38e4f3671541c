"""What the drift watch found (docs/contract.md, "The drift watch"): the drifts of the
executions the caller may read, newest first, and one with its findings. Accepting one or
starting its operation again are the execution's controls (``accept_drift``, ``redo``)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.permissions import request_caller
from executions import selectors
from executions.api.params import WORKFLOW_TOLD, DriftCursorPagination, choice_param
from executions.catalog import execution_subject
from executions.models import Drift, DriftStatus


class FindingSerializer(serializers.Serializer):
    what = serializers.CharField(help_text="What changed, as an operator names it.")
    expected = serializers.JSONField(help_text="What the execution left.")
    found = serializers.JSONField(help_text="What is there now (null: nothing).")


class DriftSerializer(serializers.ModelSerializer):
    execution = serializers.CharField(source="execution_id")
    workflow = serializers.CharField(source="execution.workflow")
    subject = serializers.SerializerMethodField()
    findings = FindingSerializer(many=True)
    replaced_by = serializers.CharField(source="replaced_by_id", allow_null=True)
    links = serializers.SerializerMethodField()

    class Meta:
        model = Drift
        fields = [
            "id",
            "execution",
            "workflow",
            "subject",
            "status",
            "findings",
            "first_seen_at",
            "last_seen_at",
            "ended_at",
            "ended_by",
            "reason",
            "replaced_by",
            "links",
        ]

    def get_subject(self, drift: Drift) -> str:
        return execution_subject(drift.execution)

    def get_links(self, drift: Drift) -> dict[str, str]:
        return {
            "self": reverse("drift-detail", kwargs={"drift_id": drift.id}),
            "execution": reverse("execution-detail", kwargs={"execution_id": drift.execution_id}),
        }


def _drifts(request: Request) -> QuerySet[Drift]:
    visible = selectors.executions_visible(request_caller(request))
    return Drift.objects.filter(execution__in=visible).select_related("execution")


class DriftListApi(generics.ListAPIView):
    serializer_class = DriftSerializer
    pagination_class = DriftCursorPagination

    @extend_schema(
        operation_id="drifts_list",
        summary="What the drift watch found, newest first (of the executions you may read)",
        parameters=[
            OpenApiParameter("status", enum=DriftStatus.values),
            OpenApiParameter("workflow", enum=selectors.workflow_names()),
        ],
        responses={(200, JSON): DriftSerializer(many=True), **problems(400, 401)},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Drift]:
        drifts = _drifts(self.request)
        status = choice_param(self.request, "status", DriftStatus.values)
        if status is not None:
            drifts = drifts.filter(status=status)
        workflow = choice_param(self.request, "workflow", selectors.workflow_names(), WORKFLOW_TOLD)
        if workflow is not None:
            drifts = drifts.filter(execution__workflow=workflow)
        return drifts


class DriftDetailApi(APIView):
    @extend_schema(
        operation_id="drifts_retrieve",
        summary="One drift, with what was expected and what is there",
        responses={(200, JSON): DriftSerializer, **problems(401, 404)},
    )
    def get(self, request: Request, drift_id: str) -> Response:
        return Response(DriftSerializer(_drifts(request).get(pk=drift_id)).data)

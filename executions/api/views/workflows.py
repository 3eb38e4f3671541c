from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from executions import selectors
from executions.api.serializers import WorkflowSerializer


class WorkflowListApi(APIView):
    @extend_schema(
        operation_id="workflows_list",
        summary="The workflows and their input JSON Schemas",
        responses={(200, JSON): WorkflowSerializer(many=True), **problems(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(
            [
                {**described, "links": {"executions": _url("execution-create", described)}}
                for described in selectors.workflow_list()
            ]
        )


def _url(name: str, described: dict[str, Any]) -> str:
    return reverse(name, kwargs={"workflow": described["name"]})

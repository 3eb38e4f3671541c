"""The execution resource: ask for one, list them, read one, read its events."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.permissions import MayTrigger, request_caller
from executions import selectors
from executions.acceptance import UnknownWorkflow, execution_accept
from executions.api.params import (
    IDEMPOTENCY_KEY_RE,
    WORKFLOW_TOLD,
    ExecutionCursorPagination,
    check_execution_id,
    choice_param,
    idempotency_key,
    int_param,
    int_parameter,
)
from executions.api.serializers import (
    EventPageSerializer,
    EventSerializer,
    ExecutionSerializer,
    ExecutionSummarySerializer,
)
from executions.models import ExecutionStatus

IDEMPOTENCY_KEY_PARAM = OpenApiParameter(
    name="Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=True,
    type={
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": f"^{IDEMPOTENCY_KEY_RE.pattern}$",
    },
    description=(
        "Client-chosen key (1–255 printable ASCII, no comma: send one key in one header), "
        "scoped to the caller. The same key with the same body returns the execution first "
        "accepted for it (`Idempotent-Replayed: true`); with a different body, 409 "
        "`idempotency_conflict`."
    ),
)


class ExecutionCreateApi(APIView):
    permission_classes = [MayTrigger]
    throttle_scope = "trigger"

    def check_throttles(self, request: Request) -> None:
        # After authentication and the role, before the rate: a request no budget could make
        # acceptable is refused for what it is — a path naming no workflow (404), a missing
        # or malformed Idempotency-Key (400, the header the OpenAPI document requires) — and
        # spends none of the caller's budget. A 429 would tell the caller to send it again.
        _check_request_line(request, self.kwargs["workflow"])
        super().check_throttles(request)

    @extend_schema(
        operation_id="executions_create",
        summary="Ask for an execution of a workflow",
        parameters=[
            IDEMPOTENCY_KEY_PARAM,
            OpenApiParameter(
                "workflow", location=OpenApiParameter.PATH, enum=selectors.workflow_names()
            ),
            OpenApiParameter(
                "Location",
                location=OpenApiParameter.HEADER,
                type=str,
                response=[202],
                description="The execution's URL.",
            ),
            OpenApiParameter(
                "Idempotent-Replayed",
                location=OpenApiParameter.HEADER,
                type=str,
                enum=["true"],
                response=[202],
                description="Present when the answer replays an earlier request with this key.",
            ),
        ],
        request=OpenApiTypes.OBJECT,
        responses={
            (202, JSON): OpenApiResponse(
                ExecutionSerializer, description="Accepted (or replayed)."
            ),
            **problems(400, 401, 403, 404, 409, 413, 415, 422, 429, 503),
        },
        description=(
            "The body is the workflow's input (see GET /api/v1/workflows for each JSON Schema). "
            "The request is durable once answered 202; follow it at the `Location`."
        ),
    )
    def post(self, request: Request, workflow: str) -> Response:
        key = _check_request_line(request, workflow)  # before the body is parsed
        caller = request_caller(request)
        acceptance = execution_accept(
            workflow_name=workflow, body=request.data, idempotency_key=key, caller=caller
        )
        context = {"acceptance": acceptance, "caller": caller}
        data = ExecutionSerializer(acceptance.execution, context=context).data
        headers = {"Location": data["links"]["self"]}
        if acceptance.replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response(data, status=202, headers=headers)


def _check_request_line(request: Request, workflow: str) -> str:
    """The request's Idempotency-Key, once the path names a workflow (a 404 whatever the
    rest) and the key is one (400)."""
    if workflow not in selectors.workflow_names():
        raise UnknownWorkflow(workflow)
    return idempotency_key(request)


class ExecutionListApi(generics.ListAPIView):
    serializer_class = ExecutionSummarySerializer
    pagination_class = ExecutionCursorPagination

    @extend_schema(
        operation_id="executions_list",
        summary="List executions, newest first",
        parameters=[
            OpenApiParameter("workflow", enum=selectors.workflow_names()),
            OpenApiParameter("status", enum=ExecutionStatus.values),
        ],
        responses={
            (200, JSON): ExecutionSummarySerializer(many=True),
            **problems(400, 401),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        status = choice_param(self.request, "status", ExecutionStatus.values)
        workflow = choice_param(self.request, "workflow", selectors.workflow_names(), WORKFLOW_TOLD)
        return selectors.execution_list(
            request_caller(self.request), workflow=workflow, status=status
        )

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "caller": request_caller(self.request)}


class ExecutionDetailApi(APIView):
    @extend_schema(
        operation_id="executions_retrieve",
        summary="One execution",
        responses={(200, JSON): ExecutionSerializer, **problems(401, 404)},
    )
    def get(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        execution, parts = selectors.execution_detail(check_execution_id(execution_id), caller)
        return Response(
            ExecutionSerializer(execution, context={"caller": caller, "parts": parts}).data
        )


class ExecutionEventsApi(APIView):
    @extend_schema(
        operation_id="executions_events",
        summary="The execution's events after a sequence number, in order",
        parameters=[
            int_parameter("after", 0, 0, None, "The last sequence seen"),
            int_parameter("limit", 100, 1, 500, "Page size"),
        ],
        responses={(200, JSON): EventPageSerializer, **problems(400, 401, 404)},
    )
    def get(self, request: Request, execution_id: str) -> Response:
        check_execution_id(execution_id)
        after = int_param(request, "after", 0, 0, None)
        limit = int_param(request, "limit", 100, 1, 500)
        events = selectors.execution_events_visible(
            execution_id, request_caller(request), after=after, limit=limit + 1
        )
        page = events[:limit]
        return Response(
            {
                "events": EventSerializer(page, many=True).data,
                "next_after": page[-1].sequence if page else after,
                "has_more": len(events) > limit,
            }
        )

"""HTTP views: parse, call one service or selector, render. No business logic here."""

from __future__ import annotations

import re
from typing import Any

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, pagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.authentication import principal_of
from alfred.permissions import IsOperator
from alfred.problems import CODES, PROBLEM_CONTENT_TYPE, Problem
from executions import selectors
from executions.acceptance import (
    IdempotencyConflict,
    LaneConflict,
    UnknownWorkflow,
    execution_accept,
)
from executions.api.serializers import (
    AuditEntrySerializer,
    EventPageSerializer,
    EventSerializer,
    ExecutionSerializer,
    ExecutionSummarySerializer,
    ProblemSerializer,
    WorkflowSerializer,
)
from executions.events.outbox import events_after
from executions.models import AuditEntry, Execution, ExecutionStatus
from executions.workflows.base import InvalidInput
from executions.workflows.registry import WORKFLOWS, all_workflows

# Printable ASCII without spaces at the ends; long enough for a UUID, a ULID or a hash.
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$")


def problems(*statuses: int) -> dict[Any, OpenApiResponse]:
    """OpenAPI responses for these error statuses: RFC 9457 problems, with the codes each
    status can carry (from the registry in ``alfred.problems``)."""
    return {
        (status, PROBLEM_CONTENT_TYPE): OpenApiResponse(
            ProblemSerializer,
            description="Problem codes: "
            + ", ".join(f"`{c}`" for c, (st, _) in CODES.items() if st == status),
        )
        for status in statuses
    }


IDEMPOTENCY_KEY_PARAM = OpenApiParameter(
    name="Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=True,
    type=str,
    description=(
        "Client-chosen key (1–255 printable ASCII), scoped to the caller. The same key with "
        "the same body returns the execution first accepted for it (`Idempotent-Replayed: "
        "true`); with a different body, 409 `idempotency_conflict`."
    ),
)


class ExecutionCreateApi(APIView):
    @extend_schema(
        operation_id="executions_create",
        summary="Ask for an execution of a workflow",
        parameters=[
            IDEMPOTENCY_KEY_PARAM,
            OpenApiParameter("workflow", location=OpenApiParameter.PATH, enum=list(WORKFLOWS)),
        ],
        request=OpenApiTypes.OBJECT,
        responses={
            (202, "application/json"): OpenApiResponse(
                ExecutionSerializer, description="Accepted (or replayed)."
            ),
            **problems(400, 401, 403, 404, 409, 413, 415, 422, 503),
        },
        description=(
            "The body is the workflow's input (see GET /api/v1/workflows for each JSON Schema). "
            "The request is durable once answered 202; follow it at the `Location`."
        ),
    )
    def post(self, request: Request, workflow: str) -> Response:
        key = request.headers.get("Idempotency-Key")
        if not key:
            raise Problem("idempotency_key_missing", "Send an Idempotency-Key header.")
        if not IDEMPOTENCY_KEY_RE.match(key):
            raise Problem(
                "idempotency_key_invalid",
                "Idempotency-Key must be 1–255 printable ASCII characters.",
            )
        if workflow not in WORKFLOWS:
            raise Problem(
                "unknown_workflow", f"No workflow named {workflow!r}.", workflows=list(WORKFLOWS)
            )
        try:
            acceptance = execution_accept(
                workflow_name=workflow,
                body=request.data,
                idempotency_key=key,
                principal=principal_of(request.user),
            )
        except UnknownWorkflow:
            raise Problem("unknown_workflow", f"No workflow named {workflow!r}.") from None
        except InvalidInput as exc:
            raise Problem(
                "invalid_input",
                f"The input does not fit the {workflow} schema.",
                errors=[e.as_dict() for e in exc.errors],
            ) from None
        except IdempotencyConflict as exc:
            raise Problem(
                "idempotency_conflict",
                "This Idempotency-Key was used with a different body.",
                execution=exc.execution_id,
            ) from None
        except LaneConflict as exc:
            raise Problem(
                "lane_conflict",
                f"Lane {exc.key} is committed to {exc.token!r} by execution {exc.execution_id}; "
                "a different value fails closed until it finishes.",
                execution=exc.execution_id,
                lane=exc.key,
            ) from None

        execution = acceptance.execution
        data = ExecutionSerializer(execution, context={"acceptance": acceptance}).data
        headers = {"Location": data["links"]["self"]}
        if acceptance.replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response(data, status=202, headers=headers)


class ExecutionCursorPagination(pagination.CursorPagination):
    ordering = "-id"
    page_size = 50
    max_page_size = 200
    page_size_query_param = "limit"


class ExecutionListApi(generics.ListAPIView):
    serializer_class = ExecutionSummarySerializer
    pagination_class = ExecutionCursorPagination

    @extend_schema(
        operation_id="executions_list",
        summary="List executions, newest first",
        parameters=[
            OpenApiParameter("workflow", enum=list(WORKFLOWS)),
            OpenApiParameter("status", enum=ExecutionStatus.values),
        ],
        responses={
            (200, "application/json"): ExecutionSummarySerializer(many=True),
            **problems(400, 401),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        params = self.request.query_params
        status = params.get("status")
        if status and status not in ExecutionStatus.values:
            raise Problem(
                "malformed_request",
                f"Unknown status {status!r}.",
                errors=[{"field": "status", "message": "unknown status"}],
            )
        workflow = params.get("workflow")
        if workflow and workflow not in WORKFLOWS:
            raise Problem(
                "malformed_request",
                f"Unknown workflow {workflow!r}.",
                errors=[{"field": "workflow", "message": "unknown workflow"}],
            )
        return selectors.execution_list(workflow=workflow, status=status)


def _execution_or_404(execution_id: str) -> Execution:
    try:
        return selectors.execution_get(execution_id)
    except Execution.DoesNotExist:
        raise Http404 from None


class ExecutionDetailApi(APIView):
    @extend_schema(
        operation_id="executions_retrieve",
        summary="One execution",
        responses={(200, "application/json"): ExecutionSerializer, **problems(401, 404)},
    )
    def get(self, request: Request, execution_id: str) -> Response:
        return Response(ExecutionSerializer(_execution_or_404(execution_id)).data)


class ExecutionEventsApi(APIView):
    @extend_schema(
        operation_id="executions_events",
        summary="The execution's events after a sequence number, in order",
        parameters=[
            OpenApiParameter("after", int, description="Last sequence seen (default 0)."),
            OpenApiParameter("limit", int, description="Page size, 1–500 (default 100)."),
        ],
        responses={(200, "application/json"): EventPageSerializer, **problems(400, 401, 404)},
    )
    def get(self, request: Request, execution_id: str) -> Response:
        after = _int_param(request, "after", 0, 0, None)
        limit = _int_param(request, "limit", 100, 1, 500)
        if not Execution.objects.filter(pk=execution_id).exists():
            raise Http404
        events = events_after(execution_id, after, limit + 1)
        page = events[:limit]
        return Response(
            {
                "events": EventSerializer(page, many=True).data,
                "next_after": page[-1].sequence if page else after,
                "has_more": len(events) > limit,
            }
        )


def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bound = f"{low}–{high}" if high is not None else f"≥ {low}"
        raise Problem(
            "malformed_request",
            f"{name} must be an integer {bound}.",
            errors=[{"field": name, "message": f"integer {bound}"}],
        )
    return value


class WorkflowListApi(APIView):
    @extend_schema(
        operation_id="workflows_list",
        summary="The workflows and their input JSON Schemas",
        responses={(200, "application/json"): WorkflowSerializer(many=True), **problems(401)},
    )
    def get(self, request: Request) -> Response:
        return Response([_workflow(w) for w in all_workflows()])


def _workflow(workflow: Any) -> dict[str, Any]:
    described = workflow.describe()
    described["links"] = {
        "executions": f"/api/v1/workflows/{workflow.name}/executions",
    }
    return described


class AuditEntryCursorPagination(pagination.CursorPagination):
    ordering = "-created_at"
    page_size = 50
    max_page_size = 200
    page_size_query_param = "limit"


class AuditEntryListApi(generics.ListAPIView):
    """What operators did and why (operator only)."""

    serializer_class = AuditEntrySerializer
    pagination_class = AuditEntryCursorPagination
    permission_classes = [IsOperator]
    queryset = AuditEntry.objects.all()

    @extend_schema(
        operation_id="audit_list",
        summary="The audit log, newest first (operator)",
        responses={
            (200, "application/json"): AuditEntrySerializer(many=True),
            **problems(401, 403),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

"""HTTP views: parse, call one service or selector, render. No business logic here."""

from __future__ import annotations

import re
from typing import Any

from django.http import Http404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, pagination
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.authentication import principal_of
from alfred.openapi import JSON, problems
from alfred.permissions import IsOperator
from alfred.problems import Problem
from executions import selectors
from executions.acceptance import (
    IdempotencyConflict,
    InvalidInput,
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
    WorkflowSerializer,
)
from executions.controls import InvalidState, NotRetryable, execution_cancel, execution_retry
from executions.models import AuditEntry, Execution, ExecutionStatus

# Printable ASCII without spaces at the ends; long enough for a UUID, a ULID or a hash.
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$")


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
            **problems(400, 401, 403, 404, 409, 413, 415, 422, 503),
        },
        description=(
            "The body is the workflow's input (see GET /api/v1/workflows for each JSON Schema). "
            "The request is durable once answered 202; follow it at the `Location`."
        ),
    )
    def post(self, request: Request, workflow: str) -> Response:
        if workflow not in selectors.workflow_names():
            raise Problem(
                "unknown_workflow",
                f"No workflow named {workflow!r}.",
                workflows=selectors.workflow_names(),
            )
        key = request.headers.get("Idempotency-Key")
        if not key:
            raise Problem("idempotency_key_missing", "Send an Idempotency-Key header.")
        if not IDEMPOTENCY_KEY_RE.match(key):
            raise Problem(
                "idempotency_key_invalid",
                "Idempotency-Key must be 1–255 printable ASCII characters.",
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
            raise _lane_conflict(exc) from None

        execution = acceptance.execution
        data = ExecutionSerializer(execution, context={"acceptance": acceptance}).data
        headers = {"Location": data["links"]["self"]}
        if acceptance.replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response(data, status=202, headers=headers)


def _lane_conflict(exc: LaneConflict) -> Problem:
    return Problem(
        "lane_conflict",
        f"Lane {exc.key} is committed to {exc.token!r} by execution {exc.execution_id}; "
        "a different value fails closed until it finishes.",
        execution=exc.execution_id,
        lane=exc.key,
    )


class StrictCursorPagination(pagination.CursorPagination):
    """Cursor pages whose bad input is a 400 problem, not a silent default or a 404."""

    page_size = 50
    max_page_size = 200
    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int:
        return _int_param(request, "limit", self.page_size, 1, self.max_page_size)

    def decode_cursor(self, request: Request) -> Any:
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise Problem(
                "malformed_request",
                "The cursor is not one this API gave out; follow the `next` link as it is.",
                errors=[{"field": "cursor", "message": "invalid cursor"}],
            ) from None


class ExecutionCursorPagination(StrictCursorPagination):
    ordering = "-id"


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
        params = self.request.query_params
        status = params.get("status")
        if status and status not in ExecutionStatus.values:
            raise Problem(
                "malformed_request",
                f"Unknown status {status!r}.",
                errors=[{"field": "status", "message": "unknown status"}],
            )
        workflow = params.get("workflow")
        if workflow and workflow not in selectors.workflow_names():
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
        responses={(200, JSON): ExecutionSerializer, **problems(401, 404)},
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
        responses={(200, JSON): EventPageSerializer, **problems(400, 401, 404)},
    )
    def get(self, request: Request, execution_id: str) -> Response:
        after = _int_param(request, "after", 0, 0, None)
        limit = _int_param(request, "limit", 100, 1, 500)
        if not Execution.objects.filter(pk=execution_id).exists():
            raise Http404
        events = selectors.execution_events(execution_id, after=after, limit=limit + 1)
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


class AuditEntryCursorPagination(StrictCursorPagination):
    ordering = "-created_at"


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
            (200, JSON): AuditEntrySerializer(many=True),
            **problems(401, 403),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class _ControlApi(APIView):
    def respond(self, execution: Execution) -> Response:
        data = ExecutionSerializer(selectors.execution_get(execution.id)).data
        return Response(data, status=202, headers={"Location": data["links"]["self"]})


CONTROL_RESPONSES = {(202, JSON): ExecutionSerializer, **problems(404, 409, 503)}


class ExecutionCancelApi(_ControlApi):
    @extend_schema(
        operation_id="executions_cancel",
        summary="Cancel: at once when waiting or queued, at the next step boundary when running",
        request=None,
        responses=CONTROL_RESPONSES,
    )
    def post(self, request: Request, execution_id: str) -> Response:
        try:
            result = execution_cancel(
                execution_id=execution_id,
                actor=principal_of(request.user),
                reason=_reason(request),
            )
        except Execution.DoesNotExist:
            raise Http404 from None
        except InvalidState as exc:
            raise Problem("invalid_state", str(exc), execution=exc.execution_id) from None
        return self.respond(result.execution)


class ExecutionRetryApi(_ControlApi):
    @extend_schema(
        operation_id="executions_retry",
        summary="Retry a failed or canceled execution: a new run, no step cache",
        request=None,
        responses={**CONTROL_RESPONSES, **problems(422)},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        try:
            execution = execution_retry(execution_id=execution_id, actor=principal_of(request.user))
        except Execution.DoesNotExist:
            raise Http404 from None
        except NotRetryable as exc:
            raise Problem("not_retryable", str(exc), execution=exc.execution_id) from None
        except InvalidState as exc:
            raise Problem("invalid_state", str(exc), execution=exc.execution_id) from None
        except InvalidInput as exc:
            raise Problem(
                "invalid_input",
                "The execution's input no longer fits its workflow's schema.",
                errors=[e.as_dict() for e in exc.errors],
            ) from None
        except LaneConflict as exc:
            raise _lane_conflict(exc) from None
        return self.respond(execution)


def _reason(request: Request) -> str:
    """An optional ``{"reason": "..."}`` body, kept in the audit log."""
    data = request.data
    return str(data.get("reason", ""))[:1000] if isinstance(data, dict) else ""

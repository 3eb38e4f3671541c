"""HTTP views: parse, call one service or selector, render. No business logic here."""

from __future__ import annotations

import re
from typing import Any

from django.http import Http404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.permissions import MayTrigger, ReadsAll, request_caller
from alfred.principals import Caller
from alfred.problems import Problem, shown
from executions import selectors
from executions.acceptance import (
    IdempotencyConflict,
    IdentityHeld,
    InvalidInput,
    LaneConflict,
    UnknownWorkflow,
    execution_accept,
)
from executions.api.params import (
    AuditEntryCursorPagination,
    ExecutionCursorPagination,
    check_execution_id,
    int_param,
)
from executions.api.serializers import (
    AuditEntrySerializer,
    CancelRequestSerializer,
    EventPageSerializer,
    EventSerializer,
    ExecutionSerializer,
    ExecutionSummarySerializer,
    WorkflowSerializer,
)
from executions.controls import (
    InvalidState,
    NotPermitted,
    NotRetryable,
    execution_cancel,
    execution_retry,
)
from executions.models import AuditEntry, Execution, ExecutionStatus

# Printable ASCII without a comma and without spaces at the ends; long enough for a UUID, a
# ULID or a hash. No comma: a proxy or server joins two Idempotency-Key headers into "one,two",
# which would otherwise be accepted as a third key that neither request meant.
IDEMPOTENCY_KEY_RE = re.compile(
    r"[\x21-\x2b\x2d-\x7e](?:[\x20-\x2b\x2d-\x7e]{0,253}[\x21-\x2b\x2d-\x7e])?"
)
IDEMPOTENCY_KEY_PARAM = OpenApiParameter(
    name="Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=True,
    type=str,
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
        if workflow not in selectors.workflow_names():
            raise Problem(
                "unknown_workflow",
                "No workflow by that name; GET /api/v1/workflows lists them.",
                workflows=selectors.workflow_names(),
            )
        key = request.headers.get("Idempotency-Key")
        if not key:
            raise Problem("idempotency_key_missing", "Send an Idempotency-Key header.")
        if not IDEMPOTENCY_KEY_RE.fullmatch(key):
            raise Problem(
                "idempotency_key_invalid",
                "Idempotency-Key must be one key: 1–255 printable ASCII characters without a "
                "comma (two Idempotency-Key headers arrive joined by a comma).",
            )
        try:
            acceptance = execution_accept(
                workflow_name=workflow,
                body=request.data,
                idempotency_key=key,
                caller=request_caller(request),
            )
        except UnknownWorkflow:
            raise Problem(
                "unknown_workflow", "No workflow by that name; GET /api/v1/workflows lists them."
            ) from None
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
        except IdentityHeld:
            raise Problem(
                "identity_conflict",
                "Another principal's execution holds this operation; ask its owner or an operator.",
            ) from None
        except LaneConflict as exc:
            raise _lane_conflict(exc) from None

        execution = acceptance.execution
        context = {"acceptance": acceptance, "caller": request_caller(request)}
        data = ExecutionSerializer(execution, context=context).data
        headers = {"Location": data["links"]["self"]}
        if acceptance.replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response(data, status=202, headers=headers)


def _lane_conflict(exc: LaneConflict) -> Problem:
    held = "" if exc.token is None else f" to {shown(exc.token)}"
    return Problem(
        "lane_conflict",
        f"Lane {exc.key} is committed{held} by execution {exc.execution_id}; "
        "a different value fails closed until it finishes.",
        execution=exc.execution_id,
        lane=exc.key,
    )


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
                "status must be one of " + ", ".join(ExecutionStatus.values) + ".",
                errors=[{"field": "status", "message": "unknown status"}],
            )
        workflow = params.get("workflow")
        if workflow and workflow not in selectors.workflow_names():
            raise Problem(
                "malformed_request",
                "workflow must be the name of a workflow; GET /api/v1/workflows lists them.",
                errors=[{"field": "workflow", "message": "unknown workflow"}],
            )
        return selectors.execution_list(
            request_caller(self.request), workflow=workflow, status=status
        )

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "caller": request_caller(self.request)}


def _execution_or_404(execution_id: str, caller: Caller) -> Execution:
    try:
        return selectors.execution_get(execution_id, caller)
    except Execution.DoesNotExist:
        raise Http404 from None


class ExecutionDetailApi(APIView):
    @extend_schema(
        operation_id="executions_retrieve",
        summary="One execution",
        responses={(200, JSON): ExecutionSerializer, **problems(401, 404)},
    )
    def get(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        execution = _execution_or_404(check_execution_id(execution_id), caller)
        return Response(ExecutionSerializer(execution, context={"caller": caller}).data)


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
        check_execution_id(execution_id)
        after = int_param(request, "after", 0, 0, None)
        limit = int_param(request, "limit", 100, 1, 500)
        if (
            not selectors.executions_visible(request_caller(request))
            .filter(pk=execution_id)
            .exists()
        ):
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


class AuditEntryListApi(generics.ListAPIView):
    """What operators did and why (operators and viewers)."""

    serializer_class = AuditEntrySerializer
    pagination_class = AuditEntryCursorPagination
    permission_classes = [ReadsAll]
    queryset = AuditEntry.objects.all()

    @extend_schema(
        operation_id="audit_list",
        summary="The audit log, newest first (operator, viewer)",
        responses={
            (200, JSON): AuditEntrySerializer(many=True),
            **problems(401, 403),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class _ControlApi(APIView):
    throttle_scope = "control"

    def respond(self, execution: Execution, caller: Caller) -> Response:
        fresh = selectors.execution_get(execution.id)
        data = ExecutionSerializer(fresh, context={"caller": caller}).data
        return Response(data, status=202, headers={"Location": data["links"]["self"]})


CONTROL_RESPONSES = {(202, JSON): ExecutionSerializer, **problems(401, 403, 404, 409, 429, 503)}


class ExecutionCancelApi(_ControlApi):
    @extend_schema(
        operation_id="executions_cancel",
        summary="Cancel: at once when waiting or queued, at the next step boundary when running",
        request=CancelRequestSerializer,
        responses={**CONTROL_RESPONSES, **problems(400, 415, 422)},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        check_execution_id(execution_id)
        form = CancelRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            result = execution_cancel(
                execution_id=execution_id, caller=caller, reason=form.validated_data["reason"]
            )
        except Execution.DoesNotExist:
            raise Http404 from None
        except NotPermitted as exc:
            raise Problem("permission_denied", str(exc), execution=exc.execution_id) from None
        except InvalidState as exc:
            raise Problem("invalid_state", str(exc), execution=exc.execution_id) from None
        return self.respond(result.execution, caller)


class ExecutionRetryApi(_ControlApi):
    @extend_schema(
        operation_id="executions_retry",
        summary="Retry a failed or canceled execution: a new run, no step cache",
        request=None,
        responses={**CONTROL_RESPONSES, **problems(422)},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        check_execution_id(execution_id)
        try:
            execution = execution_retry(execution_id=execution_id, caller=caller)
        except Execution.DoesNotExist:
            raise Http404 from None
        except NotPermitted as exc:
            raise Problem("permission_denied", str(exc), execution=exc.execution_id) from None
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
        return self.respond(execution, caller)

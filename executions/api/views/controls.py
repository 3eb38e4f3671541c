"""The controls (docs/contract.md, "Authentication, roles and ownership"): each a POST that calls
its service in executions.controls and answers 202 with the execution as it is now. Who may act and
which states allow the move are the service's to decide; its refusals are answered from the problem
table. Who may act is asked of it before the body is read (``check_control_usable``): a caller who
may never use the control is told so (403/404), not what is wrong with a body it may not send."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.permissions import request_caller
from alfred.principals import Caller
from executions import selectors
from executions.api.params import check_execution_id
from executions.api.serializers import (
    ApproveRequestSerializer,
    CancelRequestSerializer,
    ExecutionSerializer,
    RejectRequestSerializer,
    RetryRequestSerializer,
    RollbackRequestSerializer,
)
from executions.controls import (
    APPROVE,
    CANCEL,
    REJECT,
    RETRY,
    ROLLBACK,
    check_control_usable,
    execution_approve,
    execution_cancel,
    execution_reject,
    execution_retry,
    execution_rollback,
)
from executions.models import Execution


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
        check_control_usable(execution_id=execution_id, caller=caller, control=CANCEL)
        form = CancelRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        result = execution_cancel(
            execution_id=execution_id, caller=caller, reason=form.validated_data["reason"]
        )
        return self.respond(result.execution, caller)


class ExecutionRetryApi(_ControlApi):
    @extend_schema(
        operation_id="executions_retry",
        summary="Retry a failed or canceled execution: a new run, no step cache",
        request=RetryRequestSerializer,
        responses={**CONTROL_RESPONSES, **problems(400, 415, 422)},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        check_execution_id(execution_id)
        check_control_usable(execution_id=execution_id, caller=caller, control=RETRY)
        form = RetryRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        execution = execution_retry(
            execution_id=execution_id, caller=caller, reason=form.validated_data["reason"]
        )
        return self.respond(execution, caller)


class ExecutionApproveApi(_ControlApi):
    @extend_schema(
        operation_id="executions_approve",
        summary="Approve the pending plan, by its hash (operator): 409 stale_plan for another",
        request=ApproveRequestSerializer,
        responses={**CONTROL_RESPONSES, **problems(400, 415, 422)},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        check_execution_id(execution_id)
        check_control_usable(execution_id=execution_id, caller=caller, control=APPROVE)
        form = ApproveRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        execution = execution_approve(
            execution_id=execution_id,
            caller=caller,
            plan_hash=form.validated_data["plan_hash"],
            force=form.validated_data["force"],
            reason=form.validated_data["reason"],
        )
        return self.respond(execution, caller)


class ExecutionRejectApi(_ControlApi):
    @extend_schema(
        operation_id="executions_reject",
        summary="Reject the pending plan, by its hash (operator): the execution is canceled; "
        "409 stale_plan for another",
        request=RejectRequestSerializer,
        responses={**CONTROL_RESPONSES, **problems(400, 415, 422)},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        check_execution_id(execution_id)
        check_control_usable(execution_id=execution_id, caller=caller, control=REJECT)
        form = RejectRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        result = execution_reject(
            execution_id=execution_id,
            caller=caller,
            plan_hash=form.validated_data["plan_hash"],
            reason=form.validated_data["reason"],
        )
        return self.respond(result.execution, caller)


class ExecutionRollbackApi(_ControlApi):
    @extend_schema(
        operation_id="executions_rollback",
        summary="Roll back what the execution changed, from its receipts (operator)",
        request=RollbackRequestSerializer,
        responses={**CONTROL_RESPONSES, **problems(400, 415, 422)},
    )
    def post(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        check_execution_id(execution_id)
        check_control_usable(execution_id=execution_id, caller=caller, control=ROLLBACK)
        form = RollbackRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        execution = execution_rollback(
            execution_id=execution_id, caller=caller, reason=form.validated_data["reason"]
        )
        return self.respond(execution, caller)

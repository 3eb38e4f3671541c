"""The controls (docs/contract.md, "Authentication, roles and ownership"): each a POST that calls
its service in executions.controls and answers 202 with the execution as it is now, one view
class made per declared control (``CONTROLS``: its operation, summary and body come from the
declaration). Who may act and
which states allow the move are the service's to decide; its refusals are answered from the problem
table. Who may act is asked of it before the body is read (``check_control_usable``): a caller who
may never use the control is told so (403/404), not what is wrong with a body it may not send."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.permissions import request_caller
from alfred.principals import Caller
from executions import selectors
from executions.api.params import check_execution_id
from executions.api.serializers import CONTROL_REQUESTS, ExecutionSerializer
from executions.controls import (
    CONTROLS,
    Control,
    ControlBody,
    check_control_usable,
    control_perform,
)
from executions.models import Execution

CONTROL_RESPONSES = {
    (202, JSON): ExecutionSerializer,
    **problems(401, 403, 404, 409, 429, 503),
    **problems(400, 415, 422),
}


# POST executions/<id>/<control>: one class, and a subclass per control (control_view). No
# docstring: the OpenAPI operation's words are the control's summary.
class ControlApi(APIView):
    throttle_scope = "control"
    control: Control

    def post(self, request: Request, execution_id: str) -> Response:
        caller = request_caller(request)
        check_execution_id(execution_id)
        check_control_usable(execution_id=execution_id, caller=caller, control=self.control)
        form = CONTROL_REQUESTS[self.control.name](data=request.data)
        form.is_valid(raise_exception=True)
        execution = control_perform(
            self.control,
            execution_id=execution_id,
            caller=caller,
            body=ControlBody(**form.validated_data),
        )
        return self.respond(execution, caller)

    def respond(self, execution: Execution, caller: Caller) -> Response:
        fresh = selectors.execution_get(execution.id)
        data = ExecutionSerializer(fresh, context={"caller": caller}).data
        return Response(data, status=202, headers={"Location": data["links"]["self"]})


def control_view(control: Control) -> type[ControlApi]:
    """The view of ``control``, its OpenAPI operation ``executions_<name>``."""

    def post(self: ControlApi, request: Request, execution_id: str) -> Response:
        return ControlApi.post(self, request, execution_id)

    documented: Any = extend_schema(
        operation_id=f"executions_{control.name}",
        summary=control.summary,
        request=CONTROL_REQUESTS[control.name],
        responses=CONTROL_RESPONSES,
    )(post)
    name = f"Execution{control.name.title()}Api"
    return type(name, (ControlApi,), {"control": control, "post": documented})


CONTROL_VIEWS: dict[str, type[ControlApi]] = {c.name: control_view(c) for c in CONTROLS}

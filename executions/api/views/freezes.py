"""The change freezes over HTTP (docs/contract.md, "Change freezes"): anyone with a role reads
them (an integration sees why its execution waits); operators declare and end them, and let one
execution through (``executions.freezes``: the views only parse, call and render)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.permissions import IsOperator, request_caller
from alfred.text import FreeTextField
from executions.freezes import (
    freeze_declare,
    freeze_end,
    freeze_exempt,
    freeze_state,
    held_executions,
)
from executions.models import Freeze
from executions.runtime.clock import db_now


def _globs(what: str) -> serializers.ListField:
    return serializers.ListField(
        child=FreeTextField(max_length=200),  # no control character (a JSON column's NUL)
        min_length=1,
        max_length=50,
        default=["*"],
        help_text=f"Globs on the {what} it covers (default ['*']: all).",
    )


class FreezeSerializer(serializers.ModelSerializer):
    in_force = serializers.SerializerMethodField()
    holds = serializers.SerializerMethodField()

    class Meta:
        model = Freeze
        fields = [
            "id",
            "reason",
            "starts_at",
            "ends_at",
            "workflows",
            "subjects",
            "in_force",
            "holds",
            "created_by",
            "created_at",
            "ended_at",
            "ended_by",
        ]

    @extend_schema_field(serializers.BooleanField())
    def get_in_force(self, freeze: Freeze) -> bool:
        return freeze_state(freeze, self.context.get("now") or db_now()) == "in force"

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_holds(self, freeze: Freeze) -> list[str]:
        """The executions it holds now, before their first change."""
        if not self.context.get("detail"):
            return []
        return [execution.id for execution in held_executions(freeze)]


class FreezeDeclareSerializer(serializers.Serializer):
    reason = FreeTextField(help_text="Why: shown to whoever the freeze holds. Required.")
    starts_at = serializers.DateTimeField(required=False, help_text="Default: now.")
    ends_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="Default: until an operator ends it."
    )
    workflows = _globs("workflow names")
    subjects = _globs("subjects (what an execution acts on, as its list shows it)")


class FreezeEndSerializer(serializers.Serializer):
    reason = FreeTextField(default="", allow_blank=True, help_text="Why (audit log).")


class FreezeExemptSerializer(serializers.Serializer):
    execution = serializers.CharField(max_length=40, help_text="The execution to let through.")
    reason = FreeTextField(help_text="Why this one may change things now (audit log). Required.")


class FreezeListApi(APIView):
    throttle_scope = "control"  # a declaration is a control; a read is not throttled

    def get_permissions(self) -> Sequence[Any]:
        return [IsOperator()] if self.request.method == "POST" else super().get_permissions()

    def get_throttles(self) -> list[BaseThrottle]:
        return super().get_throttles() if self.request.method == "POST" else []

    @extend_schema(
        operation_id="freezes_list",
        summary="Change freezes, newest first",
        responses={(200, JSON): FreezeSerializer(many=True), **problems()},
    )
    def get(self, request: Request) -> Response:
        freezes = Freeze.objects.order_by("-starts_at")[:200]
        return Response(FreezeSerializer(freezes, many=True, context={"now": db_now()}).data)

    @extend_schema(
        operation_id="freezes_create",
        summary="Declare a change freeze (operator; audited)",
        request=FreezeDeclareSerializer,
        responses={(201, JSON): FreezeSerializer, **problems(400, 401, 403, 409, 422, 429, 503)},
    )
    def post(self, request: Request) -> Response:
        form = FreezeDeclareSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        freeze = freeze_declare(caller=request_caller(request), **form.validated_data)
        return Response(FreezeSerializer(freeze).data, status=201)


class FreezeDetailApi(APIView):
    @extend_schema(
        operation_id="freezes_retrieve",
        summary="One change freeze, with the executions it holds",
        responses={(200, JSON): FreezeSerializer, **problems(404)},
    )
    def get(self, request: Request, freeze_id: str) -> Response:
        freeze = Freeze.objects.get(pk=freeze_id)
        return Response(FreezeSerializer(freeze, context={"detail": True}).data)


class FreezeEndApi(APIView):
    permission_classes = [IsOperator]
    throttle_scope = "control"

    @extend_schema(
        operation_id="freezes_end",
        summary="End a change freeze now: what it holds goes on (operator; audited)",
        request=FreezeEndSerializer,
        responses={
            (202, JSON): FreezeSerializer,
            **problems(400, 401, 403, 404, 409, 422, 429, 503),
        },
    )
    def post(self, request: Request, freeze_id: str) -> Response:
        form = FreezeEndSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        freeze = freeze_end(
            caller=request_caller(request),
            freeze_id=freeze_id,
            reason=form.validated_data["reason"],
        )
        return Response(FreezeSerializer(freeze).data, status=202)


class FreezeExemptApi(APIView):
    permission_classes = [IsOperator]
    throttle_scope = "control"

    @extend_schema(
        operation_id="freezes_exempt",
        summary="Let one execution through a change freeze (operator; audited)",
        request=FreezeExemptSerializer,
        responses={
            (202, JSON): FreezeSerializer,
            **problems(400, 401, 403, 404, 409, 422, 429, 503),
        },
    )
    def post(self, request: Request, freeze_id: str) -> Response:
        form = FreezeExemptSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        freeze_exempt(
            caller=request_caller(request),
            freeze_id=freeze_id,
            execution_id=form.validated_data["execution"],
            reason=form.validated_data["reason"],
        )
        freeze = Freeze.objects.get(pk=freeze_id)
        return Response(FreezeSerializer(freeze, context={"detail": True}).data, status=202)

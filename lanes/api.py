"""The lanes' HTTP views, and how the API answers the lanes services' refusals
(:data:`PROBLEMS`, registered in ``LanesConfig.ready``)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.permissions import IsOperator, request_caller
from alfred.problems import ProblemContext, ProblemMap, not_found_detail, shown
from alfred.text import FreeTextField
from lanes.models import Lane, LaneWaiter
from lanes.selectors import lane_list, lane_queue
from lanes.services import LaneConflict, LaneOwnerMismatch, lane_recover


def _lane_conflict_detail(exc: LaneConflict, context: ProblemContext) -> str:
    held = "" if exc.token is None else f" to {shown(exc.token)}"
    return (
        f"Lane {exc.key} is committed{held} by execution {exc.execution_id}; "
        "a different value fails closed until it finishes."
    )


PROBLEMS: tuple[ProblemMap[Any], ...] = (
    # A claim refused at acceptance or retry: names the execution that holds the lane.
    ProblemMap(
        LaneConflict,
        "lane_conflict",
        _lane_conflict_detail,
        members=lambda exc: {"execution": exc.execution_id, "lane": exc.key},
    ),
    ProblemMap(Lane.DoesNotExist, "not_found", not_found_detail),
    # Someone acted on the lane first (and LaneOwnerActive, LaneNotQueued): the owner now.
    ProblemMap(
        LaneOwnerMismatch,
        "invalid_state",
        members=lambda exc: {"lane": exc.key, "owner": exc.actual},
    ),
)


class LaneWaiterSerializer(serializers.ModelSerializer):
    execution = serializers.CharField(source="execution_id")

    class Meta:
        model = LaneWaiter
        fields = ["execution", "token", "priority", "created_at"]


class LaneSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner_id", allow_null=True)
    queued = serializers.IntegerField(source="queued_count", read_only=True)

    class Meta:
        model = Lane
        fields = [
            "key",
            "state",
            "owner",
            "owner_token",
            "version",
            "queued",
            "reason",
            "updated_at",
        ]


class LaneDetailSerializer(LaneSerializer):
    queue = serializers.SerializerMethodField()

    class Meta(LaneSerializer.Meta):
        fields = [*LaneSerializer.Meta.fields, "queue"]

    @extend_schema_field(LaneWaiterSerializer(many=True))
    def get_queue(self, lane: Lane) -> Any:
        """The FIFO queue: urgent work (continuations, rollbacks) first, then by arrival."""
        return LaneWaiterSerializer(lane_queue(lane.key), many=True).data


MAX_LANE_KEY_LENGTH = 200  # Lane.key's max_length


def check_lane_key(key: str) -> str:
    """``key`` if a lane could have it; else 404 before any query: at most the column's
    length, printable (no NUL nor other control character)."""
    if not key or len(key) > MAX_LANE_KEY_LENGTH or not key.isprintable():
        raise Http404
    return key


class LaneListApi(APIView):
    @extend_schema(
        operation_id="lanes_list",
        summary="Concurrency lanes",
        responses={(200, JSON): LaneSerializer(many=True), **problems()},
    )
    def get(self, request: Request) -> Response:
        return Response(LaneSerializer(lane_list(), many=True).data)


class LaneDetailApi(APIView):
    @extend_schema(
        operation_id="lanes_retrieve",
        summary="One lane and its queue",
        responses={(200, JSON): LaneDetailSerializer, **problems(404)},
    )
    def get(self, request: Request, key: str) -> Response:
        lane = lane_list().filter(key=check_lane_key(key)).first()
        if lane is None:
            raise Http404
        return Response(LaneDetailSerializer(lane).data)


EXECUTION_ID = r"^exe_[0-9A-HJKMNP-TV-Z]{26}\Z"
EXECUTION_ID_EXPECTED = (
    "Expected an execution id: exe_ and 26 characters of Crockford base32 (digits and "
    "upper-case letters but I, L, O and U), e.g. exe_01J9Z3Q8K2M4N6P8R0S2T4V6W8."
)


class LaneRecoverSerializer(serializers.Serializer):
    # Execution ids as alfred.ids makes them: "exe_" and 26 Crockford base32 characters.
    expected_owner = serializers.RegexField(
        EXECUTION_ID,
        allow_null=True,
        help_text="The owner you saw: refused (409) if it changed meanwhile.",
        error_messages={"invalid": EXECUTION_ID_EXPECTED},
    )
    reason = FreeTextField()
    to = serializers.RegexField(
        EXECUTION_ID,
        required=False,
        help_text="A queued execution to hand the lane to (default: the next).",
        error_messages={"invalid": EXECUTION_ID_EXPECTED},
    )


class LaneRecoverApi(APIView):
    permission_classes = [IsOperator]
    throttle_scope = "control"

    @extend_schema(
        operation_id="lanes_recover",
        summary="Release a blocked lane to the next in line (operator; audited)",
        request=LaneRecoverSerializer,
        responses={
            (202, JSON): LaneDetailSerializer,
            **problems(400, 401, 403, 404, 409, 422, 429, 503),
        },
    )
    def post(self, request: Request, key: str) -> Response:
        check_lane_key(key)
        form = LaneRecoverSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        lane_recover(
            key=key,
            expected_owner=form.validated_data["expected_owner"],
            actor=request_caller(request).principal,
            reason=form.validated_data["reason"],
            to=form.validated_data.get("to"),
        )
        lane = lane_list().get(key=key)
        return Response(LaneDetailSerializer(lane).data, status=202)

from __future__ import annotations

from typing import Any

from django.db.models import Count
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from lanes.models import Lane, LaneWaiter


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
    queue = LaneWaiterSerializer(many=True, source="ordered_waiters")

    class Meta(LaneSerializer.Meta):
        fields = [*LaneSerializer.Meta.fields, "queue"]


_PROBLEM = OpenApiResponse({"$ref": "#/components/schemas/Problem"}, description="RFC 9457 problem")


def _lanes() -> Any:
    return Lane.objects.annotate(queued_count=Count("waiters")).order_by("key")


class LaneListApi(APIView):
    @extend_schema(
        operation_id="lanes_list",
        summary="Concurrency lanes",
        responses={200: LaneSerializer(many=True), 401: _PROBLEM},
    )
    def get(self, request: Request) -> Response:
        return Response(LaneSerializer(_lanes(), many=True).data)


class LaneDetailApi(APIView):
    @extend_schema(
        operation_id="lanes_retrieve",
        summary="One lane and its FIFO queue",
        responses={200: LaneDetailSerializer, 401: _PROBLEM, 404: _PROBLEM},
    )
    def get(self, request: Request, key: str) -> Response:
        lane = _lanes().filter(key=key).first()
        if lane is None:
            raise Http404
        lane.ordered_waiters = list(lane.waiters.order_by("priority", "id"))
        return Response(LaneDetailSerializer(lane).data)

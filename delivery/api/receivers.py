"""Inbound receivers (delivery/receivers.py): verified before anything is read,
so an unverifiable request is 401 and changes nothing."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.openapi import JSON, problems
from alfred.problems import Problem
from delivery.receivers import (
    Received,
    Unreadable,
    Unverified,
    argocd_notification,
    argocd_verify,
    github_topics,
    github_verify,
    notification_receive,
)


class ReceivedSerializer(serializers.Serializer):
    duplicate = serializers.BooleanField(help_text="This delivery id was received before.")
    topics = serializers.ListField(child=serializers.CharField())
    woken = serializers.IntegerField(help_text="Waits whose next poll was brought forward.")


def _raw(request: Request) -> bytes:
    django_request = request._request
    if hasattr(django_request, "_body"):
        return bytes(django_request._body)
    return django_request.read(settings.ALFRED_RECEIVER_MAX_BODY_BYTES + 1)


def _answer(received: Received) -> Response:
    return Response(
        {"duplicate": received.duplicate, "topics": list(received.topics), "woken": received.woken}
    )


class Receiver(APIView):
    # The sender proves itself with a signature or a shared secret, not an Alfred token.
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    parser_classes: list[type] = []


class GitHubReceiverApi(Receiver):
    @extend_schema(
        operation_id="receivers_github",
        summary="GitHub webhook (push): wakes the waits on that repository at once",
        parameters=[
            OpenApiParameter("X-Hub-Signature-256", str, OpenApiParameter.HEADER, required=True),
            OpenApiParameter("X-GitHub-Delivery", str, OpenApiParameter.HEADER, required=True),
            OpenApiParameter("X-GitHub-Event", str, OpenApiParameter.HEADER, required=True),
        ],
        request={"application/json": OpenApiTypes.OBJECT},
        responses={(200, JSON): ReceivedSerializer, **problems(400, 401)},
    )
    def post(self, request: Request) -> Response:
        body = _raw(request)
        try:
            github_verify(body, request.headers.get("X-Hub-Signature-256", ""))
        except Unverified as exc:
            raise Problem("authentication_failed", str(exc)) from None
        delivery = request.headers.get("X-GitHub-Delivery", "").strip()
        if not delivery:
            raise Problem("malformed_request", "X-GitHub-Delivery is missing.")
        try:
            topics = github_topics(request.headers.get("X-GitHub-Event", ""), body)
        except Unreadable as exc:
            raise Problem("malformed_request", str(exc)) from None
        return _answer(notification_receive("github", delivery, topics))


class ArgoCDReceiverApi(Receiver):
    @extend_schema(
        operation_id="receivers_argocd",
        summary="ArgoCD notification: wakes the waits on that application at once",
        description=(
            'Body `{"app": "<application>", "id": "<delivery id>"}` (or the id in an '
            "`X-Delivery-Id` header); `Authorization: Bearer <ALFRED_ARGOCD_WEBHOOK_SECRET>`."
        ),
        parameters=[OpenApiParameter("X-Delivery-Id", str, OpenApiParameter.HEADER)],
        request={"application/json": OpenApiTypes.OBJECT},
        responses={(200, JSON): ReceivedSerializer, **problems(400, 401)},
    )
    def post(self, request: Request) -> Response:
        body = _raw(request)
        try:
            argocd_verify(request.headers.get("Authorization", ""))
        except Unverified as exc:
            raise Problem("authentication_failed", str(exc)) from None
        try:
            delivery, topics = argocd_notification(body, request.headers.get("X-Delivery-Id", ""))
        except Unreadable as exc:
            raise Problem("malformed_request", str(exc)) from None
        return _answer(notification_receive("argocd", delivery, topics))

"""Webhook endpoints and their deliveries (operators only): thin views over
``delivery.endpoints`` and ``delivery.relay``."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alfred.fields import StrictBooleanField
from alfred.openapi import JSON, problems
from alfred.permissions import IsOperator, IsPrincipal, request_caller
from alfred.problems import Problem
from alfred.text import FreeTextField
from delivery.endpoints import (
    webhook_endpoint_delete,
    webhook_endpoint_save,
    webhook_secret_rotate,
)
from delivery.relay import deliveries_redeliver, delivery_redeliver
from executions.api.params import StrictCursorPagination
from executions.events import EVENT_CATALOGUE
from executions.models import DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookEndpoint

# The types an endpoint may ask for: the public catalogue (executions.events), in its order.
EVENT_TYPES = list(EVENT_CATALOGUE)
# (The list itself is too long for a message's 200 characters: the message names where it is.)
EVENT_TYPE_EXPECTED = (
    "Expected an event type of the catalogue (GET /api/v1/webhooks/event-types lists them, "
    "the document declares them as an enum), e.g. execution.failed."
)


# What may follow a URL's host and port (RFC 3986): a path, a query, a fragment, each of its
# own characters or %-escapes. Only ASCII: a URL is a URI (``format: uri``), an IRI is not.
_PCHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
_TAIL = rf"(?:/{_PCHAR}*)*(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_TAIL_RE = re.compile(_TAIL)
URL_EXPECTED = (
    "Expected an http(s) URL, a URI: a host name, then ASCII URI characters only (an IDN "
    "host as its xn-- A-label, anything else %-escaped), e.g. https://hooks.example.com/alfred."
)


def webhook_url_pattern(*, production: bool) -> str:
    """The form of a webhook endpoint's URL the OpenAPI document states (ECMA syntax, which
    Python's ``re`` reads alike): http(s) (https only in production), a host name of labels of
    letters, digits and inner hyphens, at most 63 characters each and 253 in all, with an
    alphabetic top-level label (or an ``xn--`` A-label), an optional port, then a path, query
    and fragment of URI characters.

    It is what Django's URL validator, :class:`WebhookUrlField` and ``endpoint_url_check``
    take, written down, so that what fits the document is accepted: ``format: uri`` alone
    admitted hosts no URL validator takes (Schemathesis's ST202). It leaves out forms the API
    also takes — IP literals, ``localhost`` — whose acceptance depends on
    ALFRED_WEBHOOK_ALLOW_PRIVATE."""
    label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    top = r"(?:[A-Za-z][A-Za-z-]{0,61}[A-Za-z]|xn--[A-Za-z0-9]{1,59})"
    port = (
        r"(?::(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}"
        r"|655[0-2][0-9]|6553[0-5]))?"
    )
    scheme = "https" if production else "https?"
    # (?!.*\s) first: Python's "$" also matches before a final newline, ECMA's does not.
    return (
        rf"^(?!.*\s){scheme}://(?=[^/?#:]{{1,253}}(?:[/?#:]|$))(?:{label}\.)+{top}\.?"
        rf"{port}{_TAIL}$"
    )


class WebhookUrlField(serializers.URLField):
    """A webhook endpoint's URL: one Django's URL validator takes that is also a URI — ASCII,
    with a path, query and fragment of URI characters (``format: uri`` in the document;
    Django's validator alone also takes an IRI, or control characters past the host).
    ``webhook_url_pattern`` states its form in the document."""

    def to_internal_value(self, data: Any) -> str:
        url = str(super().to_internal_value(data))
        start = url.find("://") + 3
        cut = min((i for i in (url.find(c, start) for c in "/?#") if i >= 0), default=len(url))
        if not url.isascii() or not _TAIL_RE.fullmatch(url[cut:]):
            raise serializers.ValidationError(URL_EXPECTED)
        return url


class WebhookUrlFieldSchema(OpenApiSerializerFieldExtension):
    """The URL a client sends is declared with ``webhook_url_pattern``; the one an answer
    shows is not: an endpoint saved with a form the pattern leaves out (an IP literal) is
    still shown as it is."""

    target_class = WebhookUrlField

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["pattern"] = webhook_url_pattern(production=settings.PRODUCTION)
        return dict(schema)


class WebhookEndpointSerializer(serializers.ModelSerializer):
    url = WebhookUrlField(max_length=2000)
    description = FreeTextField(max_length=200, required=False, allow_blank=True, default="")
    event_types = serializers.ListField(
        child=serializers.ChoiceField(
            choices=EVENT_TYPES, error_messages={"invalid_choice": EVENT_TYPE_EXPECTED}
        ),
        required=False,
        max_length=100,
        help_text="Event types to send (e.g. execution.failed); empty: every event.",
    )
    active = StrictBooleanField(required=False, default=True)
    secret_previous_until = serializers.DateTimeField(
        source="previous_secret_expires_at",
        read_only=True,
        allow_null=True,
        help_text="After a rotation: until when the old secret signs beside the new one.",
    )

    class Meta:
        model = WebhookEndpoint
        fields = [
            "id",
            "url",
            "description",
            "event_types",
            "active",
            "disabled_reason",
            "secret_previous_until",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "disabled_reason", "created_at", "updated_at"]

    def validate_event_types(self, value: list[str]) -> list[str]:
        return sorted(set(value))


class EventTypeSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=EVENT_TYPES)
    description = serializers.CharField(help_text="When an event of this type is written.")


class WebhookEndpointCreatedSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(help_text="The signing secret: shown this once.")

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]


class SecretSerializer(serializers.Serializer):
    secret = serializers.CharField(help_text="The new signing secret: shown this once.")
    secret_previous_until = serializers.DateTimeField()


class WebhookAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookAttempt
        fields = ["number", "status_code", "duration_ms", "response_excerpt", "error", "created_at"]


class WebhookDeliverySerializer(serializers.ModelSerializer):
    event = serializers.CharField(source="event.key", help_text="Also its webhook-id.")
    event_type = serializers.CharField(source="event.type")
    execution = serializers.CharField(source="event.execution_id")
    attempts_log = WebhookAttemptSerializer(source="log", many=True, read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "endpoint",
            "event",
            "event_type",
            "execution",
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "created_at",
            "delivered_at",
            "attempts_log",
        ]


class ReasonSerializer(serializers.Serializer):
    reason = FreeTextField(required=False, allow_blank=True, default="")


class RedeliveredSerializer(serializers.Serializer):
    redelivered = serializers.IntegerField(help_text="How many deliveries were put back.")


_DELIVERY_ID = re.compile(r"[0-9]{1,18}")


def _endpoint(endpoint_id: str) -> WebhookEndpoint:
    found = WebhookEndpoint.objects.filter(pk=endpoint_id[:40]).first()
    if found is None:
        raise Http404
    return found


def _invalid(exc: DjangoValidationError) -> Problem:
    return Problem(
        "invalid_input",
        "; ".join(exc.messages),
        # A JSON Pointer into the body, as every other invalid_input names its field.
        errors=[{"field": "/url", "message": message} for message in exc.messages],
    )


def _reason(request: Request) -> str:
    reason = ReasonSerializer(data=request.data)
    reason.is_valid(raise_exception=True)
    return str(reason.validated_data["reason"])


class WebhookEventTypeListApi(APIView):
    """The public event catalogue: what an endpoint's ``event_types`` may name (and what the
    polling API, the streams and webhooks carry)."""

    permission_classes = [IsPrincipal]

    @extend_schema(
        operation_id="webhook_event_types_list",
        summary="The event types an integrator receives, and a webhook endpoint may ask for",
        responses={(200, JSON): EventTypeSerializer(many=True), **problems(401)},
    )
    def get(self, request: Request) -> Response:
        types = [{"type": name, "description": text} for name, text in EVENT_CATALOGUE.items()]
        return Response(types)


class WebhookEndpointListApi(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="webhook_endpoints_list",
        summary="Webhook endpoints (operator)",
        responses={(200, JSON): WebhookEndpointSerializer(many=True), **problems(401, 403)},
    )
    def get(self, request: Request) -> Response:
        endpoints = WebhookEndpoint.objects.order_by("created_at")
        return Response(WebhookEndpointSerializer(endpoints, many=True).data)

    @extend_schema(
        operation_id="webhook_endpoints_create",
        summary="Add a webhook endpoint; its signing secret is in this answer only",
        request=WebhookEndpointSerializer,
        responses={(201, JSON): WebhookEndpointCreatedSerializer, **problems(401, 403, 422)},
    )
    def post(self, request: Request) -> Response:
        serializer = WebhookEndpointSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        endpoint = WebhookEndpoint(**serializer.validated_data)
        try:
            secret = webhook_endpoint_save(endpoint, caller=request_caller(request))
        except DjangoValidationError as exc:
            raise _invalid(exc) from None
        body = WebhookEndpointSerializer(endpoint).data
        return Response({**body, "secret": secret}, status=201)


class WebhookEndpointDetailApi(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="webhook_endpoints_get",
        summary="One webhook endpoint (operator)",
        responses={(200, JSON): WebhookEndpointSerializer, **problems(401, 403, 404)},
    )
    def get(self, request: Request, endpoint_id: str) -> Response:
        return Response(WebhookEndpointSerializer(_endpoint(endpoint_id)).data)

    @extend_schema(
        operation_id="webhook_endpoints_update",
        summary="Change an endpoint's URL, description, event types or whether it is active",
        request=WebhookEndpointSerializer(partial=True),
        responses={(200, JSON): WebhookEndpointSerializer, **problems(401, 403, 404, 422)},
    )
    def patch(self, request: Request, endpoint_id: str) -> Response:
        endpoint = _endpoint(endpoint_id)
        serializer = WebhookEndpointSerializer(endpoint, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        for name, value in serializer.validated_data.items():
            setattr(endpoint, name, value)
        try:
            webhook_endpoint_save(
                endpoint, caller=request_caller(request), changed=serializer.validated_data
            )
        except DjangoValidationError as exc:
            raise _invalid(exc) from None
        return Response(WebhookEndpointSerializer(endpoint).data)

    @extend_schema(
        operation_id="webhook_endpoints_delete",
        summary="Delete an endpoint and what it is owed",
        responses={204: None, **problems(401, 403, 404)},
    )
    def delete(self, request: Request, endpoint_id: str) -> Response:
        endpoint = _endpoint(endpoint_id)
        if not webhook_endpoint_delete(endpoint.pk, caller=request_caller(request)):
            raise Http404
        return Response(status=204)


class WebhookEndpointRotateApi(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="webhook_endpoints_rotate_secret",
        summary="A new signing secret (in this answer only); the old one signs beside it for 24 h",
        request=None,
        responses={(200, JSON): SecretSerializer, **problems(401, 403, 404)},
    )
    def post(self, request: Request, endpoint_id: str) -> Response:
        endpoint = _endpoint(endpoint_id)
        secret = webhook_secret_rotate(endpoint.pk, caller=request_caller(request))
        endpoint.refresh_from_db()
        return Response(
            {"secret": secret, "secret_previous_until": endpoint.previous_secret_expires_at}
        )


class WebhookDeliveryCursorPagination(StrictCursorPagination):
    """An endpoint's deliveries, newest first, as the executions are paged (``next`` and
    ``previous`` links, ``limit`` 1–200): by id, unique and in the order they were owed, so
    a page never skips or repeats a delivery owed meanwhile."""

    ordering = "-id"
    position_pattern = "[1-9][0-9]{0,17}"


class WebhookDeliveryListApi(generics.ListAPIView):
    permission_classes = [IsOperator]
    serializer_class = WebhookDeliverySerializer
    pagination_class = WebhookDeliveryCursorPagination

    @extend_schema(
        operation_id="webhook_deliveries_list",
        summary="An endpoint's deliveries, newest first, with every attempt (operator)",
        parameters=[OpenApiParameter("status", str, enum=DeliveryStatus.values)],
        responses={
            (200, JSON): WebhookDeliverySerializer(many=True),
            **problems(400, 401, 403, 404),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        endpoint = _endpoint(self.kwargs["endpoint_id"])
        status = self.request.query_params.get("status")
        if status is not None and status not in DeliveryStatus.values:
            raise Problem(
                "malformed_request",
                f"status must be one of {', '.join(DeliveryStatus.values)}",
                errors=[{"field": "status", "message": "unknown status"}],
            )
        deliveries = (
            WebhookDelivery.objects.filter(endpoint=endpoint)
            .select_related("event")
            .prefetch_related("log")
        )
        return deliveries.filter(status=status) if status else deliveries


class WebhookEndpointRedeliverApi(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="webhook_endpoints_redeliver_failed",
        summary="Send every failed delivery of the endpoint again (same webhook-id)",
        request=ReasonSerializer,
        responses={(202, JSON): RedeliveredSerializer, **problems(401, 403, 404)},
    )
    def post(self, request: Request, endpoint_id: str) -> Response:
        endpoint = _endpoint(endpoint_id)
        reason = _reason(request)
        caller = request_caller(request)
        count = deliveries_redeliver(
            actor=caller.principal, actor_name=caller.name, reason=reason, endpoint_id=endpoint.pk
        )
        return Response({"redelivered": count}, status=202)


class WebhookDeliveryRedeliverApi(APIView):
    permission_classes = [IsOperator]

    @extend_schema(
        operation_id="webhook_deliveries_redeliver",
        summary="Send one delivery again now (same webhook-id), whatever became of it",
        description=(
            "Delivered, failed, or pending and waiting out its back-off: it is sent at once "
            "and its retry schedule starts over. 409 `delivery_in_flight` while a relay is "
            "sending it (the problem's `claimed_until` says by when its answer is recorded)."
        ),
        request=ReasonSerializer,
        responses={(202, JSON): RedeliveredSerializer, **problems(401, 403, 404, 409)},
    )
    def post(self, request: Request, delivery_id: str) -> Response:
        if not _DELIVERY_ID.fullmatch(delivery_id):
            raise Http404
        if not WebhookDelivery.objects.filter(pk=int(delivery_id)).exists():
            raise Http404
        reason = _reason(request)
        caller = request_caller(request)
        delivery_redeliver(
            int(delivery_id), actor=caller.principal, actor_name=caller.name, reason=reason
        )
        return Response({"redelivered": 1}, status=202)

"""Webhook endpoints (configuration operators edit), their deliveries with every attempt, and
the notifications the receivers took in."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import mark_safe
from django.utils.timezone import localtime

from alfred.admin_base import ReadOnlyAdmin, ReadOnlyInline, WritableAdmin, admin_caller
from alfred.admin_confirm import ConfirmItem, confirmation_page, reason_confirmed
from alfred.readonly import read_only
from delivery.endpoints import (
    endpoint_url_check,
    webhook_endpoint_delete,
    webhook_endpoint_save,
    webhook_secret_rotate,
)
from delivery.relay import deliveries_redeliver
from executions.events import EVENT_CATALOGUE
from executions.models import (
    DeliveryStatus,
    InboundNotification,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from executions.runtime.clock import db_now


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https")
    event_types = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Event types to send, separated by commas (e.g. execution.succeeded, "
        "execution.failed); empty: every event.",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["url", "description", "event_types", "active"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["event_types"] = ", ".join(self.instance.event_types or [])

    def clean_event_types(self) -> list[str]:
        types = [t.strip() for t in self.cleaned_data["event_types"].split(",") if t.strip()]
        unknown = [t for t in types if t not in EVENT_CATALOGUE]
        if unknown:
            raise ValidationError(
                f"not an event type: {', '.join(repr(t[:60]) for t in unknown[:5])}; "
                f"the event types are {', '.join(EVENT_CATALOGUE)}"
            )
        return sorted(set(types))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("url"):
            try:
                endpoint_url_check(data["url"])
            except ValidationError as exc:
                self.add_error("url", exc)
        return data


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(WritableAdmin):
    """The signing secret is generated on creation and shown once, on a page of its own
    (``secret.html``: not in a message, which would travel in a cookie); later it can only be
    rotated (a new one, shown the same way)."""

    form = WebhookEndpointForm
    list_display = ["url", "description", "active", "deliveries", "disabled_reason", "created_at"]
    list_filter = ["active"]
    readonly_fields = [
        "id",
        "deliveries",
        "recent_deliveries",
        "disabled_reason",
        "previous_secret_expires_at",
        "created_at",
        "updated_at",
    ]
    actions = ["rotate_secret", "redeliver_failed"]
    RECENT = 10

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookEndpoint]:
        counted = {
            f"deliveries_{status}": Count("deliveries", filter=Q(deliveries__status=status))
            for status in DeliveryStatus.values
        }
        return super().get_queryset(request).annotate(**counted)

    @admin.display(description="Delivery log")
    def deliveries(self, endpoint: WebhookEndpoint) -> str:
        """Counts by status, each linking to those deliveries."""
        if endpoint.pk is None:
            return "—"
        log = reverse("admin:executions_webhookdelivery_changelist")
        parts = [
            format_html(
                '<a href="{}?{}">{} {}</a>',
                log,
                urlencode({"endpoint__id__exact": endpoint.pk, "status__exact": status}),
                getattr(endpoint, f"deliveries_{status}", 0),
                status,
            )
            for status in DeliveryStatus.values
        ]
        return format_html_join(" · ", "{}", ((part,) for part in parts))

    @admin.display(description="Latest deliveries")
    def recent_deliveries(self, endpoint: WebhookEndpoint) -> str:
        latest = (
            endpoint.deliveries.select_related("event").order_by("-id")[: self.RECENT]
            if endpoint.pk
            else []
        )
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    reverse("admin:executions_webhookdelivery_change", args=[d.pk]),
                    d.pk,
                    d.event.type,
                    d.status,
                    d.attempts,
                    d.last_status_code or "—",
                )
                for d in latest
            ),
        )
        return format_html(
            "<table><thead><tr><th>Delivery</th><th>Event</th><th>Status</th><th>Attempts</th>"
            "<th>Last answer</th></tr></thead><tbody>{}</tbody></table>",
            rows or mark_safe('<tr><td colspan="5">None yet.</td></tr>'),
        )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        secret = webhook_endpoint_save(
            obj, caller=admin_caller(request), changed=form.changed_data if change else ()
        )
        if secret is not None:
            request._alfred_secrets = [(obj, secret)]  # type: ignore[attr-defined]

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        webhook_endpoint_delete(obj.pk, caller=admin_caller(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        caller = admin_caller(request)
        for endpoint_id in queryset.values_list("pk", flat=True):
            webhook_endpoint_delete(endpoint_id, caller=caller)

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: Any = None) -> Any:
        secrets = getattr(request, "_alfred_secrets", None)
        if secrets:
            return self._show_secrets(request, secrets)
        return super().response_add(request, obj, post_url_continue)

    @admin.action(description="Send every failed delivery again…", permissions=["change"])
    def redeliver_failed(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> Any:
        endpoints = list(queryset.order_by("created_at"))
        # Optional, as on the API (``ReasonSerializer``): one notion of required everywhere.
        form, reason = reason_confirmed(request, required=False)
        if reason is None:
            failed = dict(
                WebhookDelivery.objects.filter(endpoint__in=endpoints, status=DeliveryStatus.FAILED)
                .values_list("endpoint")
                .annotate(n=Count("id"))
            )
            items = [
                ConfirmItem(
                    endpoint,
                    [
                        f"{failed.get(endpoint.pk, 0)} failed deliveries are sent again, each "
                        "with its webhook-id (a receiver that took one already dedupes it)"
                        + (
                            ""
                            if endpoint.active
                            else "; the endpoint is inactive: activate it first"
                        )
                        + "."
                    ],
                    skipped=not failed.get(endpoint.pk) or not endpoint.active,
                )
                for endpoint in endpoints
            ]
            return confirmation_page(
                self,
                request,
                action="redeliver_failed",
                title="Send failed deliveries again",
                intro=REDELIVERY,
                items=items,
                form=form,
                submit="Send them again",
            )
        caller = admin_caller(request)
        for endpoint in endpoints:
            count = deliveries_redeliver(
                actor=caller.principal,
                actor_name=caller.name,
                reason=reason,
                endpoint_id=endpoint.pk,
            )
            self.message_user(request, f"{endpoint}: {count} failed deliveries will be sent again")
        return None

    @admin.action(description="Rotate the signing secret (shown once)…", permissions=["change"])
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> Any:
        endpoints = list(queryset.order_by("created_at"))
        form, reason = reason_confirmed(request)
        if reason is None:
            return confirmation_page(
                self,
                request,
                action="rotate_secret",
                title="Rotate signing secrets",
                intro="The new secret is shown once, on the next page. Until its receiver "
                "has it, nothing breaks: the old secret keeps signing beside it for 24 hours.",
                items=[
                    ConfirmItem(endpoint, [f"{endpoint.url}: gets a new signing secret."])
                    for endpoint in endpoints
                ],
                form=form,
                submit="Rotate",
            )
        caller = admin_caller(request)
        return self._show_secrets(
            request,
            [
                (endpoint, webhook_secret_rotate(endpoint.pk, caller=caller, reason=reason))
                for endpoint in endpoints
            ],
        )

    def _show_secrets(self, request: HttpRequest, secrets: list[tuple[Any, str]]) -> Any:
        context = {**self.admin_site.each_context(request), "secrets": secrets}
        response = TemplateResponse(
            request, "admin/executions/webhookendpoint/secret.html", context
        )
        response["Cache-Control"] = "no-store"
        return response


REDELIVERY = "Each delivery starts its retry schedule again from the first attempt."


def _redelivery_item(delivery: WebhookDelivery, now: datetime) -> ConfirmItem:
    in_flight = delivery.claimed_until is not None and delivery.claimed_until > now
    if in_flight:
        fate = "being sent right now: its answer decides (ask again once it is recorded)."
    elif delivery.status == DeliveryStatus.PENDING and delivery.next_attempt_at:
        when = date_format(localtime(delivery.next_attempt_at), "DATETIME_FORMAT")
        fate = f"waiting for its next attempt at {when}: sent now."
    else:
        fate = "sent again now, with the same webhook-id."
    if not delivery.endpoint.active:
        fate += " Its endpoint is disabled: nothing is sent until it is enabled again."
    return ConfirmItem(
        delivery,
        [
            f"{delivery.event.type} (event {delivery.event.key}) to {delivery.endpoint.url}, "
            f"{delivery.status} after {delivery.attempts} attempts: {fate}"
        ],
        skipped=in_flight,
    )


class WebhookAttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = ["number", "status_code", "duration_ms", "response_excerpt", "error", "created_at"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """Every event owed to an endpoint, with each attempt as the relay saw it; an operator
    sends one again (its webhook-id stays: a receiver that had it dedupes it)."""

    list_display = [
        "id",
        "endpoint_url",
        "event_type",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
    ]
    list_filter = ["status", "endpoint"]
    search_fields = ["event__key", "event__execution__id"]
    list_select_related = ["endpoint", "event"]
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    @admin.display(description="Endpoint", ordering="endpoint__url")
    def endpoint_url(self, delivery: WebhookDelivery) -> str:
        # Not the foreign key itself, which the list would keep on one line however long.
        return str(delivery.endpoint.url)

    @admin.display(description="Event", ordering="event__type")
    def event_type(self, delivery: WebhookDelivery) -> str:
        return str(delivery.event.type)

    @admin.action(description="Send the selected deliveries again…", permissions=["change"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> Any:
        deliveries = list(queryset.select_related("endpoint", "event").order_by("id"))
        # Optional, as on the API (``ReasonSerializer``): one notion of required everywhere.
        form, reason = reason_confirmed(request, required=False)
        if reason is None:
            now = db_now()
            items = [_redelivery_item(delivery, now) for delivery in deliveries]
            return confirmation_page(
                self,
                request,
                action="redeliver",
                title="Send deliveries again",
                intro=REDELIVERY,
                items=items,
                form=form,
                submit="Send them again",
            )
        caller = admin_caller(request)
        count = deliveries_redeliver(
            actor=caller.principal,
            actor_name=caller.name,
            reason=reason,
            delivery_ids=[delivery.pk for delivery in deliveries],
        )
        self.message_user(request, f"{count} deliveries will be sent again", messages.SUCCESS)
        return None

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Only the redeliver action: the change form stays read-only (every field is).
        return (
            obj is None
            and not read_only()
            and request.user.has_perm("executions.change_webhookendpoint")
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [field.name for field in WebhookDelivery._meta.fields]


@admin.register(InboundNotification)
class InboundNotificationAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "source", "delivery_id", "topics", "woken"]
    list_filter = ["source"]
    search_fields = ["delivery_id"]

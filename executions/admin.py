"""The operators' view: read-only records, and actions that call ``executions.controls``
(roles and read-only rules: :mod:`alfred.admin_base`)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from alfred.admin_base import ReadOnlyAdmin, ReadOnlyInline, WritableAdmin, admin_caller
from alfred.readonly import ReadOnlyInstance, read_only
from executions.controls import (
    CONTROLS,
    InvalidInput,
    InvalidState,
    LaneConflict,
    NotPermitted,
    execution_cancel,
    execution_controls,
    execution_retry,
)
from executions.events.endpoints import (
    endpoint_url_check,
    webhook_endpoint_save,
    webhook_secret_rotate,
)
from executions.models import (
    AuditEntry,
    DeliveryKey,
    Execution,
    OutboxEvent,
    Run,
    Stage,
    StepReceipt,
    WebhookEndpoint,
)

EVENT_TYPE_RE = re.compile(r"[a-z][a-z_]{0,40}(?:\.[a-z][a-z_]{0,40}){0,3}")
_REFUSALS = (InvalidState, InvalidInput, LaneConflict, NotPermitted, ReadOnlyInstance)


class RunInline(ReadOnlyInline):
    model = Run
    fields = ["id", "number", "kind", "status", "fence", "started_at", "finished_at"]


class EventInline(ReadOnlyInline):
    model = OutboxEvent
    fields = ["sequence", "type", "key", "payload", "created_at"]
    ordering = ["sequence"]


class DeliveryKeyInline(ReadOnlyInline):
    model = DeliveryKey
    fields = ["principal", "key", "outcome", "created_at"]


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = ["id", "workflow", "status", "start_state", "lane_key", "dry_run", "created_at"]
    list_filter = ["workflow", "status", "start_state", "dry_run"]
    search_fields = ["id", "logical_identity", "lane_key"]
    inlines = [RunInline, DeliveryKeyInline, EventInline]
    date_hierarchy = "created_at"
    actions = ["cancel", "retry"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The model's fields, and on an execution's page the controls this user may use on
        it now (as the API's links offer them). A display function takes only the object,
        so the user's is a closure over the request's caller."""
        fields = [*super().get_readonly_fields(request, obj)]
        if obj is None:
            return fields
        caller = admin_caller(request)

        def allowed_controls(execution: Execution) -> str:
            if read_only():
                return "none: this instance is read-only"
            allowed = execution_controls(execution, caller)
            return ", ".join(c.name for c in CONTROLS if c.name in allowed) or "none"

        allowed_controls.short_description = "Allowed controls"  # type: ignore[attr-defined]
        return [*fields, allowed_controls]

    @admin.action(description="Cancel the selected executions", permissions=["operate"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        caller = admin_caller(request)
        for execution_id in queryset.values_list("id", flat=True):
            try:
                result = execution_cancel(
                    execution_id=execution_id, caller=caller, reason="canceled from the admin"
                )
            except _REFUSALS as exc:
                self.message_user(request, f"{execution_id}: {exc}", messages.WARNING)
                continue
            done = "canceled" if result.immediate else "cancel requested (running)"
            self.message_user(request, f"{execution_id}: {done}", messages.SUCCESS)

    @admin.action(description="Retry the selected executions", permissions=["operate"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        caller = admin_caller(request)
        for execution_id in queryset.values_list("id", flat=True):
            try:
                execution_retry(execution_id=execution_id, caller=caller)
            except _REFUSALS as exc:
                self.message_user(request, f"{execution_id}: {exc}", messages.WARNING)
                continue
            self.message_user(request, f"{execution_id}: retrying", messages.SUCCESS)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "execution", "number", "kind", "status", "started_at", "finished_at"]
    list_filter = ["kind", "status"]
    search_fields = ["id", "execution__id"]


@admin.register(Stage)
class StageAdmin(ReadOnlyAdmin):
    list_display = ["run", "position", "name", "status", "started_at", "finished_at"]
    list_filter = ["status", "name"]


@admin.register(StepReceipt)
class StepReceiptAdmin(ReadOnlyAdmin):
    list_display = ["run", "stage", "step_key", "sequence", "status", "attempts", "created_at"]
    list_filter = ["status", "kind"]
    search_fields = ["run__id", "run__execution__id", "step_key"]


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdmin):
    list_display = ["execution", "sequence", "type", "created_at"]
    list_filter = ["type"]
    search_fields = ["execution__id", "key"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "action", "target_type", "target_id", "reason"]
    list_filter = ["action", "target_type"]
    search_fields = ["target_id", "actor", "reason"]


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
        fields = ["url", "description", "event_types", "active", "allow_private"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["event_types"] = ", ".join(self.instance.event_types or [])

    def clean_event_types(self) -> list[str]:
        types = [t.strip() for t in self.cleaned_data["event_types"].split(",") if t.strip()]
        for event_type in types:
            if not EVENT_TYPE_RE.fullmatch(event_type):
                raise ValidationError(
                    "an event type is lower-case words joined by dots, like execution.failed"
                )
        return sorted(set(types))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("url"):
            try:
                endpoint_url_check(data["url"], allow_private=bool(data.get("allow_private")))
            except ValidationError as exc:
                self.add_error("url", exc)
        return data


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(WritableAdmin):
    """The signing secret is generated on creation and shown once, on a page of its own
    (``secret.html``: not in a message, which would travel in a cookie); later it can only be
    rotated (a new one, shown the same way)."""

    form = WebhookEndpointForm
    list_display = ["url", "description", "active", "allow_private", "created_at"]
    list_filter = ["active"]
    readonly_fields = ["id", "created_at"]
    actions = ["rotate_secret"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        secret = webhook_endpoint_save(obj)
        if secret is not None:
            request._alfred_secrets = [(obj, secret)]  # type: ignore[attr-defined]

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: Any = None) -> Any:
        secrets = getattr(request, "_alfred_secrets", None)
        if secrets:
            return self._show_secrets(request, secrets)
        return super().response_add(request, obj, post_url_continue)

    @admin.action(description="Rotate the signing secret (shown once)", permissions=["change"])
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> Any:
        return self._show_secrets(
            request, [(endpoint, webhook_secret_rotate(endpoint.pk)) for endpoint in queryset]
        )

    def _show_secrets(self, request: HttpRequest, secrets: list[tuple[Any, str]]) -> Any:
        context = {**self.admin_site.each_context(request), "secrets": secrets}
        response = TemplateResponse(
            request, "admin/executions/webhookendpoint/secret.html", context
        )
        response["Cache-Control"] = "no-store"
        return response

"""The operators' view: read-only records, and actions that call ``executions.controls``."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from executions.controls import InvalidInput, InvalidState, execution_cancel, execution_retry
from executions.models import (
    AuditEntry,
    DeliveryKey,
    Execution,
    OutboxEvent,
    Run,
    Stage,
    WebhookEndpoint,
)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


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


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = ["id", "workflow", "status", "start_state", "lane_key", "dry_run", "created_at"]
    list_filter = ["workflow", "status", "start_state", "dry_run"]
    search_fields = ["id", "logical_identity", "lane_key"]
    inlines = [RunInline, DeliveryKeyInline, EventInline]
    date_hierarchy = "created_at"
    actions = ["cancel", "retry"]

    @admin.action(description="Cancel the selected executions")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        for execution_id in queryset.values_list("id", flat=True):
            try:
                result = execution_cancel(
                    execution_id=execution_id,
                    actor=_actor(request),
                    reason="canceled from the admin",
                )
            except InvalidState as exc:
                self.message_user(request, f"{execution_id}: {exc}", messages.WARNING)
                continue
            done = "canceled" if result.immediate else "cancel requested (running)"
            self.message_user(request, f"{execution_id}: {done}", messages.SUCCESS)

    @admin.action(description="Retry the selected executions")
    def retry(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        for execution_id in queryset.values_list("id", flat=True):
            try:
                execution_retry(execution_id=execution_id, actor=_actor(request))
            except (InvalidState, InvalidInput) as exc:
                self.message_user(request, f"{execution_id}: {exc}", messages.WARNING)
                continue
            self.message_user(request, f"{execution_id}: retrying", messages.SUCCESS)


def _actor(request: HttpRequest) -> str:
    return f"user:{request.user.pk}"


@admin.register(Stage)
class StageAdmin(ReadOnlyAdmin):
    list_display = ["run", "position", "name", "status", "started_at", "finished_at"]
    list_filter = ["status", "name"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "action", "target_type", "target_id", "reason"]
    list_filter = ["action", "target_type"]
    search_fields = ["target_id", "actor", "reason"]


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "description", "active", "allow_private", "created_at"]
    list_filter = ["active"]

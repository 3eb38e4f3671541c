"""The operators' view. Read-only for now: controls arrive with the engine (as actions that
call ``executions.controls``)."""

from __future__ import annotations

from django.contrib import admin

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

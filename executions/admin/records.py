"""The records of what happened, read-only: runs, stages, receipts, events and the audit log
(the execution's page shows them in context; these lists find them across executions)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from alfred.admin_base import ReadOnlyAdmin, summary
from alfred.principals import principal_name
from executions.models import AuditEntry, OutboxEvent, Run, Stage, StepReceipt


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
    """Who did what to which execution, lane, token or endpoint, and why: newest first,
    by action, kind of target and time; the target links to its own page where it has one."""

    list_display = ["created_at", "who", "action", "target", "reason_summary"]
    fields = ["created_at", "who", "actor", "action", "target", "reason", "data"]
    readonly_fields = ["created_at", "who", "target"]
    list_filter = ["action", "target_type", "created_at"]
    search_fields = ["target_id", "actor", "reason"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    PAGES = {
        "execution": "admin:executions_execution_change",
        "lane": "admin:lanes_lane_change",
        "webhook_endpoint": "admin:executions_webhookendpoint_change",
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEntry]:
        return super().get_queryset(request).annotate(actor_known_as=principal_name("actor"))

    @admin.display(description="Who", ordering="actor")
    def who(self, entry: AuditEntry) -> str:
        """The name people know the actor by: as the entry recorded it, else the user's or the
        token's now; the stable principal id on hover (a token's name can be reused)."""
        recorded = entry.data.get("actor_name") if isinstance(entry.data, dict) else None
        name = recorded or getattr(entry, "actor_known_as", None) or entry.actor
        return format_html('<span title="{}">{}</span>', entry.actor, name)

    @admin.display(description="Reason", ordering="reason")
    def reason_summary(self, entry: AuditEntry) -> str:
        return summary(entry.reason)

    @admin.display(description="Target", ordering="target_id")
    def target(self, entry: AuditEntry) -> str:
        page = self.PAGES.get(entry.target_type)
        if page is None:
            return f"{entry.target_type} {entry.target_id}"
        url = reverse(page, args=[quote(entry.target_id)])
        return format_html('{} <a href="{}">{}</a>', entry.target_type, url, entry.target_id)

"""The records of what happened, read-only: runs, stages, receipts, events and the audit log
(the execution's page shows them in context; these lists find them across executions)."""

from __future__ import annotations

from django.contrib import admin

from alfred.admin_base import ReadOnlyAdmin
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
    list_display = ["created_at", "actor", "action", "target_type", "target_id", "reason"]
    list_filter = ["action", "target_type"]
    search_fields = ["target_id", "actor", "reason"]

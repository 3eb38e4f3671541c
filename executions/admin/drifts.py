"""What the drift watch found, in the admin (``executions.drift``): every drift, newest first
(the status filter finds the open ones), each with what was expected and what is there.
Accepting one or starting its operation again are the execution's controls, on its page
(linked from here)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from alfred.admin_base import ReadOnlyAdmin
from executions.admin.pages import pretty
from executions.catalog import execution_subject, workflows_all
from executions.drift import drift_summary
from executions.models import Drift


class WorkflowFilter(admin.SimpleListFilter):
    """By workflow, from the catalogue (not a scan of every execution for its names)."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(workflow.name, workflow.name) for workflow in workflows_all() if workflow.watched]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Drift]) -> QuerySet[Drift]:
        value = self.value()
        return queryset.filter(execution__workflow=value) if value else queryset


@admin.register(Drift)
class DriftAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "execution_link",
        "workflow",
        "subject",
        "status",
        "what",
        "first_seen_at",
        "last_seen_at",
    ]
    list_filter = ["status", WorkflowFilter]
    search_fields = ["id", "execution__id"]
    list_select_related = ["execution"]
    fields = (
        "id",
        "execution_link",
        "workflow",
        "subject",
        "status",
        "first_seen_at",
        "last_seen_at",
        "shown_findings",
        "ended_at",
        "ended_by",
        "reason",
        "replaced_by",
    )
    readonly_fields = fields

    @admin.display(description="Execution", ordering="execution")
    def execution_link(self, drift: Drift) -> str:
        url = reverse("admin:executions_execution_change", args=[quote(drift.execution_id)])
        return format_html('<a href="{}#drift">{}</a>', url, drift.execution_id)

    @admin.display(description="Workflow", ordering="execution__workflow")
    def workflow(self, drift: Drift) -> str:
        return drift.execution.workflow

    @admin.display(description="Subject")
    def subject(self, drift: Drift) -> str:
        return execution_subject(drift.execution)

    @admin.display(description="What changed")
    def what(self, drift: Drift) -> str:
        return drift_summary(drift.findings)

    @admin.display(description="Findings (expected → found)")
    def shown_findings(self, drift: Drift) -> str:
        return format_html(
            "<table><thead><tr><th>What</th><th>Expected</th><th>Found</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td><pre>{}</pre></td><td><pre>{}</pre></td></tr>",
                (
                    (f["what"], pretty(f["expected"]) or "—", pretty(f["found"]) or "nothing")
                    for f in drift.findings
                ),
            ),
        )

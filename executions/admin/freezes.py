"""Change freezes in the admin (``executions.freezes``): the list says which are in force and
how many executions each holds; an operator declares one (the add form, checked by the same
rule as the API and the command), ends those selected, and lets one held execution through
with a reason from the freeze's page. Every change goes through the service (audited)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from alfred.admin_base import ReadOnlyAdmin, admin_caller, summary
from alfred.text import reason_problem
from executions.freezes import (
    FreezeEnded,
    FreezeNotHolding,
    FreezeRefused,
    freeze_declare,
    freeze_end,
    freeze_exempt,
    freeze_problems,
    freeze_state,
    held_executions,
)
from executions.models import Execution, Freeze
from executions.runtime.clock import db_now


def _globs(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class FreezeForm(forms.ModelForm):
    """The declaration: the globs as comma-separated text, checked by ``freeze_problems``."""

    workflows_text = forms.CharField(
        label="Workflows", initial="*", help_text="Names or globs, comma-separated ('*': all)."
    )
    subjects_text = forms.CharField(
        label="Subjects",
        initial="*",
        help_text="Globs on what an execution acts on, comma-separated (e.g. *.example.com).",
    )

    class Meta:
        model = Freeze
        fields = ["reason", "starts_at", "ends_at"]
        help_texts = {
            "starts_at": "When it starts (UTC); empty: now.",
            "ends_at": "When it ends (UTC); empty: until an operator ends it.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "starts_at" in self.fields:
            self.fields["starts_at"].required = False  # now

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        problem = reason_problem(data.get("reason", ""), required=True)
        if problem:
            self.add_error("reason", problem)
        now = db_now()
        data["workflows"] = _globs(data.get("workflows_text", ""))
        data["subjects"] = _globs(data.get("subjects_text", ""))
        for problem in freeze_problems(
            data.get("reason", ""),
            data.get("starts_at") or now,
            data.get("ends_at"),
            data["workflows"],
            data["subjects"],
            now,
        ):
            self.add_error(None, problem)
        return data


class ExemptForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Why this one may change things during the freeze (audit log). Required.",
    )

    def clean_reason(self) -> str:
        value = self.cleaned_data["reason"]
        problem = reason_problem(value, required=True)
        if problem:
            raise forms.ValidationError(problem)
        return str(value).strip()


@admin.register(Freeze)
class FreezeAdmin(ReadOnlyAdmin):
    form = FreezeForm
    list_display = ["id", "reason_shown", "starts_at", "ends_at", "state", "holds", "created_by"]
    readonly_fields = ["id", "created_by", "created_at", "ended_at", "ended_by", "held"]
    actions = ["end"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_operate_permission(request)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["reason", "starts_at", "ends_at", "workflows_text", "subjects_text"]
        return [
            "id",
            "reason",
            "starts_at",
            "ends_at",
            "workflows",
            "subjects",
            "created_by",
            "created_at",
            "ended_at",
            "ended_by",
            "held",
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj) if obj is not None else []

    @admin.display(description="Reason")
    def reason_shown(self, freeze: Freeze) -> str:
        return summary(freeze.reason)

    @admin.display(description="State")
    def state(self, freeze: Freeze) -> str:
        return freeze_state(freeze, db_now())

    @admin.display(description="Holds")
    def holds(self, freeze: Freeze) -> int:
        return len(held_executions(freeze))

    @admin.display(description="Executions it holds now")
    def held(self, freeze: Freeze) -> str:
        found = held_executions(freeze)
        if not found:
            return "None."
        return format_html_join(
            "",
            '<div><a href="{}">{}</a> {} — <a class="button" href="{}">Let it through…</a></div>',
            (
                (
                    reverse("admin:executions_execution_change", args=[quote(e.pk)]),
                    e.pk,
                    e.workflow,
                    reverse("admin:executions_freeze_exempt", args=[quote(freeze.pk), e.pk]),
                )
                for e in found
            ),
        )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        data = form.cleaned_data
        declared = freeze_declare(
            caller=admin_caller(request),
            reason=data["reason"],
            starts_at=data.get("starts_at"),
            ends_at=data.get("ends_at"),
            workflows=data["workflows"],
            subjects=data["subjects"],
        )
        obj.pk, obj.starts_at, obj.created_at = declared.pk, declared.starts_at, declared.created_at

    @admin.action(description="End the selected freezes now", permissions=["operate"])
    def end(self, request: HttpRequest, queryset: QuerySet[Freeze]) -> None:
        caller = admin_caller(request)
        for freeze_id in queryset.values_list("pk", flat=True):
            try:
                freeze_end(caller=caller, freeze_id=freeze_id, reason="ended from the admin")
            except FreezeEnded as exc:
                self.message_user(request, str(exc), messages.WARNING)
            else:
                self.message_user(request, f"{freeze_id}: ended; what it held goes on")

    def get_urls(self) -> list[URLPattern]:
        exempt = path(
            "<path:object_id>/exempt/<str:execution_id>/",
            self.admin_site.admin_view(self.exempt_view),
            name="executions_freeze_exempt",
        )
        return [exempt, *super().get_urls()]

    def exempt_view(self, request: HttpRequest, object_id: str, execution_id: str) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        freeze = Freeze.objects.filter(pk=unquote(object_id)).first()
        execution = Execution.objects.filter(pk=execution_id).first()
        if freeze is None or execution is None:
            raise Http404("no such freeze or execution")
        back = reverse("admin:executions_freeze_change", args=[quote(freeze.pk)])
        form = ExemptForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                freeze_exempt(
                    caller=admin_caller(request),
                    freeze_id=freeze.pk,
                    execution_id=execution.pk,
                    reason=form.cleaned_data["reason"],
                )
            except (FreezeRefused, FreezeNotHolding) as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(
                    request, f"{execution.pk}: let through {freeze.pk}; it goes on now"
                )
            return HttpResponseRedirect(back)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Let {execution.pk} through the freeze {freeze.pk}",
            "opts": self.opts,
            "original": freeze,
            "freeze": freeze,
            "execution": execution,
            "form": form,
            "intro": format_html(
                "The freeze <strong>{}</strong> ({}) holds {}. Let through, it makes its changes "
                "now; the freeze goes on holding the rest. Your reason is kept in the audit log.",
                freeze.pk,
                freeze.reason,
                execution.pk,
            ),
        }
        return TemplateResponse(request, "admin/executions/freeze/exempt.html", context)

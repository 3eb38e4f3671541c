"""The execution in the admin: its page, its controls, its list (roles and read-only rules:
:mod:`alfred.admin_base`; what the page shows: :mod:`executions.admin.pages`).

The page opens with a header (status, workflow, lane with role and queue position, start
state, related executions, assistance), then the pending approval, the controls this user may
use now and the timeline of every run; that part follows the execution's event stream while
the page is open (the page's script reads ``/api/v1/executions/<id>/events/stream`` with the
admin session and fetches ``<id>/live/`` again after each event, so it never reloads), and
``<id>/history.json`` downloads the whole history.

Each control (approve, reject, rollback, cancel, retry) goes through a confirmation page of
its own (``<id>/<control>/``): a GET says what will happen and asks for a reason, a POST (with
CSRF) calls the one service and records the reason in its audit entry. Reject is the cancel
of a paused execution, bound like approve to the plan the page showed. Only an operator on a
writable instance reaches these pages (anyone else: 403, as Django's admin answers a missing
permission); a control the state no longer allows, and every refusal of a service, comes back
as a message on the execution's page — a stale plan on the approval page again, with the new
plan and hash; a link to an earlier plan (``?plan_hash=``) says which plan is current.

The changelist's cancel, retry and rollback actions take many executions at once through one
intermediate page (:mod:`alfred.admin_confirm`) that says what will happen to each and asks
for the reason."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from alfred.admin_base import ReadOnlyAdmin, ReadOnlyInline, admin_caller
from alfred.admin_confirm import (
    ConfirmItem,
    ReasonField,
    confirmation_page,
    reason_confirmed,
)
from alfred.principals import Caller
from alfred.readonly import read_only
from executions import selectors
from executions.admin import pages
from executions.catalog import execution_subject, searched_fields
from executions.controls import (
    CONTROLS,
    PLAN_HASH_PATTERN,
    REFUSALS,
    Control,
    ControlBody,
    ForceRequired,
    StalePlan,
    control_perform,
)
from executions.history import history_json
from executions.models import (
    DeliveryKey,
    Execution,
    ExecutionStatus,
    RunStatus,
)
from lanes.models import Lane


def control_form(control: Control) -> type[forms.Form]:
    """A control's confirmation form, from its declaration: its reason (required as the
    control says), the plan's hash it names (hidden: the plan the page showed) and the
    blast-radius override."""
    fields: dict[str, forms.Field] = {"reason": ReasonField(required=control.reason_required)}
    if control.plan_hash:
        fields["plan_hash"] = forms.RegexField(regex=PLAN_HASH_PATTERN, widget=forms.HiddenInput)
    if control.force:
        fields["force"] = forms.BooleanField(
            required=False,
            help_text="Lift the blast-radius guard for this batch: needed (and only honoured) "
            "when the plan is over the thresholds.",
        )
    return type(f"{control.name.title()}Form", (forms.Form,), fields)


@dataclass(frozen=True)
class ControlPage:
    """A control's confirmation page: its title and form, and the one service call its POST
    makes (returning the message to show), all from the control's declaration."""

    control: Control
    form: type[forms.Form]

    @property
    def title(self) -> str:
        return self.control.title

    def perform(self, execution_id: str, caller: Caller, data: dict[str, Any]) -> str:
        execution = control_perform(
            self.control,
            execution_id=execution_id,
            caller=caller,
            body=ControlBody(
                reason=data.get("reason", ""),
                plan_hash=data.get("plan_hash", ""),
                force=bool(data.get("force")),
            ),
        )
        said = self.control.done.format(plan_hash=data.get("plan_hash", ""))
        waiting = pages.pending_approval(execution) if self.control.name == "approve" else None
        if waiting is not None and waiting["plan_hash"] == data.get("plan_hash"):
            # the policy asks for more: the plan waits for another operator's approval
            policy = waiting["policy"]
            said = f"{said} ({policy.summary()}: it waits for {policy.owed} more)"
        if execution.pk != execution_id:  # redo: a new execution of the same operation
            return f"{said}: {execution.pk} ({execution.status})"
        return f"{said}; now {execution.status}"


CONTROL_PAGES: dict[str, ControlPage] = {
    control.name: ControlPage(control, control_form(control)) for control in CONTROLS
}


def offered(execution: Execution, caller: Caller) -> list[str]:
    """The confirmation pages to offer: the controls this caller may use now."""
    return pages.offered_controls(execution, caller)


def execution_page(execution: Execution, caller: Caller) -> dict[str, Any]:
    """What an execution's page (and its live part) shows beyond its fields."""
    return {
        "header": pages.execution_header(execution),
        "approval": pages.pending_approval(execution, caller),
        "runs": pages.execution_timeline(execution),
        **pages.execution_events(execution),
        "controls": [
            {
                "name": name,
                "title": CONTROL_PAGES[name].title,
                "url": reverse(f"admin:executions_execution_{name}", args=[quote(execution.pk)]),
            }
            for name in offered(execution, caller)
        ],
        "live_url": reverse("admin:executions_execution_live", args=[quote(execution.pk)]),
        "history_url": reverse(
            "admin:executions_execution_history_json", args=[quote(execution.pk)]
        ),
        "stream_url": reverse("execution-events-stream", kwargs={"execution_id": execution.pk}),
    }


class AwaitingFilter(admin.SimpleListFilter):
    title = "waiting for"
    parameter_name = "awaiting"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(selectors.AWAITING.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Execution]) -> Any:
        if self.value() in selectors.AWAITING:
            return selectors.executions_awaiting(queryset, str(self.value()))
        return queryset


class LaneFilter(admin.SimpleListFilter):
    """The lanes most recently active (30 of them; the search finds any lane)."""

    title = "lane"
    parameter_name = "lane"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # From the lanes themselves (a row per key), not a grouping of every execution.
        keys = Lane.objects.order_by("-updated_at").values_list("key", flat=True)[:30]
        return [(key, key) for key in sorted(keys)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Execution]) -> Any:
        return queryset.filter(lane_key=self.value()) if self.value() else queryset


class DeliveryKeyInline(ReadOnlyInline):
    model = DeliveryKey
    fields = ["principal", "key", "outcome", "created_at"]


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = ["id", "workflow", "status_shown", "subject", "waits_for", "created_at"]
    list_filter = [
        "workflow",
        "status",
        AwaitingFilter,
        LaneFilter,
        "start_state",
        "dry_run",
        "created_at",
    ]
    search_fields = ["id", "logical_identity", "lane_key"]
    search_help_text = (
        "An execution id, a lane, or a name or ticket id its input holds (any free-form field "
        "of its workflow's input)."
    )
    inlines = [DeliveryKeyInline]
    date_hierarchy = "created_at"
    actions = ["cancel", "retry", "rollback"]

    @admin.display(description="Subject")
    def subject(self, execution: Execution) -> str:
        return execution_subject(execution)

    @admin.display(description="Status", ordering="status")
    def status_shown(self, execution: Execution) -> str:
        """In its colour (the page header's), a dry run said as such."""
        return format_html(
            '<span class="alfred-status status-{}">{}</span>{}',
            execution.status,
            execution.status,
            mark_safe(' <span class="alfred-dry-run">dry run</span>') if execution.dry_run else "",
        )

    @admin.display(description="Waits for")
    def waits_for(self, execution: Execution) -> str:
        """What it waits for and who can act (``selectors.waits_for_mark``)."""
        return selectors.waits_for_mark(execution) or "—"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Execution]:
        # The list's "waits for" marks, one EXISTS each in the list's own query.
        return selectors.executions_marked(super().get_queryset(request))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Execution], search_term: str
    ) -> tuple[QuerySet[Execution], bool]:
        """Beyond the id and lane: the input's names (a ticket id within its list)."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if not term:
            return found, duplicates
        by_input = Q()
        for key in searched_fields():
            by_input |= Q(**{f"input__{key}__icontains": term})
        return found | queryset.filter(by_input), duplicates

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
            return ", ".join(pages.offered_controls(execution, caller)) or "none"

        allowed_controls.short_description = "Allowed controls"  # type: ignore[attr-defined]
        return [*fields, allowed_controls]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        if obj is not None:
            context["execution_page"] = execution_page(obj, admin_caller(request))
            # Not str(obj), which names the status: the page's own header follows it live.
            context["subtitle"] = pages.execution_title(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        own = [
            path(
                f"<path:object_id>/{name}/",
                view(self.control_view),
                {"control": name},
                name=f"executions_execution_{name}",
            )
            for name in CONTROL_PAGES
        ]
        own += [
            path("<path:object_id>/live/", view(self.live_view), name="executions_execution_live"),
            path(
                "<path:object_id>/history.json",
                view(self.history_json_view),
                name="executions_execution_history_json",
            ),
        ]
        return [*own, *super().get_urls()]

    def _viewable(self, request: HttpRequest, object_id: str) -> Execution:
        execution = self.get_object(request, unquote(object_id))
        if execution is None:
            raise Http404(f"no execution {object_id!r}")
        if not self.has_view_permission(request, execution):
            raise PermissionDenied
        return execution

    def live_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The part of the page that follows the execution (its script fetches it after each
        event): header, approval, controls, timeline, events."""
        execution = self._viewable(request, object_id)
        context = {
            **self.admin_site.each_context(request),
            "execution_page": execution_page(execution, admin_caller(request)),
            "original": execution,
        }
        response = TemplateResponse(
            request, "admin/executions/execution/includes/live.html", context
        )
        response["Cache-Control"] = "no-store"
        return response

    def history_json_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        execution = self._viewable(request, object_id)
        response = HttpResponse(
            history_json(execution), content_type="application/json; charset=utf-8"
        )
        response["Content-Disposition"] = f'attachment; filename="{execution.pk}.json"'
        return response

    def control_view(self, request: HttpRequest, object_id: str, control: str) -> HttpResponse:
        """A control's confirmation page (GET) and its performing (POST). Who may operate is
        checked here by role; whether the state allows it, by the offered controls and then
        again by the service under the row lock."""
        page = CONTROL_PAGES.get(control)
        if page is None:
            raise Http404(control)
        if not self.has_operate_permission(request):
            raise PermissionDenied
        execution = self.get_object(request, unquote(object_id))
        if execution is None:
            raise Http404(f"no execution {object_id!r}")
        caller = admin_caller(request)
        back = reverse("admin:executions_execution_change", args=[quote(execution.pk)])
        superseded = pages.superseded_plan(execution, request.GET.get("plan_hash", ""))
        if control not in offered(execution, caller):
            note = (
                f"; the plan {superseded['plan_hash']} you followed a link to is "
                f"{superseded['status']}"
                if superseded
                else ""
            )
            self.message_user(
                request,
                f"Execution {execution.pk}: {control} is not possible now, it is "
                f"{execution.status}{note}",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        form = page.form(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                done = page.perform(execution.pk, caller, form.cleaned_data)
            except StalePlan as exc:
                if not exc.current:
                    self.message_user(
                        request,
                        f"Execution {execution.pk}: no plan waits for approval any more.",
                        messages.WARNING,
                    )
                    return HttpResponseRedirect(back)
                self.message_user(
                    request,
                    "The plan changed since that page was shown: the plan waiting now has "
                    f"hash {exc.current}. Review it and decide again.",
                    messages.ERROR,
                )
                execution.refresh_from_db()
                # The reason carries over; a force given for the other plan does not.
                form = page.form(
                    initial={"reason": form.cleaned_data["reason"], "plan_hash": exc.current}
                )
            except ForceRequired:
                self.message_user(
                    request,
                    "This plan's batch is over the blast-radius thresholds: approve it with "
                    "force, or cancel the execution.",
                    messages.ERROR,
                )
            except REFUSALS as exc:
                self.message_user(request, f"Execution {execution.pk}: {exc}", messages.ERROR)
                return HttpResponseRedirect(back)
            else:
                self.message_user(request, f"Execution {execution.pk}: {done}", messages.SUCCESS)
                return HttpResponseRedirect(back)
        return self._control_page(request, execution, control, page, form, superseded)

    def _control_page(
        self,
        request: HttpRequest,
        execution: Execution,
        control: str,
        page: ControlPage,
        form: forms.Form,
        superseded: dict[str, Any] | None,
    ) -> TemplateResponse:
        bound_to_plan = control in ("approve", "reject")
        asker = admin_caller(request) if control == "approve" else None  # who may approve
        approval = pages.pending_approval(execution, asker) if bound_to_plan else None
        if approval is not None and not form.is_bound:
            form.initial.setdefault("plan_hash", approval["plan_hash"])
        if control == "approve" and not (approval or {}).get("force_required"):
            form.fields.pop("force", None)  # only a plan over the blast radius asks for it
        context = {
            **self.admin_site.each_context(request),
            "title": f"{page.title}: {pages.execution_title(execution)}",
            "identity": pages.execution_identity(execution),
            "opts": self.opts,
            "original": execution,
            "control": control,
            "page": page,
            "form": form,
            "approval": approval,
            "superseded": superseded,
            "rollback_steps": pages.rollback_steps(execution) if control == "rollback" else [],
            "running": execution.current_run is not None
            and execution.current_run.status == RunStatus.RUNNING,
            "paused": execution.status == ExecutionStatus.PAUSED,
        }
        return TemplateResponse(
            request, "admin/executions/execution/control_confirmation.html", context
        )

    # --- bulk actions, each through one confirmation page ----------------------------------

    def _bulk(
        self,
        request: HttpRequest,
        queryset: QuerySet[Execution],
        *,
        control: str,
        title: str,
        intro: str,
        describe: Callable[[Execution], ConfirmItem],
        perform: Callable[[str, Caller, str], str],
    ) -> TemplateResponse | None:
        caller = admin_caller(request)
        executions = list(queryset.select_related("current_run").order_by("created_at", "id"))
        required = next(c for c in CONTROLS if c.name == control).reason_required
        form, reason = reason_confirmed(request, required=required)
        if reason is None:
            items = [
                describe(execution)
                if control in pages.offered_controls(execution, caller)
                else ConfirmItem(
                    execution,
                    [f"{control} is not possible now, it is {execution.status}: left as it is."],
                    skipped=True,
                )
                for execution in executions
            ]
            return confirmation_page(
                self,
                request,
                action=control,
                title=title,
                intro=intro,
                items=items,
                form=form,
                submit=title,
            )
        for execution in executions:
            try:
                done = perform(execution.pk, caller, reason)
            except REFUSALS as exc:
                self.message_user(request, f"{execution.pk}: {exc}", messages.WARNING)
                continue
            self.message_user(request, f"{execution.pk}: {done}", messages.SUCCESS)
        return None

    @admin.action(description="Cancel the selected executions…", permissions=["operate"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Execution]) -> Any:
        def describe(execution: Execution) -> ConfirmItem:
            run = execution.current_run
            if run is not None and run.status == RunStatus.RUNNING:
                line = "a step is running: it finishes, then the run stops at the next boundary."
            elif execution.status == ExecutionStatus.PAUSED:
                line = "canceled at once, which rejects the plan waiting for approval."
            else:
                line = "canceled at once; its waits are dropped and it leaves its lane."
            return ConfirmItem(execution, [f"{execution.workflow}, {execution.status}:", line])

        return self._bulk(
            request,
            queryset,
            control="cancel",
            title="Cancel executions",
            intro="Canceled executions can be retried or rolled back later.",
            describe=describe,
            perform=lambda pk, caller, reason: CONTROL_PAGES["cancel"].perform(
                pk, caller, {"reason": reason}
            ),
        )

    @admin.action(description="Retry the selected executions…", permissions=["operate"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Execution]) -> Any:
        return self._bulk(
            request,
            queryset,
            control="retry",
            title="Retry executions",
            intro="Each gets a new run from its first stage, without the step cache of earlier "
            "runs, once its input still fits the workflow's schema.",
            describe=lambda e: ConfirmItem(
                e, [f"{e.workflow}, {e.status}: a retry run is queued, ahead of its lane's queue."]
            ),
            perform=lambda pk, caller, reason: CONTROL_PAGES["retry"].perform(
                pk, caller, {"reason": reason}
            ),
        )

    @admin.action(description="Roll back the selected executions…", permissions=["operate"])
    def rollback(self, request: HttpRequest, queryset: QuerySet[Execution]) -> Any:
        def describe(execution: Execution) -> ConfirmItem:
            steps = pages.rollback_lines(pages.rollback_steps(execution))
            line = (
                f"a rollback run does {len(steps)} step{'' if len(steps) == 1 else 's'}, in "
                "this order:"
                if steps
                else "no mutation was recorded: it becomes rolled_back at once."
            )
            return ConfirmItem(
                execution, [f"{execution.workflow}, {execution.status}:", line], steps=steps
            )

        return self._bulk(
            request,
            queryset,
            control="rollback",
            title="Roll back executions",
            intro="A compensation whose resource someone changed since is not clobbered: the "
            "rollback fails with drifted and can be asked for again.",
            describe=describe,
            perform=lambda pk, caller, reason: CONTROL_PAGES["rollback"].perform(
                pk, caller, {"reason": reason}
            ),
        )

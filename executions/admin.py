"""The operators' view: read-only records, and the controls of ``executions.controls`` (roles
and read-only rules: :mod:`alfred.admin_base`).

An execution's page shows, beyond its fields, what :func:`execution_page` computes: every run
(newest first) with its stages and step receipts, the events, the pending approval (the plan
as a table of record sets before → after, its hash, its expiry) and the controls this user may
use now. Each control (approve, rollback, cancel, retry) goes through a confirmation page of
its own (``<id>/<control>/``): a GET says what will happen and asks for a reason, a POST (with
CSRF) calls the one service and records the reason in its audit entry. Retry's service takes
no reason, so its page asks for none. Only an operator on a writable instance reaches these
pages (anyone else: 403, as Django's admin answers a missing permission); a control the state
no longer allows, and every refusal of a service, comes back as a message on the execution's
page — a stale plan on the approval page again, with the new plan and hash.

The changelist's cancel and retry actions stay one-step bulk shortcuts (the authorization
matrix pins them so); cancel records a fixed reason, "canceled from the admin"."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Prefetch, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.http import urlencode

from alfred.admin_base import ReadOnlyAdmin, ReadOnlyInline, WritableAdmin, admin_caller
from alfred.principals import Caller
from alfred.readonly import ReadOnlyInstance, read_only
from executions.controls import (
    CONTROLS,
    ForceRequired,
    InvalidInput,
    InvalidState,
    LaneConflict,
    NotPermitted,
    StalePlan,
    execution_approve,
    execution_cancel,
    execution_controls,
    execution_retry,
    execution_rollback,
)
from executions.events.endpoints import (
    EVENT_TYPE_RE,
    endpoint_url_check,
    webhook_endpoint_save,
    webhook_secret_rotate,
)
from executions.events.relay import deliveries_redeliver
from executions.models import (
    AuditEntry,
    DeliveryKey,
    Execution,
    ExecutionStatus,
    HookStatus,
    InboundNotification,
    OutboxEvent,
    ReceiptStatus,
    Run,
    RunKind,
    RunStatus,
    Stage,
    StepReceipt,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)

_REFUSALS = (InvalidState, InvalidInput, LaneConflict, NotPermitted, ReadOnlyInstance)
EVENTS_SHOWN = 500  # the newest; every event is in the outbox events' list


def _pretty(value: Any) -> str:
    """JSON for a <pre> (the template escapes it); empty for nothing recorded."""
    if value is None:
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _record_cell(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """One Route53 record set (``providers.aws.route53.model.Record``) as the plan shows it:
    its TTL, and its values or alias target, and any routing beside them."""
    if record is None:
        return None
    alias = record.get("alias")
    if isinstance(alias, Mapping):
        health = ", evaluates target health" if alias.get("evaluate_target_health") else ""
        data = [f"alias → {alias.get('dns_name')} (zone {alias.get('hosted_zone_id')}{health})"]
    else:
        values = record.get("values") or []
        data = [str(value) for value in (values if isinstance(values, list) else [values])]
    routing = record.get("routing") or {}
    if record.get("set_identifier"):
        routing = {"SetIdentifier": record["set_identifier"], **routing}
    return {
        "ttl": "" if record.get("ttl") is None else str(record["ttl"]),
        "data": data,
        "routing": json.dumps(routing, sort_keys=True, default=str) if routing else "",
    }


def plan_rows(plan: Any) -> list[dict[str, Any]]:
    """The record sets of an add-subdomain plan (``{"before": [...], "after": [...]}``), one
    row per set (name, type, set identifier) that either side holds: its cell before and
    after (None where it is absent) and what the plan does to it."""
    if not isinstance(plan, Mapping):
        return []
    sides: dict[str, dict[tuple[str, str, str], Mapping[str, Any]]] = {}
    order: list[tuple[str, str, str]] = []
    for side in ("before", "after"):
        records = plan.get(side)
        sides[side] = {}
        for record in records if isinstance(records, list) else []:
            if not isinstance(record, Mapping):
                continue
            key = (
                str(record.get("name", "")),
                str(record.get("type", "")),
                str(record.get("set_identifier") or ""),
            )
            sides[side][key] = record
            if key not in order:
                order.append(key)
    rows = []
    for key in order:
        before, after = sides["before"].get(key), sides["after"].get(key)
        if before is None:
            change = "added"
        elif after is None:
            change = "deleted"
        else:
            change = "unchanged" if before == after else "replaced"
        rows.append(
            {
                "name": key[0],
                "type": key[1],
                "before": _record_cell(before),
                "after": _record_cell(after),
                "change": change,
            }
        )
    return rows


def pending_approval(execution: Execution) -> dict[str, Any] | None:
    """The operator checkpoint the execution waits on (as the API's ``pending_approval``),
    with its plan as table rows."""
    hook = (
        execution.hooks.filter(status=HookStatus.PENDING, operator=True)
        .order_by("-created_at")
        .first()
    )
    if hook is None:
        return None
    payload = hook.payload if isinstance(hook.payload, Mapping) else {}
    plan = payload.get("plan")
    changes = plan.get("changes") if isinstance(plan, Mapping) else None
    batch = [c for c in changes if isinstance(c, Mapping)] if isinstance(changes, list) else []
    return {
        "hook": hook,
        "plan_hash": str(payload.get("plan_hash", "")),
        "zone": plan.get("zone", "") if isinstance(plan, Mapping) else "",
        "name": plan.get("name", "") if isinstance(plan, Mapping) else "",
        "rows": plan_rows(plan),
        "changes": [
            f"{c.get('action')} {c['record'].get('name')} {c['record'].get('type')}"
            for c in batch
            if isinstance(c.get("record"), Mapping)
        ],
        "expires_at": hook.expires_at,
        # display only: the service decides expiry on the database's clock
        "expired": hook.expires_at is not None and hook.expires_at <= timezone.now(),
        "force_required": bool(payload.get("force_required")),
        "requested_at": hook.created_at,
        "payload": _pretty(hook.payload),
    }


def _receipt_view(receipt: StepReceipt) -> dict[str, Any]:
    mutation = receipt.mutation if isinstance(receipt.mutation, Mapping) else None
    return {
        "receipt": receipt,
        "output": _pretty(receipt.output),
        "error": _pretty(receipt.error),
        "mutation": None
        if mutation is None
        else {
            "resource": str(mutation.get("resource", "")),
            "action": str(mutation.get("action", "")),
            "before": _pretty(mutation.get("before")),
            "after": _pretty(mutation.get("after")),
            "simulated": bool(mutation.get("simulated")),
        },
    }


def offered_controls(execution: Execution, caller: Caller) -> list[str]:
    """The controls to offer, in the controls' order: none on a read-only instance."""
    if read_only():
        return []
    allowed = execution_controls(execution, caller)
    return [control.name for control in CONTROLS if control.name in allowed]


def execution_page(execution: Execution, caller: Caller) -> dict[str, Any]:
    """What an execution's page shows beyond its fields (the template only lays it out)."""
    runs = execution.runs.order_by("-number").prefetch_related(
        Prefetch("stages", queryset=Stage.objects.order_by("position")),
        Prefetch("receipts", queryset=StepReceipt.objects.order_by("created_at", "pk")),
    )
    events = list(execution.events.order_by("-sequence")[:EVENTS_SHOWN])
    return {
        "runs": [
            {
                "run": run,
                "current": run.pk == execution.current_run_id,
                "error": _pretty(run.error),
                "stages": [
                    {"stage": s, "output": _pretty(s.output), "error": _pretty(s.error)}
                    for s in run.stages.all()
                ],
                "receipts": [_receipt_view(r) for r in run.receipts.all()],
            }
            for run in runs
        ],
        "events": [{"event": e, "payload": _pretty(e.payload)} for e in reversed(events)],
        "events_total": execution.last_sequence,
        "events_url": reverse("admin:executions_outboxevent_changelist")
        + "?"
        + urlencode({"q": execution.pk}),
        "approval": pending_approval(execution),
        "controls": [
            {
                "name": name,
                "title": CONTROL_PAGES[name].title,
                "url": reverse(f"admin:executions_execution_{name}", args=[quote(execution.pk)]),
            }
            for name in offered_controls(execution, caller)
        ],
    }


class ControlForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Recorded in the audit log with your name.",
    )


class ApproveForm(ControlForm):
    plan_hash = forms.RegexField(regex=r"^[0-9a-f]{64}\Z", widget=forms.HiddenInput)
    force = forms.BooleanField(
        required=False,
        help_text="Lift the blast-radius guard for this batch: needed (and only honoured) "
        "when the plan is over the thresholds.",
    )


@dataclass(frozen=True)
class ControlPage:
    """A control's confirmation page: its title, its form, and the one service call its POST
    makes (returning the message to show)."""

    title: str
    form: type[forms.Form]
    perform: Callable[[str, Caller, dict[str, Any]], str]


def _approve(execution_id: str, caller: Caller, data: dict[str, Any]) -> str:
    execution_approve(
        execution_id=execution_id,
        caller=caller,
        plan_hash=data["plan_hash"],
        force=bool(data.get("force")),
        reason=data["reason"],
    )
    return f"approved the plan {data['plan_hash']}"


def _rollback(execution_id: str, caller: Caller, data: dict[str, Any]) -> str:
    execution_rollback(execution_id=execution_id, caller=caller, reason=data["reason"])
    return "rollback requested: a rollback run is queued"


def _cancel(execution_id: str, caller: Caller, data: dict[str, Any]) -> str:
    result = execution_cancel(execution_id=execution_id, caller=caller, reason=data["reason"])
    return "canceled" if result.immediate else "cancel requested: the running step finishes first"


def _retry(execution_id: str, caller: Caller, data: dict[str, Any]) -> str:
    execution_retry(execution_id=execution_id, caller=caller, reason=data["reason"])
    return "retrying: a new run is queued"


CONTROL_PAGES: dict[str, ControlPage] = {
    "approve": ControlPage("Approve the plan", ApproveForm, _approve),
    "rollback": ControlPage("Roll back", ControlForm, _rollback),
    "cancel": ControlPage("Cancel", ControlForm, _cancel),
    "retry": ControlPage("Retry", ControlForm, _retry),
}


class DeliveryKeyInline(ReadOnlyInline):
    model = DeliveryKey
    fields = ["principal", "key", "outcome", "created_at"]


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = ["id", "workflow", "status", "start_state", "lane_key", "dry_run", "created_at"]
    list_filter = ["workflow", "status", "start_state", "dry_run"]
    search_fields = ["id", "logical_identity", "lane_key"]
    inlines = [DeliveryKeyInline]
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
            return ", ".join(offered_controls(execution, caller)) or "none"

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
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                f"<path:object_id>/{name}/",
                self.admin_site.admin_view(self.control_view),
                {"control": name},
                name=f"executions_execution_{name}",
            )
            for name in CONTROL_PAGES
        ]
        return [*own, *super().get_urls()]

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
        if control not in offered_controls(execution, caller):
            self.message_user(
                request,
                f"Execution {execution.pk}: {control} is not possible now, it is "
                f"{execution.status}",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        form = page.form(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                done = page.perform(execution.pk, caller, form.cleaned_data)
            except StalePlan as exc:
                self.message_user(
                    request,
                    "The plan changed since that page was shown: the plan waiting now has "
                    f"hash {exc.current}. Review it and approve again.",
                    messages.ERROR,
                )
                execution.refresh_from_db()
                form = page.form(initial={**form.cleaned_data, "plan_hash": exc.current})
            except ForceRequired:
                self.message_user(
                    request,
                    "This plan's batch is over the blast-radius thresholds: approve it with "
                    "force, or cancel the execution.",
                    messages.ERROR,
                )
            except _REFUSALS as exc:
                self.message_user(request, f"Execution {execution.pk}: {exc}", messages.ERROR)
                return HttpResponseRedirect(back)
            else:
                self.message_user(request, f"Execution {execution.pk}: {done}", messages.SUCCESS)
                return HttpResponseRedirect(back)
        return self._control_page(request, execution, control, page, form)

    def _control_page(
        self,
        request: HttpRequest,
        execution: Execution,
        control: str,
        page: ControlPage,
        form: forms.Form,
    ) -> TemplateResponse:
        approval = pending_approval(execution) if control == "approve" else None
        if approval is not None and not form.is_bound:
            form.initial.setdefault("plan_hash", approval["plan_hash"])
        if control == "approve" and not (approval or {}).get("force_required"):
            form.fields.pop("force", None)  # only a plan over the blast radius asks for it
        context = {
            **self.admin_site.each_context(request),
            "title": f"{page.title}: {execution.pk}",
            "opts": self.opts,
            "original": execution,
            "control": control,
            "page": page,
            "form": form,
            "approval": approval,
            "mutations": _mutations_to_undo(execution) if control == "rollback" else [],
            "running": execution.current_run is not None
            and execution.current_run.status == RunStatus.RUNNING,
            "paused": execution.status == ExecutionStatus.PAUSED,
        }
        return TemplateResponse(
            request, "admin/executions/execution/control_confirmation.html", context
        )

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


def _mutations_to_undo(execution: Execution) -> list[dict[str, Any]]:
    """The mutation receipts a rollback run will undo, newest first (what the rollback page
    shows; the engine skips those an earlier rollback already undid)."""
    receipts = (
        StepReceipt.objects.filter(
            run__execution=execution, mutation__isnull=False, status=ReceiptStatus.SUCCEEDED
        )
        .exclude(run__kind=RunKind.ROLLBACK)
        .select_related("run")
        .order_by("-run__number", "-sequence")
    )
    return [_receipt_view(r) for r in receipts]


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
        fields = ["url", "description", "event_types", "active"]

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
    list_display = ["url", "description", "active", "disabled_reason", "created_at"]
    list_filter = ["active"]
    readonly_fields = [
        "id",
        "disabled_reason",
        "previous_secret_expires_at",
        "created_at",
        "updated_at",
    ]
    actions = ["rotate_secret", "redeliver_failed"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        secret = webhook_endpoint_save(obj)
        if secret is not None:
            request._alfred_secrets = [(obj, secret)]  # type: ignore[attr-defined]

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: Any = None) -> Any:
        secrets = getattr(request, "_alfred_secrets", None)
        if secrets:
            return self._show_secrets(request, secrets)
        return super().response_add(request, obj, post_url_continue)

    @admin.action(description="Send every failed delivery again", permissions=["change"])
    def redeliver_failed(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        caller = admin_caller(request)
        for endpoint in queryset:
            count = deliveries_redeliver(
                actor=caller.principal,
                actor_name=caller.name,
                reason="redelivered from the admin",
                endpoint_id=endpoint.pk,
            )
            self.message_user(request, f"{endpoint}: {count} failed deliveries will be sent again")

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


class WebhookAttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = ["number", "status_code", "duration_ms", "response_excerpt", "error", "created_at"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """Every event owed to an endpoint, with each attempt as the relay saw it; an operator
    sends one again (its webhook-id stays: a receiver that had it dedupes it)."""

    list_display = [
        "id",
        "endpoint",
        "event",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "delivered_at",
    ]
    list_filter = ["status", "endpoint"]
    search_fields = ["event__key", "event__execution__id"]
    list_select_related = ["endpoint", "event"]
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    @admin.action(description="Send the selected deliveries again", permissions=["change"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        caller = admin_caller(request)
        count = deliveries_redeliver(
            actor=caller.principal,
            actor_name=caller.name,
            reason="redelivered from the admin",
            delivery_ids=list(queryset.values_list("pk", flat=True)),
        )
        self.message_user(request, f"{count} deliveries will be sent again", messages.SUCCESS)

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

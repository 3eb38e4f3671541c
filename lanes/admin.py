"""Lanes in the admin: each with its owner (and how that owner stands), its queue, and the
operator's recovery.

Read-only: lane writes are compare-and-swaps in ``lanes.services``. Recovery goes through a
confirmation page (from the list's action, or the "Recover…" button on a lane's page) that
names the owner each lane has as the operator reads it, says who gets the lane, and asks for
a reason; the recovery then expects exactly that owner, so a lane that changed hands in the
meantime is refused rather than taken from someone the operator never saw."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from alfred.admin_base import ReadOnlyAdmin, ReadOnlyInline, admin_caller, summary
from alfred.admin_confirm import ConfirmItem, confirmation_page, reason_confirmed
from alfred.readonly import ReadOnlyInstance
from lanes.effects import lane_effects
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.selectors import lane_queue
from lanes.services import LaneOwnerMismatch, lane_recover

SEEN_OWNER = "seen_owner:"  # + lane key: the owner the confirmation page showed ("" for none)


class LaneWaiterInline(ReadOnlyInline):
    model = LaneWaiter
    fields = ["execution", "execution_status", "token", "priority", "created_at"]
    ordering = ["priority", "id"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[LaneWaiter]:
        return super().get_queryset(request).select_related("execution")

    @admin.display(description="Status")
    def execution_status(self, waiter: LaneWaiter) -> str:
        return str(waiter.execution.status)


@admin.register(Lane)
class LaneAdmin(ReadOnlyAdmin):
    list_display = [
        "key",
        "state",
        "owner_link",
        "owner_status",
        "queued",
        "reason_summary",
    ]  # what an operator needs to pick the lane to look at; when it changed is on its page
    list_filter = ["state"]
    search_fields = ["key", "owner__id"]
    list_select_related = ["owner"]
    readonly_fields = ["owner_status", "queued"]
    inlines = [LaneWaiterInline]
    actions = ["recover"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Lane]:
        return super().get_queryset(request).annotate(queued_count=Count("waiters"))

    @admin.display(description="Owner", ordering="owner_id")
    def owner_link(self, lane: Lane) -> str:
        if not lane.owner_id:
            return "—"
        url = lane_effects().execution_admin_url(lane.owner_id)
        return format_html('<a href="{}">{}</a>', url, lane.owner_id)

    @admin.display(description="Owner's status")
    def owner_status(self, lane: Lane) -> str:
        return str(lane.owner.status) if lane.owner_id and lane.owner else "—"

    @admin.display(description="Reason", ordering="reason")
    def reason_summary(self, lane: Lane) -> str:
        return summary(lane.reason)

    @admin.display(description="Queued", ordering="queued_count")
    def queued(self, lane: Lane) -> int:
        return int(getattr(lane, "queued_count", 0))

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/recover/",
                self.admin_site.admin_view(self.recover_view),
                name="lanes_lane_recover",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        lane = self.get_object(request, unquote(object_id))
        may = lane is not None and self.has_operate_permission(request)
        recover_url = (
            reverse("admin:lanes_lane_recover", args=[quote(lane.pk)])
            if may and lane is not None and lane.state != LaneState.FREE
            else ""
        )
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), "recover_url": recover_url}
        )

    def recover_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One lane's recovery: the same confirmation as the list's action."""
        if not self.has_operate_permission(request):
            raise PermissionDenied
        key = unquote(object_id)
        lanes = self.get_queryset(request).filter(key=key)
        if not lanes.exists():
            raise Http404(f"no lane {key!r}")
        page = self.recover(request, lanes)
        if page is not None:
            return page
        return HttpResponseRedirect(reverse("admin:lanes_lane_change", args=[quote(key)]))

    @admin.action(
        description="Recover: release to the next in line (audited)…", permissions=["operate"]
    )
    def recover(self, request: HttpRequest, queryset: QuerySet[Lane]) -> Any:
        lanes = list(queryset.select_related("owner").order_by("key"))
        form, reason = reason_confirmed(request)
        if reason is None:
            return confirmation_page(
                self,
                request,
                action="recover",
                title="Recover lanes",
                intro="Each lane is recovered from the owner named here: if it has another "
                "owner by the time you confirm, that lane is left alone.",
                items=[_recovery_item(lane) for lane in lanes],
                form=form,
                submit="Recover",
            )
        actor = admin_caller(request).principal
        for lane in lanes:
            seen = request.POST.get(f"{SEEN_OWNER}{lane.key}")
            if seen is None:
                continue  # not on the page the operator confirmed
            try:
                recovered = lane_recover(
                    key=lane.key, expected_owner=seen or None, actor=actor, reason=reason
                )
            except (LaneOwnerMismatch, ReadOnlyInstance) as exc:
                self.message_user(request, f"{lane.key}: {exc}", messages.WARNING)
                continue
            done = (
                f"{recovered.resumed} has it back and resumes"
                if recovered.resumed
                else f"released to {recovered.owner or 'nobody'}"
            )
            self.message_user(request, f"{lane.key}: {done}", messages.SUCCESS)
        return None


def _recovery_item(lane: Lane) -> ConfirmItem:
    if lane.state == LaneState.FREE:
        return ConfirmItem(lane, ["free: nothing to recover."], skipped=True)
    queue = lane_queue(lane.key)
    owner = f"held by {lane.owner_id} ({lane.owner.status})" if lane.owner else "held by nobody"
    following = (
        f"the next in line, {queue[0].execution_id} ({len(queue)} queued)"
        if queue
        else "nobody (the queue is empty)"
    )
    standing = lane_effects().execution_standing(lane.owner_id) if lane.owner_id else None
    if standing is not None and standing.active:
        fate = (
            f"its owner is {standing.status}: it keeps the lane and its run is sent again (it "
            f"resumes where it is); {len(queue)} wait."
        )
    else:
        fate = f"it goes to {following}."
    reason = f" Blocked: {lane.reason}." if lane.reason else ""
    return ConfirmItem(
        lane,
        [f"{lane.state}, {owner}.{reason} Recovered, {fate}"],
        hidden={f"{SEEN_OWNER}{lane.key}": lane.owner_id or ""},
    )

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from alfred.admin_base import ReadOnlyAdmin, ReadOnlyInline, admin_caller
from alfred.readonly import ReadOnlyInstance
from lanes.models import Lane, LaneState, LaneWaiter
from lanes.services import LaneOwnerMismatch, lane_recover


class LaneWaiterInline(ReadOnlyInline):
    model = LaneWaiter
    fields = ["execution", "token", "priority", "created_at"]
    ordering = ["priority", "id"]


@admin.register(Lane)
class LaneAdmin(ReadOnlyAdmin):
    """Read-only: lane writes are compare-and-swaps in ``lanes.services``; operator recovery
    is an audited action, which names the owner each lane had when the page was read."""

    list_display = ["key", "state", "owner", "owner_token", "version", "reason", "updated_at"]
    list_filter = ["state"]
    search_fields = ["key", "owner__id"]
    inlines = [LaneWaiterInline]
    actions = ["recover"]

    @admin.action(
        description="Recover: release to the next in line (audited)", permissions=["operate"]
    )
    def recover(self, request: HttpRequest, queryset: QuerySet[Lane]) -> None:
        actor = admin_caller(request).principal
        for lane in queryset.exclude(state=LaneState.FREE):
            try:
                recovered = lane_recover(
                    key=lane.key,
                    expected_owner=lane.owner_id,
                    actor=actor,
                    reason="recovered from the admin",
                )
            except (LaneOwnerMismatch, ReadOnlyInstance) as exc:
                self.message_user(request, f"{lane.key}: {exc}", messages.WARNING)
                continue
            self.message_user(
                request, f"{lane.key}: released to {recovered.owner or 'nobody'}", messages.SUCCESS
            )

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from lanes.models import Lane, LaneState, LaneWaiter
from lanes.services import LaneOwnerMismatch, lane_recover


class LaneWaiterInline(admin.TabularInline):
    model = LaneWaiter
    extra = 0
    can_delete = False
    fields = ["execution", "token", "priority", "created_at"]
    readonly_fields = ["execution", "token", "priority", "created_at"]
    ordering = ["priority", "id"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Lane)
class LaneAdmin(admin.ModelAdmin):
    """Read-only: lane writes are compare-and-swaps in ``lanes.services``; operator recovery
    arrives as an audited admin action."""

    list_display = ["key", "state", "owner", "owner_token", "version", "reason", "updated_at"]
    actions = ["recover"]

    @admin.action(description="Recover: release to the next in line (audited)")
    def recover(self, request: HttpRequest, queryset: QuerySet[Lane]) -> None:
        for lane in queryset.exclude(state=LaneState.FREE):
            try:
                new_owner = lane_recover(
                    key=lane.key,
                    expected_owner=lane.owner_id,
                    actor=f"user:{request.user.pk}",
                    reason="recovered from the admin",
                )
            except LaneOwnerMismatch as exc:
                self.message_user(request, str(exc), messages.WARNING)
                continue
            self.message_user(
                request, f"{lane.key}: released to {new_owner or 'nobody'}", messages.SUCCESS
            )

    list_filter = ["state"]
    readonly_fields = ["key", "state", "owner", "owner_token", "version", "reason", "updated_at"]
    inlines = [LaneWaiterInline]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

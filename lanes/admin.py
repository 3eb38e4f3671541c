from django.contrib import admin

from lanes.models import Lane, LaneWaiter


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

    list_display = ["key", "state", "owner", "owner_token", "version", "updated_at"]
    list_filter = ["state"]
    readonly_fields = ["key", "state", "owner", "owner_token", "version", "reason", "updated_at"]
    inlines = [LaneWaiterInline]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

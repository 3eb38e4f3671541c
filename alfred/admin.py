"""Tokens in the admin (listed, revoked) and the beat schedule: read-only, and shown to a
superuser only. The scanners and the reconciler are part of Alfred's guarantees, not settings
to switch off from a page; the schedule is ``CELERY_BEAT_SCHEDULE`` in settings, so an
operator or a viewer, who could never change it here, is not shown a group of pages about it."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django_celery_beat import admin as beat_admin
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from alfred.admin_base import ReadOnlyAdmin
from alfred.models import ApiToken
from alfred.readonly import ReadOnlyInstance
from alfred.tokens import token_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are created with `manage.py alfred_token create` (the secret is shown once
    there); here they are listed and revoked, never edited or brought back."""

    list_display = ["name", "role", "principal_id", "prefix", "created_at", "revoked_at"]
    list_filter = ["role", "revoked_at"]
    search_fields = ["name", "prefix", "principal_id"]
    exclude = ["digest"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens", permissions=["operate"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        names = list(queryset.filter(revoked_at__isnull=True).values_list("name", flat=True))
        try:
            revoked = sum(token_revoke(name=name) for name in names)
        except ReadOnlyInstance as exc:
            self.message_user(request, str(exc), messages.WARNING)
            return
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)


class _SuperuserOnly:
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)


def _read_only(base: type[admin.ModelAdmin]) -> type[admin.ModelAdmin]:
    return type(f"ReadOnly{base.__name__}", (_SuperuserOnly, ReadOnlyAdmin, base), {"actions": []})


for _model, _base in [
    (PeriodicTask, beat_admin.PeriodicTaskAdmin),
    (ClockedSchedule, beat_admin.ClockedScheduleAdmin),
    (CrontabSchedule, beat_admin.CrontabScheduleAdmin),
    (SolarSchedule, beat_admin.SolarScheduleAdmin),
    (IntervalSchedule, beat_admin.IntervalScheduleAdmin),
]:
    admin.site.unregister(_model)
    admin.site.register(_model, _read_only(_base))

"""What every Alfred admin page shares (docs/contract.md, "Authentication, roles and ownership").

- Roles come from permissions, never from ``is_staff``: the ``alfred-viewers`` group has the
  ``view_*`` permissions, ``alfred-operators`` also ``executions.operate``, which every
  action that changes something declares (``allowed_permissions = ("operate",)``).
- Records are read-only here: receipts, events, audit entries, runs and stages are what
  happened; lanes and tokens change only through their services (compare-and-swap), so
  their change forms are read-only too and a Save cannot rewrite a row.
- A read-only instance (:mod:`alfred.readonly`) offers no write and no action at all.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ERROR_FLAG
from django.http import HttpRequest, HttpResponseRedirect
from django.utils.html import format_html
from django.utils.text import Truncator

from alfred.principals import OPERATE_PERMISSION, Caller, caller_of
from alfred.readonly import read_only


def admin_caller(request: HttpRequest) -> Caller:
    caller = caller_of(request.user)
    if caller is None:  # the admin let in a user with no Alfred permission: act as nobody
        return Caller(f"user:{request.user.pk}", "", request.user.get_username())
    return caller


def summary(text: str, words: int = 24) -> str:
    """Free text (a reason) for a list's cell: its first words, the whole of it on hover (the
    object's own page shows it all)."""
    return (
        format_html('<span title="{}">{}</span>', text, Truncator(text).words(words))
        if text
        else "—"
    )


class OperatesMixin:
    """``has_operate_permission`` for ``allowed_permissions = ("operate",)``, and a changelist
    that answers a crafted filter with Django's "invalid filter" redirect, not a 500."""

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return not read_only() and request.user.has_perm(OPERATE_PERMISSION)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        try:
            return super().changelist_view(request, extra_context)  # type: ignore[misc]
        except OverflowError:  # a date-hierarchy year past datetime's range
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")


class ReadOnlyAdmin(OperatesMixin, admin.ModelAdmin):
    """A record: listed and shown, never added, changed or deleted from here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Every shown field, the non-editable ones (ids, auto timestamps) included: a view-only
        # inline still builds a form from ``fields`` and refuses non-editable ones.
        return self.fields or ()

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class WritableAdmin(OperatesMixin, admin.ModelAdmin):
    """Configuration that people edit (webhook endpoints): Django's model permissions, and
    nothing on a read-only instance."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not read_only() and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not read_only() and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not read_only() and super().has_delete_permission(request, obj)

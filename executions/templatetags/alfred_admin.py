"""The admin index's "waiting for you" box: pending approvals and lanes to recover, each a
click from where it is handled (:func:`executions.admin.pages.approvals_pending`)."""

from __future__ import annotations

from typing import Any

from django import template

from executions.admin.pages import approvals_pending

register = template.Library()


@register.inclusion_tag("admin/alfred/attention.html", takes_context=True)
def alfred_attention(context: dict[str, Any]) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.has_perm("executions.view_execution"):
        return {"attention": None}
    return {"attention": approvals_pending()}

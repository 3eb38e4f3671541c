"""Intermediate confirmation for the admin's bulk actions, in the way of Django's
``delete_selected``: the action's first POST (from the changelist) answers a page that lists,
for each selected object, what will happen to it, and asks for a reason; the second POST
(``confirm``) performs the action with that reason, which its service records in the audit
log. Nothing changes until the second POST.

An item may carry hidden values that the page read and the action must check again, such as
the owner a lane had when the operator looked at it: the action compares what it sees under
its lock with what the operator saw, and refuses when they differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib.admin import helpers
from django.contrib.admin.options import ModelAdmin
from django.contrib.admin.utils import quote
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from alfred.text import MAX_REASON_LENGTH, REASON_REQUIRED, reason_problem

CONFIRM = "confirm"


class ReasonField(forms.CharField):
    """An operator's reason typed in the admin, under the rule of every face
    (:func:`alfred.text.reason_problem`): judged as typed (at most ``MAX_REASON_LENGTH``
    characters, no control character but tab and newline), stored trimmed; a required one
    must hold something besides whitespace. Whether it is required is the control's
    (``required``), as on the API and the command line."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_REASON_LENGTH)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3, "cols": 80}))
        kwargs.setdefault("help_text", "Recorded in the audit log with your name.")
        # Judged as typed, trimmed after (clean): trimmed first, 1,000 characters and a
        # trailing space would pass here and fail on the API.
        kwargs["strip"] = False
        super().__init__(**kwargs)
        self.validators = []  # the length is reason_problem's, measured the same way

    def clean(self, value: Any) -> Any:
        text = "" if value in self.empty_values else str(value)
        problem = reason_problem(text, required=self.required)
        if problem is not None:
            code = "required" if problem == REASON_REQUIRED else "free_text"
            raise forms.ValidationError(problem, code=code)
        return text.strip()


class ReasonForm(forms.Form):
    reason = ReasonField()


class OptionalReasonForm(forms.Form):
    """For a control whose reason is optional (``Control.reason_required`` false)."""

    reason = ReasonField(required=False)


@dataclass(frozen=True)
class ConfirmItem:
    """One selected object: what it is and what the action will do to it."""

    obj: Any
    lines: Sequence[str]
    hidden: dict[str, str] = field(default_factory=dict)  # name → value the action checks
    steps: Sequence[str] = ()  # an ordered list under the item (a rollback's compensations)
    skipped: bool = False  # the action will not touch it (said in ``lines``)


def reason_confirmed(
    request: HttpRequest, *, required: bool = True
) -> tuple[forms.Form, str | None]:
    """The reason form of a confirmation POST, and its reason once valid (None on the
    changelist's first POST, which only asks; "" for an optional reason left empty)."""
    form_class = ReasonForm if required else OptionalReasonForm
    form = form_class(request.POST if CONFIRM in request.POST else None)
    reason = form.cleaned_data["reason"] if form.is_bound and form.is_valid() else None
    return form, reason


def confirmation_page(
    model_admin: ModelAdmin[Any],
    request: HttpRequest,
    *,
    action: str,
    title: str,
    intro: str,
    items: Sequence[ConfirmItem],
    form: forms.Form,
    submit: str,
) -> TemplateResponse:
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "opts": opts,
        "action": action,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "items": [
            {
                "item": item,
                "label": str(item.obj),
                "url": reverse(
                    f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(item.obj.pk)]
                ),
            }
            for item in items
        ],
        "acting_on": sum(1 for item in items if not item.skipped),
        "form": form,
        "submit": submit,
        "changelist_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
    }
    return TemplateResponse(request, "admin/alfred/action_confirmation.html", context)

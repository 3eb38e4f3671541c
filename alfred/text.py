"""Free text a client sends (an operator's reason for the audit log), as every face of the
project accepts it: the API's serializers (:class:`FreeTextField`), the admin's reason field
(``alfred.admin_confirm.ReasonField``) and the management commands' ``--reason``
(:func:`reason_argument`) all judge it by :func:`reason_problem`: one rule, one notion of
required (something besides whitespace). Which controls require a reason is declared once, on
the control (``executions.controls.Control.reason_required``); a lane's recovery always does."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from rest_framework import serializers
from rest_framework.fields import empty

MAX_REASON_LENGTH = 1000
# C0 controls but NUL (which CharField refuses itself, as it does lone surrogates), tab and
# newline; DEL and C1; and the bidirectional overrides and isolates that would make an audit
# entry read differently from what it holds.
_FORBIDDEN = ((0x01, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0x202A, 0x202E), (0x2066, 0x2069))


def _class(ranges: tuple[tuple[int, int], ...]) -> str:
    """A character class's ranges as ``\\uXXXX`` escapes, which Python's ``re`` and ECMA
    regular expressions both read."""
    return "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in ranges)


_FORBIDDEN_IN_TEXT = re.compile(f"[{_class(_FORBIDDEN)}]")


def free_text_problem(value: str) -> str | None:
    """What breaks the rule for every free text an operator sends (reasons, on the API and in
    the admin): no control character but tab and newline, no bidirectional override; the
    length is the field's. None: nothing."""
    found = _FORBIDDEN_IN_TEXT.search(value)
    if found is None:
        return None
    return (
        f"Control characters other than tab and newline are not allowed "
        f"(found U+{ord(found.group()):04X})."
    )


REASON_REQUIRED = "A reason is required: say why, in something besides whitespace."


def reason_problem(value: str, *, required: bool) -> str | None:
    """What is wrong with ``value`` as a reason, judged as sent (as the API judges it): longer
    than :data:`MAX_REASON_LENGTH` (refused, never cut), a character
    :func:`free_text_problem` refuses, or, ``required``, nothing besides whitespace. None:
    fine; it is stored trimmed (:func:`reason_clean`)."""
    if len(value) > MAX_REASON_LENGTH:
        return f"At most {MAX_REASON_LENGTH:,} characters (this has {len(value):,})."
    problem = free_text_problem(value)
    if problem is not None:
        return problem
    if required and not value.strip():
        return REASON_REQUIRED
    return None


def reason_clean(value: str, *, required: bool) -> str:
    """``value`` trimmed, once :func:`reason_problem` finds nothing wrong (else ValueError
    with what it found)."""
    problem = reason_problem(value, required=required)
    if problem is not None:
        raise ValueError(problem)
    return value.strip()


def reason_argument(*, required: bool) -> Callable[[str], str]:
    """An argparse ``type`` for a command's ``--reason``: the rule above, a refusal being
    argparse's usage error (exit status 2) with what is wrong."""

    def parse(text: str) -> str:
        try:
            return reason_clean(text, required=required)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "reason"  # argparse names the type in its messages
    return parse


def check_free_text(value: str) -> None:
    """:func:`free_text_problem` as a serializer field's validator."""
    problem = free_text_problem(value)
    if problem is not None:
        raise serializers.ValidationError(problem)


# The same rule as ECMA regular expressions, for the OpenAPI schema (NUL included: DRF's
# CharField refuses it too); a required text also holds something besides whitespace.
_FORBIDDEN_CLASS = _class(((0x00, 0x08), *_FORBIDDEN[1:]))
FREE_TEXT_PATTERN = f"^[^{_FORBIDDEN_CLASS}]*$"
REQUIRED_TEXT_PATTERN = f"^[^{_FORBIDDEN_CLASS}]*[^\\s{_FORBIDDEN_CLASS}][^{_FORBIDDEN_CLASS}]*$"


class FreeTextField(serializers.CharField):
    """A client's free text (a reason for the audit log): a string of at most ``max_length``
    characters (longer is refused, never cut: the audit log keeps what was sent or nothing)
    that passes :func:`check_free_text`, stored with surrounding whitespace trimmed. A
    required one (``allow_blank=False``) must hold something besides whitespace.

    The limits apply to the text as sent, so the schema can state them exactly
    (:class:`alfred.schema.FreeTextFieldSchema`): what fits the schema is accepted."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_REASON_LENGTH)
        kwargs["trim_whitespace"] = False
        super().__init__(**kwargs)
        self.validators.append(check_free_text)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):  # CharField would take 0 as "0"; the schema says string
            self.fail("invalid")
        return str(super().to_internal_value(data))

    def run_validation(self, data: Any = empty) -> Any:
        # The validators (length, control characters) judge the text as sent; only then is
        # it trimmed. Trimmed first, a leading vertical tab or a 1,001st character that is a
        # space would pass.
        value = super().run_validation(data)
        if not isinstance(value, str):
            return value  # None where null is allowed
        text = value.strip()
        if not text and not self.allow_blank:
            self.fail("blank")
        return text

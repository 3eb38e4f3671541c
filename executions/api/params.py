"""What the API reads from paths, headers and query strings, checked before any query:
execution ids, the Idempotency-Key, integers, and cursors (a bad one is a 400 problem, never a
database error or a silent default)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter
from rest_framework import pagination
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

from alfred.problems import Problem

# What alfred.ids makes: "exe_" and a ULID (26 Crockford base32 characters).
EXECUTION_ID_RE = re.compile(r"exe_[0-9A-HJKMNP-TV-Z]{26}")
# Printable ASCII without a comma and without spaces at the ends; long enough for a UUID, a
# ULID or a hash. No comma: a proxy or server joins two Idempotency-Key headers into "one,two",
# which would otherwise be accepted as a third key that neither request meant.
IDEMPOTENCY_KEY_RE = re.compile(
    r"[\x21-\x2b\x2d-\x7e](?:[\x20-\x2b\x2d-\x7e]{0,253}[\x21-\x2b\x2d-\x7e])?"
)
# An integer query parameter: ASCII digits only (int() also takes "٣", " 3", "1_000").
_DIGITS = re.compile(r"[0-9]{1,9}")
MAX_INT_PARAM = 999_999_999


def check_execution_id(execution_id: str) -> str:
    """``execution_id`` if an execution could have it; else 404 before any query (a NUL or a
    megabyte in a path is an id that cannot exist, not a database error)."""
    if not EXECUTION_ID_RE.fullmatch(execution_id):
        raise Http404
    return execution_id


def idempotency_key(request: Request) -> str:
    """The request's Idempotency-Key, or a 400 problem when it is missing or not one key."""
    key = request.headers.get("Idempotency-Key")
    if not key:
        raise Problem("idempotency_key_missing", "Send an Idempotency-Key header.")
    if not IDEMPOTENCY_KEY_RE.fullmatch(key):
        raise Problem(
            "idempotency_key_invalid",
            "Idempotency-Key must be one key: 1–255 printable ASCII characters without a "
            "comma (two Idempotency-Key headers arrive joined by a comma).",
        )
    return key


def int_parameter(
    name: str, default: int, low: int, high: int | None, what: str
) -> OpenApiParameter:
    """The OpenAPI declaration of what :func:`int_param` reads, bounds included."""
    most = MAX_INT_PARAM if high is None else high
    return OpenApiParameter(
        name,
        {"type": "integer", "minimum": low, "maximum": most, "default": default},
        description=f"{what} ({low}–{most}, default {default}).",
    )


def int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = int(raw) if _DIGITS.fullmatch(raw) else low - 1
    if value < low or (high is not None and value > high):
        bound = f"{low}–{high}" if high is not None else f"≥ {low}"
        raise Problem(
            "malformed_request",
            f"{name} must be an integer {bound}.",
            errors=[{"field": name, "message": f"integer {bound}"}],
        )
    return value


def choice_param(request: Request, name: str, choices: Sequence[str], told: str = "") -> str | None:
    """A query parameter that must be one of ``choices`` (None when absent); anything else is
    a 400 problem saying what it must be (``told``: how, when the list is not the way)."""
    value = request.query_params.get(name)
    if value is None or value in choices:
        return value
    raise Problem(
        "malformed_request",
        told or f"{name} must be one of " + ", ".join(choices) + ".",
        errors=[{"field": name, "message": f"unknown {name}"}],
    )


WORKFLOW_TOLD = "workflow must be the name of a workflow; GET /api/v1/workflows lists them."


class StrictCursorPagination(pagination.CursorPagination):
    """Cursor pages whose bad input is a 400 problem, not a silent default or a 404.

    A cursor is plain text, ``<direction><offset>[.<position>]``: ``n`` pages on, ``p`` back;
    the offset (0–999) counts rows past a position shared by several rows; the position is a
    value of the ordering field (an execution id, an audit entry's number). The whole form is
    declared as the parameter's pattern and every text that fits it is a page: a cursor that
    does not fit is refused, never read as the first page."""

    page_size = 50
    max_page_size = 200
    page_size_query_param = "limit"
    position_pattern: str  # a regular expression for the ordering field's values

    def get_page_size(self, request: Request) -> int:
        return int_param(request, "limit", self.page_size, 1, self.max_page_size)

    @classmethod
    def cursor_pattern(cls) -> str:
        """The cursor's form (no named groups: it is the OpenAPI pattern too, ECMA syntax)."""
        offset = "0|[1-9][0-9]{0,2}"
        return rf"([np])({offset})(?:\.({cls.position_pattern}))?"

    def encode_cursor(self, cursor: pagination.Cursor) -> str:
        text = f"{'p' if cursor.reverse else 'n'}{cursor.offset}"
        if cursor.position is not None:
            text += f".{cursor.position}"
        return replace_query_param(str(self.base_url), self.cursor_query_param, text)

    def decode_cursor(self, request: Request) -> pagination.Cursor | None:
        raw = request.query_params.get(self.cursor_query_param)
        if raw is None:
            return None
        match = re.fullmatch(self.cursor_pattern(), raw)
        if match is None:
            raise Problem(
                "malformed_request",
                "The cursor is not one this API gave out; follow the `next` link as it is.",
                errors=[{"field": "cursor", "message": "invalid cursor"}],
            )
        # DRF's stubs type the position as an int; DRF keeps it as the text it filters by.
        position: Any = match[3]
        return pagination.Cursor(offset=int(match[2]), reverse=match[1] == "p", position=position)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        cursor, limit = super().get_schema_operation_parameters(view)
        cursor["description"] = "A page's position: follow the `next` or `previous` link."
        cursor["schema"] = {"type": "string", "pattern": f"^{self.cursor_pattern()}$"}
        limit["description"] = f"Page size, 1–{self.max_page_size} (default {self.page_size})."
        limit["schema"] = {
            "type": "integer",
            "minimum": 1,
            "maximum": self.max_page_size,
            "default": self.page_size,
        }
        return [cursor, limit]


class ExecutionCursorPagination(StrictCursorPagination):
    ordering = "-id"
    position_pattern = EXECUTION_ID_RE.pattern


class AuditEntryCursorPagination(StrictCursorPagination):
    # By number, not time: unique and in the order entries were written.
    ordering = "-id"
    position_pattern = "[1-9][0-9]{0,17}"


class DriftCursorPagination(StrictCursorPagination):
    ordering = "-id"  # a drift's id sorts as it was found
    position_pattern = r"dft_[0-9A-HJKMNP-TV-Z]{26}"
